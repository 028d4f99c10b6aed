"""Writers for realistic analysis inputs: rank files from the schema dataclasses, hang-N.json as watch writes it."""
from __future__ import annotations

import json
from pathlib import Path

from helpers import write_rank  # noqa: F401 - the analysis tests import it from here

from grpo_doctor.schema import Header, RunPaths

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def common(rank, step=0, t=100.0, host=None):
    return dict(rank=rank, host=host or f"node-{rank // 2}", pid=1000 + rank, step=step, t=t, mono=t)


def header(rank, world_size=4, host=None, launch=None, versions=None, local_world_size=2):
    return Header(**common(rank, host=host), local_rank=rank % 2, world_size=world_size, node_rank=rank // 2,
                  local_world_size=local_world_size, gpu_uuid=None, versions=versions or {},
                  launch=launch or {}, argv=["train.py"])


def write_hang(run_dir: Path, host: str, number: int, report: dict) -> Path:
    path = RunPaths(run_dir).supervisor / host / f"hang-{number}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    return path
