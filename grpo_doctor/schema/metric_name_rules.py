"""Metric names of any logger mapped onto the step metrics' vocabulary (metric_vocab.py) by rules, not by
one list per framework: `Total rewards mean` -> reward, `rewards/accuracy_reward/std` -> a reward function's
std, `actor/entropy` -> entropy, `Mean Generation Length` -> completion_length_mean.

A name is cut into lower-case words (at `/`, `_`, spaces, punctuation and camelCase); each canonical metric
is recognised by its head word (reward, loss, entropy, kl, grad + norm, length, lr) and the other words must
be qualifiers that leave its meaning unchanged (train, actor, policy, mean, total, ...). Any other word
(`reward_loss`, `value_loss`, `kl_loss`, `entropy_coef`) means a different quantity: the name is left out.
Evaluation names (eval, val, test) are left out. A name the vocabulary knows as it is (verl's
`critic/score/mean`, TRL's `completions/mean_length`) is kept as it is.

RL outside GRPO prints some of the same words with other meanings: a classic PPO table's `ep_rew_mean`
and `entropy_loss`, Dreamer's `kl` and `reward_loss`, ML-Agents' `Mean Reward` / `Std of Reward` over
episodes. The rollout rules must not judge those, so `rollout_names_allowed(names)` asks a record for a
sign of LLM rollouts (completion or response lengths, tokens, KL to a reference, groups, per-function
rewards) and for no sign of episodes (episode, return, fps, timesteps, value or critic losses). A record
without it keeps only loss and grad_norm, where NaN / inf is a fault whatever trained; `episode_metrics`
says whether such a record measures episodes at all (read, not judged).

Typical use:
    metric_name("Total rewards mean")              # "reward"
    metric_name("rewards/accuracy_reward/std")     # "rewards/accuracy_reward/std" (a per-function std)
    metric_name("r1_count_xml std")                # "rewards/r1_count_xml/std"
    rollout_names_allowed(["ep_rew_mean", "loss"]) # False
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from grpo_doctor.schema.metric_vocab import ALIASES, FUNC_STD, SPANS

_KNOWN = frozenset({key for keys in ALIASES.values() for key in keys} | {c for _, hi, lo in SPANS for c in (hi, lo)}
                   | {"reward_std", "reward_func_std_max", *(name for name, _, _ in SPANS)})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_EVALUATION = frozenset({"eval", "evaluation", "val", "valid", "validation", "test", "testing", "dev"})
# Words that qualify a metric without changing what it is.
_MODES = frozenset({"train", "training", "actor", "policy", "rollout", "rollouts", "metrics", "metric", "step",
                    "batch", "avg", "average", "mean", "total", "overall", "current", "cur", "per", "of", "the",
                    "all", "global", "on", "grpo"})
_STD = frozenset({"std", "stdev", "stddev", "sigma"})
_REWARD = frozenset({"reward", "rewards"})
_GROUP = frozenset({"group", "grouped", "groups"})
_LENGTH_OF = frozenset({"completion", "completions", "response", "responses", "generation", "generated", "gen",
                        "output", "sample", "samples"})
_LENGTH = frozenset({"length", "len", "lengths", "tokens"})
# Signs of LLM rollouts, and of episodes (classic RL); see the module docstring. A sign of generated text
# outweighs one of episodes (verl's PPO logs critic/vf_loss beside response_length/mean).
_TEXT_SIGNS = frozenset({"completion", "completions", "response", "responses", "generation", "generations",
                         "generated", "tokens", "token", "prompt", "prompts", "grpo"})
_ROLLOUT_SIGNS = frozenset({"kl", "group", "grouped", "groups", "advantage", "advantages", "rewards", "frac",
                            "clipped"})
_EPISODE_SIGNS = frozenset({"ep", "eps", "episode", "episodes", "episodic", "return", "returns", "rew", "fps",
                            "timesteps", "timestep", "trajs", "frames", "explained", "vf", "env", "envs"})
STEP_NAMES = ("global_step", "step", "iteration", "iter", "epoch")  # what counts steps, most telling first
_STEP_WORDS = {("global", "step"): "global_step", ("step",): "step", ("iteration",): "iteration",
               ("iter",): "iter", ("epoch",): "epoch", ("it",): "iter"}


@functools.lru_cache(maxsize=4096)  # a log prints the same names every step
def words(name: str) -> tuple[str, ...]:
    """`name` as lower-case words: "Total rewards mean" and "totalRewardsMean" both give total/rewards/mean."""
    return tuple(w.lower() for w in _WORD.findall(name))


@functools.lru_cache(maxsize=4096)  # a log prints the same names every step
def step_name(name: str) -> str | None:
    """"global_step", "step", "iteration", "iter" or "epoch" for a name that counts steps (`train/global_step`,
    `Iteration`, `_step`), else None."""
    found = [w for w in words(name) if w not in ("train", "training", "trainer")]
    return _STEP_WORDS.get(tuple(found))


@functools.lru_cache(maxsize=4096)  # a log prints the same names every step
def is_evaluation(name: str) -> bool:
    """Whether `name` is an evaluation's metric (eval/, val_, Test ...)."""
    return bool(_EVALUATION.intersection(words(name)))


