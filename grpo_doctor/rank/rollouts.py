"""rollouts(): one step's completions on this rank, recorded as hashes and statistics.

Called once per step with what the rank generated and how it was scored. It keeps a hash per
completion and prompt, duplicates within each group, distinct-1/2, the edit distance within
groups on a bounded sample, lengths and truncation, reward mean/std per group and the share of
groups whose rewards are all equal, plus a few texts for the report: 3.5-5 ms of CPU for 64
completions x 512 token ids (docs/benchmarks.md). Identical completions of one prompt on
different ranks (case 2 of CASES.md) are found later from the hashes of every rank's records.

`compare_across_ranks=True` also checks that now, on the rank: one all_gather over the default
process group of CROSS_RANK_SLOTS int64 per rank (2,048 bytes sent, world_size x 2,048
received) per call, giving `cross_rank_duplicate_frac` (this rank's completions identical to a
completion of the same prompt on another rank) in the next step() record. It is a collective:
every rank must make the call the same number of times, and each does, even if its recording
is off or its input is bad, so no rank is left waiting in the gather. Off by default: a
diagnostic adds no collective unless asked.

Typical use:
    gd.rollouts(prompts, completions, rewards, completion_ids=ids, max_length=512, temperature=1.0)
    gd.rollouts(prompts, completions, rewards, group_ids, compare_across_ranks=True)
"""
from __future__ import annotations

import functools
import math
import sys
import time
from typing import Any

from grpo_doctor.checks.hashing import hash_bytes, hash_text, hash_to_int63, hash_token_ids
from grpo_doctor.rank import api
from grpo_doctor.rank.identity import process_group
from grpo_doctor.schema import Rollout

MAX_SAMPLE_CHARS = 500
CROSS_RANK_SLOTS = 256  # completions per rank compared across ranks; padding is -1
CROSS_RANK_METRIC = "cross_rank_duplicate_frac"

_warned = False


def rollouts(
    prompts,
    completions,
    rewards,
    group_ids=None,
    *,
    completion_ids=None,
    prompt_ids=None,
    max_length: int | None = None,
    temperature: float | None = None,
    step: int | None = None,
    num_samples: int = 4,
    compare_across_ranks: bool = False,
) -> Rollout | None:
    """Record this rank's rollouts of one step; returns the record, None when nothing was recorded.

    prompts, completions: texts, one per completion (a prompt repeated for each of its copies).
    rewards: one number per completion (list, numpy array or tensor).
    group_ids: the GRPO group of each completion; default: consecutive equal prompts form a group.
    completion_ids, prompt_ids: token ids per completion, unpadded (padding changes the hash);
        when given they are hashed and measured instead of the texts. Without completion_ids
        lengths are characters and diversity is over whitespace words (about 3x slower).
    rewards that are NaN or None count as unknown (left out of the reward statistics), as in TRL.
    max_length: the generation limit in tokens (characters without completion_ids), for truncation.
    step: default the step the recorder is at (one more than the last step() call).
    num_samples: texts kept for the report, each cut to 500 characters.
    compare_across_ranks: also gather every rank's (prompt, completion) keys now, a collective
        (see the module's docstring); the result joins the next step() record.
    """
    rec = api.current_recorder()
    record = None
    if rec is not None:
        try:
            record = _record(rec, prompts, completions, rewards, group_ids, completion_ids, prompt_ids,
                             max_length, temperature, step, num_samples)
            rec.sink.enqueue(record)
        except Exception as exc:  # bad input or a bug here: training goes on either way
            _warn_once(f"{exc}" if isinstance(exc, (TypeError, ValueError)) else f"{type(exc).__name__}: {exc}")
    if compare_across_ranks and not api.disabled_by_environment():  # the same on every rank: all gather, or none
        try:
            frac = _cross_rank_duplicate_frac(record)
        except Exception as exc:  # after the gather (failures before it are caught inside): no rank is left waiting
            api._say(f"compare_across_ranks failed ({type(exc).__name__}: {exc})")
            frac = None
        if frac is not None and rec is not None:
            api.add_to_next_step(CROSS_RANK_METRIC, frac)
    return record


