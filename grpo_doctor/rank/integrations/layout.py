"""Where a rank's completions sit in the GRPO batch, and their text, for the rollout probes.

TRL's RepeatSampler (ms-swift uses the same one) lays the global generation batch out as
`num_generations` consecutive copies of each prompt, and hands process p the rows
[p * n, (p + 1) * n) where n is the rank's batch; TRL itself relies on this: it views the
gathered rewards as (-1, num_generations) and slices process p's rows the same way
(trl/trainer/grpo_trainer.py, `_generate_and_score_completions`). So row i of rank p belongs to
group (p * n + i) // num_generations, and copies of one prompt that land on different ranks get
the same group id on each.

Typical use:
    ids = layout_group_ids(prompts, process_index=1, num_generations=4)  # rank 1, two rows -> [0, 0]
    text = as_text([{"role": "user", "content": "2+2="}])                # "user: 2+2="
"""
from __future__ import annotations

import json
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
