"""The probe's results files: their types live in the schema layer (schema/probe_results.py, so the
report reads them without importing the probe), their places in RunPaths; here is how they are written.

Typical use:
    write_json(RunPaths(run_dir).probe_node_file(node_rank, host), node.to_dict())
    node = NodeReport.from_dict(read_json(path, cap=64 * 2**20))   # schema/safe_read.py
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_doctor.schema.probe_results import (  # noqa: F401  (the probe's modules import them from here)
    PORT_FREE,
    PORT_IN_USE,
    PROBE_SCHEMA_VERSION,
    REACHABLE,
    REFUSED,
    TIMED_OUT,
    UNREACHABLE,
    UNRESOLVABLE,
    CollectivesReport,
    NodeReport,
    Preflight,
    Problem,
)
from grpo_doctor.schema.safe_write import write_file


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a reader (or a report built meanwhile) never sees half a file; never over a device
    or a FIFO (schema/safe_write.py: UnwritableFile, an OSError and a one-line user error)."""
    write_file(path, json.dumps(data, indent=1, default=str))  # never over a device (schema/safe_write.py)
