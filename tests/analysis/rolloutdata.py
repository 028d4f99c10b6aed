"""Rank files with step metrics, rollout and rng records (schema dataclasses), for the degenerate-rollout rules."""
from __future__ import annotations

import hashlib
from pathlib import Path

from rundata import common, header, write_rank

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.rules import RULES
from grpo_doctor.schema import Rng, Rollout, Step

DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"
METRIC_LOGS = Path(__file__).resolve().parents[1] / "data" / "metric_logs"
ROLLOUT_IDS = ("seed-collision", "zero-std-groups", "constant-reward", "zero-kl", "dead-step", "length-collapse",
               "entropy-collapse", "nan-loss", "stale-rollout-weights")


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def step(rank: int, n: int, host: str | None = None, **metrics) -> Step:
    return Step(**common(rank, step=n, t=100.0 + 10 * n, host=host), metrics=metrics)


def rollout(rank: int, n: int, prompts: list[str], completions: list[str], host: str | None = None,
            temperature: float | None = 1.0, **stats) -> Rollout:
    """A rank's step: completion i answers prompts[i]; groups are the distinct prompts in order."""
    groups = list(dict.fromkeys(prompts))
    by_group = {p: [c for q, c in zip(prompts, completions, strict=True) if q == p] for p in groups}
    dup = sum((len(v) - len(set(v))) / len(v) for v in by_group.values()) / len(groups)
    fields = dict(num_completions=len(completions), num_groups=len(groups),
                  completion_hashes=[text_hash(c) for c in completions], prompt_hashes=[text_hash(p) for p in prompts],
                  group_ids=[groups.index(p) for p in prompts], duplicate_rate=dup, distinct_1=None, distinct_2=None,
                  edit_distance=None, length_mean=sum(map(len, completions)) / len(completions),
                  length_min=min(map(len, completions)), length_max=max(map(len, completions)), truncated_frac=0.0,
                  reward_mean=0.5, reward_std=0.5, group_reward_std_mean=0.5, zero_std_frac=0.0,
                  temperature=temperature, max_length=64,
                  samples=[{"group": 0, "prompt": prompts[0], "completion": completions[0], "reward": 0.5}])
    fields.update(stats)
    return Rollout(**common(rank, step=n, t=100.0 + 10 * n + 1, host=host), **fields)


def rng(rank: int, n: int | None, tag: str = "step", host: str | None = None, **fields) -> Rng:
    return Rng(**common(rank, step=n, t=100.0 + 10 * (n or 0) + 2, host=host), tag=tag, **fields)


def write_run(run_dir: Path, per_rank: dict[int, list], world_size: int | None = None) -> Path:
    """One rank file per entry: a header, then the records given."""
    for rank, records in per_rank.items():
        write_rank(run_dir, rank, [header(rank, world_size=world_size or len(per_rank))] + records)
    return run_dir


def metrics_run(run_dir: Path, metrics: list[dict], num_ranks: int = 2) -> Path:
    """Every rank logs `metrics[n]` at step n (GRPO's reward statistics are global anyway)."""
    return write_run(run_dir, {r: [step(r, n, **m) for n, m in enumerate(metrics)] for r in range(num_ranks)})


def healthy_metrics(num_steps: int = 20) -> list[dict]:
    """Like the reference trainer's healthy runs: rewards vary, some groups zero-std, KL grows from 0,
    the loss near 0 at times (normal in GRPO), lengths and entropy drift a little."""
    out = []
    for n in range(num_steps):
        out.append({"loss": (0.0, 0.0031, -0.2, 1e-7, 0.15)[n % 5], "reward": 0.2 + 0.01 * n,
                    "reward_std": 0.3 + 0.02 * (n % 3), "frac_reward_zero_std": (0.25, 0.5, 0.0, 1.0, 0.25)[n % 5],
                    "grad_norm": 0.05 if n % 5 == 3 else 1.0 + 0.1 * (n % 4), "lr": 1e-3, "kl": 0.0 if n == 0 else 0.01 * n,
                    "completion_length": 6.0 - 0.1 * n, "entropy": 2.5 - 0.02 * n})
    return out


def assert_documented(findings: list[Finding]) -> None:
    """Every evidence key these findings carry is in their rule's docstring and in docs/findings.md."""
    docs = DOCS.read_text()
    by_id = {r.ID: r for r in RULES}
    for f in findings:
        section = docs[docs.index(f"## `{f.id}`"):]
        for key in f.evidence:
            assert f"`{key}`" in by_id[f.id].__doc__ and f"`{key}`" in section, f"{f.id}: {key!r} undocumented"