def _record(rec, prompts, completions, rewards, group_ids, completion_ids, prompt_ids, max_length,
            temperature, step, num_samples) -> Rollout:
    began_t, began_mono = time.time(), time.monotonic()
    n = len(completions)
    rewards = _floats(rewards)
    _check_lengths(n, prompts=prompts, rewards=rewards, group_ids=group_ids, completion_ids=completion_ids,
                   prompt_ids=prompt_ids)
    for name, texts in (("prompts", prompts), ("completions", completions)):
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"{name}[{bad}] is {type(texts[bad]).__name__}, not text")
    if max_length is not None:
        max_length = api._whole_number(max_length)
        if max_length <= 0:
            raise ValueError(f"max_length={max_length!r} must be at least 1")
    step = rec.current_step if step is None else api._whole_number(step)

    diversity, groups = _numpy_checks()
    if group_ids is None:
        group_ids = groups.consecutive_groups(prompts)
    else:
        group_ids = [api._whole_number(g) for g in group_ids]
    members = groups.group_members(group_ids)
    if completion_ids is not None:
        batch = diversity.TokenBatch.from_sequences(completion_ids)
        # Checked and converted once for the batch: hash the int32 slices as they lie in memory.
        flat, offsets = batch.flat.astype("<i4", copy=False), batch.offsets.tolist()
        completion_hashes = [hash_bytes(flat[offsets[i] : offsets[i + 1]]) for i in range(n)]
        lengths = batch.lengths.tolist()
    else:
        completion_hashes = [hash_text(t) for t in completions]
        lengths = [len(t) for t in completions]
        batch = diversity.TokenBatch.from_words(completions)
    if prompt_ids is not None:
        prompt_hashes = [hash_token_ids(p) for p in prompt_ids]
    else:
        known: dict[str, str] = {}  # a prompt comes once per copy: hash each text once
        prompt_hashes = [known.get(p) or known.setdefault(p, hash_text(p)) for p in prompts]
    length = groups.length_stats(lengths, max_length)
    reward = groups.reward_stats(rewards, members)
    return Rollout(
        rank=rec.ident.rank, host=rec.ident.host, pid=rec.ident.pid, step=step, t=began_t, mono=began_mono,
        num_completions=n,
        num_groups=len(members),
        completion_hashes=completion_hashes,
        prompt_hashes=prompt_hashes,
        group_ids=group_ids,
        duplicate_rate=groups.duplicate_rate(completion_hashes, members),
        distinct_1=diversity.distinct_n(batch, 1),
        distinct_2=diversity.distinct_n(batch, 2),
        edit_distance=diversity.mean_edit_distance(batch, members),
        length_mean=length.length_mean,
        length_min=length.length_min,
        length_max=length.length_max,
        truncated_frac=length.truncated_frac,
        reward_mean=reward.reward_mean,
        reward_std=reward.reward_std,
        group_reward_std_mean=reward.group_reward_std_mean,
        zero_std_frac=reward.zero_std_frac,
        temperature=None if temperature is None else float(temperature),
        max_length=max_length,
        samples=_samples(prompts, completions, rewards, group_ids, num_samples),
    )


def _floats(rewards) -> list[float]:
    values = rewards.tolist() if hasattr(rewards, "tolist") else list(rewards)  # tensors, numpy arrays
    try:
        # None is a reward not known: TRL's reward functions return it for samples they do not score
        # and TRL reads it as NaN, so a None is no reason to lose the step's record.
        return [math.nan if v is None else float(v) for v in values]
    except (TypeError, ValueError):
        bad = next(i for i, v in enumerate(values) if not _is_number(v))
        raise TypeError(f"rewards[{bad}] is {values[bad]!r}, not a number") from None


def _is_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


@functools.cache
def _numpy_checks():
    """Imported on the first record, not with grpo_doctor: the rank API's import stays free of numpy."""
    from grpo_doctor.checks import diversity, groups

    return diversity, groups


def _check_lengths(n: int, **given) -> None:
    for name, values in given.items():
        if values is not None and len(values) != n:
            raise ValueError(f"{n} completions but {len(values)} {name}")


def _samples(prompts, completions, rewards, group_ids, num_samples: int) -> list[dict[str, Any]]:
    """Evenly spaced completions, so the report shows several groups rather than one."""
    n = len(completions)
    picks = sorted({i * n // num_samples for i in range(num_samples)}) if n and num_samples > 0 else []
    return [
        {"group": group_ids[i], "prompt": prompts[i][:MAX_SAMPLE_CHARS],
         "completion": completions[i][:MAX_SAMPLE_CHARS], "reward": rewards[i]}
        for i in picks
    ]


def cross_rank_keys(record: Rollout) -> list[int]:
    """One non-negative int64 per completion naming (prompt, completion), at most CROSS_RANK_SLOTS.

    Two ranks hold equal keys exactly when they sampled the same completion of the same prompt.
    """
    if record.num_completions > CROSS_RANK_SLOTS:
        api._say(f"compare_across_ranks: only the first {CROSS_RANK_SLOTS} completions of a step are compared "
                 "across ranks")
    pairs = zip(record.prompt_hashes[:CROSS_RANK_SLOTS], record.completion_hashes[:CROSS_RANK_SLOTS], strict=True)
    return [hash_to_int63(hash_text(p + c)) for p, c in pairs]


def _cross_rank_duplicate_frac(record: Rollout | None) -> float | None:
    torch, dist = sys.modules.get("torch"), process_group()
    if dist is None:
        api._say("rollouts(compare_across_ranks=True) has no effect: torch.distributed is not initialised")
        return None
    world_size = dist.get_world_size()
    if world_size == 1:
        return None
    keys = cross_rank_keys(record) if record is not None else []
    try:
        # NCCL gathers device tensors only, other backends host tensors.
        on_gpu = dist.get_backend() == "nccl"
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        local = torch.full((CROSS_RANK_SLOTS,), -1, dtype=torch.int64)
        local[: len(keys)] = torch.tensor(keys, dtype=torch.int64)
        gathered = [torch.empty(CROSS_RANK_SLOTS, dtype=torch.int64, device=device) for _ in range(world_size)]
        dist.all_gather(gathered, local.to(device))
    except Exception as exc:  # a broken group fails training's own next collective; not ours to raise
        api._say(f"compare_across_ranks: the all_gather failed ({type(exc).__name__}: {exc})")
        return None
    me = dist.get_rank()
    # A rank that sent only padding recorded nothing (bad input, recording off): it is no evidence.
    others = [g for r, g in enumerate(torch.stack(gathered).cpu()) if r != me and g[0] >= 0]
    if not keys or not others:
        return None
    found = torch.isin(torch.tensor(keys, dtype=torch.int64), torch.cat(others))
    return found.double().mean().item()


def _warn_once(problem: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        api._say(f"rollouts() recorded nothing: {problem} (later problems with rollouts() are not reported)")