@functools.lru_cache(maxsize=4096)  # a log prints the same names every step
def metric_name(name: str) -> str | None:
    """The name to log `name` under: itself where the vocabulary knows it, else the canonical name its words
    make, a per-function reward std as `rewards/<function>/std`; None for anything else."""
    name = name.strip().strip("'\"")
    if name in _KNOWN or FUNC_STD.match(name):
        return name
    bare = name[len("train/"):] if name.startswith("train/") else name
    if bare in _KNOWN or FUNC_STD.match(bare):
        return bare
    found = words(name)
    if not found or _EVALUATION.intersection(found):
        return None
    return _by_words(found)


def _by_words(found: tuple[str, ...]) -> str | None:
    head = set(found)
    rest = head - _MODES
    if head & _REWARD:
        return _reward(found, rest - _REWARD)
    if "loss" in head:
        return "loss" if rest <= {"loss", "pg"} else None
    if "entropy" in head:
        return "entropy" if rest <= {"entropy", "token", "tokens"} else None
    if "kl" in head:
        return "kl" if rest <= {"kl", "div", "divergence", "ref", "reference"} else None
    if {"grad", "norm"} <= head or {"gradient", "norm"} <= head:
        return "grad_norm" if rest <= {"grad", "gradient", "norm", "l2"} else None
    if head & _LENGTH_OF and head & _LENGTH:
        stat = "min" if "min" in head else "max" if "max" in head else "mean"
        return f"completion_length_{stat}" if rest - {"min", "max"} <= _LENGTH_OF | _LENGTH else None
    if rest == {"lr"} or rest == {"learning", "rate"}:
        return "learning_rate"
    return None


def _reward(found: tuple[str, ...], other: set[str]) -> str | None:
    """A reward's mean or std: the whole reward's, or one reward function's (its own words name it)."""
    std = bool(other & _STD)
    other -= _STD | _GROUP | {"min", "max", "sum"}
    if other & {"loss", "model", "pred", "prediction", "head", "coef", "scale", "weight"} or {"min", "max"} & set(found):
        return None
    if other:  # a reward function's own name: only its std is read (reward_func_std_max)
        function = "_".join(w for w in found if w in other)
        return f"rewards/{function}/std" if std else None
    if std:
        return "reward_std_group_mean" if _GROUP & set(found) else "reward_std_batch"
    return "reward"


def canonical_of(name: str) -> str:
    """The canonical metric a name `metric_name` kept is read as (`actor/pg_loss` -> loss; a span's column,
    a per-function std and a canonical name itself stay as they are)."""
    return _CANONICAL_OF.get(name, name)


_CANONICAL_OF = {key: canonical for canonical, keys in ALIASES.items() for key in keys}


def rollout_names_allowed(names: Iterable[str]) -> bool:
    """Whether a record's names show LLM rollouts and no episodes (module docstring)."""
    return _allowed(tuple(names))


@functools.lru_cache(maxsize=1024)
def _allowed(names: tuple[str, ...]) -> bool:
    every = {w for name in names for w in words(name)}
    return bool(every & _TEXT_SIGNS) or (bool(every & _ROLLOUT_SIGNS) and not every & _EPISODE_SIGNS)


def episode_metrics(names: Iterable[str]) -> bool:
    """Whether a record without rollout signs still measures training by episodes (`episode_reward`,
    `mean_episode_reward`, a table's `episodes` beside `mean`): read, though no name maps onto the vocabulary."""
    every = {w for name in names for w in words(name)}
    return bool(every & _EPISODE_SIGNS) and bool(every & _EPISODE_MEASURES)


_EPISODE_MEASURES = frozenset({"reward", "rewards", "rew", "return", "returns", "score", "scores", "loss", "mean"})

# Kept from a record without rollout signs: a NaN / inf there is a fault whatever was trained.
ALWAYS_KEPT = ("loss", "grad_norm", "learning_rate", "epoch")
