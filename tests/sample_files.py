"""Reading watch's samples.jsonl back in tests: the report reads it line by line (analysis/watch_files.py);
the tests want the samples as the sampler's own objects, to compare with what it wrote.

Typical use:
    from sample_files import load_samples
    assert load_samples(tmp_path / "samples.jsonl") == written
"""
from __future__ import annotations

import json
from pathlib import Path

from grpo_doctor.schema.safe_read import read_text
from grpo_doctor.supervisor.sampler import Sample, sample_from_dict

MAX_SAMPLES_BYTES = 2**30  # read whole: a test's file is small, a runaway one is refused, not read


def load_samples(path: Path) -> list[Sample]:
    """Samples of a samples.jsonl; a last line torn by a killed supervisor is left out."""
    lines = read_text(path, cap=MAX_SAMPLES_BYTES).splitlines()  # never a FIFO or a device (schema/safe_read.py)
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(sample_from_dict(json.loads(line)))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise
    return out
