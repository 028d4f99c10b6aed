"""Where a rank's completions sit in the GRPO batch, their text and their rewards, for the rollout recorders.

TRL's RepeatSampler (ms-swift uses the same one) lays the global generation batch out as
`num_generations` consecutive copies of each prompt, and hands process p the rows
[p * n, (p + 1) * n) where n is the rank's batch; TRL itself relies on this: it views the
gathered rewards as (-1, num_generations) and slices process p's rows the same way
(trl/trainer/grpo_trainer.py, `_generate_and_score_completions`). So row i of rank p belongs to
group (p * n + i) // num_generations, and copies of one prompt that land on different ranks get
the same group id on each.

The rewards come as the trainers compute them, one column per reward function, gathered from
all ranks (TRL; ms-swift >= 4.4) or this rank's alone (ms-swift 4.0-4.3); `rank_rewards` takes
this rank's rows with the same process slice and weights them as the logged `reward` is.

Typical use:
    ids = layout_group_ids(prompts, process_index=1, num_generations=4)  # rank 1, two rows -> [0, 0]
    text = as_text([{"role": "user", "content": "2+2="}])                # "user: 2+2="
    rewards = rank_rewards(rewards_per_func, trainer.reward_weights, process_index=1, n=2)
"""
from __future__ import annotations

import json
import math
from typing import Any


def layout_group_ids(prompts: list, process_index: int, num_generations: int) -> list[int] | None:
    """Global group id of each row; None when the rows do not follow the layout (a prompt changes
    inside a group), for instance under a custom sampler."""
    start = process_index * len(prompts)
    ids = [(start + i) // num_generations for i in range(len(prompts))]
    if any(ids[i] == ids[i - 1] and prompts[i] != prompts[i - 1] for i in range(1, len(prompts))):
        return None
    return ids


def as_text(value: Any) -> str:
    """A prompt or completion as text: strings as they are, chat messages as "role: content" lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return "\n".join(f"{m.get('role', '?')}: {_content(m.get('content'))}" for m in value)
    return json.dumps(value, default=str, ensure_ascii=False)


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: keep the text, name the rest
        return "".join(p.get("text", f"<{p.get('type', '?')}>") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def rank_rewards(rewards_per_func, weights, process_index: int, n: int) -> list[float]:
    """This rank's n total rewards: the weighted nansum of the reward functions' columns (torch
    tensors), NaN where no function scored. A tensor of n rows is this rank's own; a larger one
    holds every rank's, laid out by process index."""
    if rewards_per_func is None:
        return [math.nan] * n
    rows = rewards_per_func if len(rewards_per_func) == n else rewards_per_func[process_index * n:(process_index + 1) * n]
    if len(rows) != n:
        return [math.nan] * n
    totals = (rows * weights.to(rows.device).unsqueeze(0)).nansum(dim=1)
    totals[rows.isnan().all(dim=1)] = math.nan
    return totals.tolist()
