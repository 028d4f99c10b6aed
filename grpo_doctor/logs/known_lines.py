"""Lines grpo-doctor knows that state no failure and no step metric: NCCL's and UCX's own output, Python
warnings, progress bars, W&B's output, launchers' start-up lines, inference engines' log lines, printed
dicts (a config dump, a trainer's dict without a training step), verl's validation-only step lines.

A log made only of these was read, and judged healthy as far as it goes; the report says so ("known lines:
NCCL / UCX lines x8") instead of "nothing recognised", which is kept for text that holds nothing known.
Counted by marker over raw bytes (bytes.count and one pattern per family that needs one), so a whole file
costs a few passes in C.

Typical use:
    counts = KnownLines()
    counts.add(b"node:1:2 [0] NCCL INFO Channel 00/16 : 0 1\\n")
    counts.families   # Counter({"NCCL / UCX lines": 1})
"""
from __future__ import annotations

import re
from collections import Counter

# family -> literal markers (each occurrence counts once) and patterns (each match counts once)
FAMILIES: dict[str, tuple[tuple[bytes, ...], tuple[re.Pattern[bytes], ...]]] = {
    "NCCL / UCX lines": ((b"NCCL INFO", b"NCCL WARN", b"UCX  WARN", b"UCX  INFO"), ()),
    "Python warnings": ((b"Warning: ",), ()),
    "progress bars": ((b"%|",), ()),
    "W&B output": ((b"wandb:",), ()),
    # torchrun's glog lines, DeepSpeed's logger ("[2020-12-24 16:25:13,185] [INFO] [runner.py:355:main]")
    "launcher lines": ((b"torch/distributed/", b"] [INFO] [", b"] [WARNING] [", b"OMP_NUM_THREADS"), ()),
    # vLLM's logger ("INFO 06-24 02:48:48 llm_engine.py:100]"), SGLang's memory pool
    "inference engine lines": ((b"KV Cache is allocated",),
                               (re.compile(rb"(?:INFO|WARNING|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d"),)),
    "printed dicts": ((), (re.compile(rb"^[^\n]*?'[\w/.@-]+': ", re.MULTILINE),)),
    "validation step lines": ((), (re.compile(rb"step:\d+ - val"),)),
}


class KnownLines:
    """Counts of each family over the chunks added."""

    def __init__(self) -> None:
        self.families: Counter[str] = Counter()

    def add(self, chunk: bytes) -> None:
        for family, (markers, patterns) in FAMILIES.items():
            found = sum(chunk.count(marker) for marker in markers)
            found += sum(len(pattern.findall(chunk)) for pattern in patterns)
            if found:
                self.families[family] += found

    def describe(self) -> str:
        """"known lines: NCCL / UCX lines x8, Python warnings x2" ("" when none)."""
        if not self.families:
            return ""
        return "known lines: " + ", ".join(f"{family} x{n}" for family, n in self.families.most_common())
