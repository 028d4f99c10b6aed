"""watch's live findings: what it said about the job's rollouts while the job ran, for `summary` and people.

`supervisor/<host>/live-findings.json` (WatchPaths.live_findings), rewritten whole (atomically) whenever
a finding is said or clears:

    {"schema": 1, "host": "node-3", "updated_t": 1765432100.5,
     "findings": [{"id": "constant-reward", "severity": "critical", "title": "...", "ranks": [], "hosts": [],
                   "step": 1, "phase": null, "evidence": {...}, "hints": ["..."], "role": null,
                   "caused_by": null, "state": "standing", "said_at_step": 5, "said_t": 1765432090.1,
                   "cleared_at_step": null, "cleared_t": null}]}

Each finding has the shape of a finding in findings.json (docs/findings.md) plus when it was said:
`state` ("standing", or "cleared" once a later step broke it), `said_at_step` (the source's step whose
record or printed line made it stand), `said_t` / `cleared_t` (wall s), `cleared_at_step`. `step` is the
finding's own step, the one the report at the end gives (the first degenerate step; memory-growth's
last step judged, null from watch's samples). A memory-growth warning whose projected OOM comes near
turns critical in place: `critical_at_step` / `critical_t` say when.

Typical use:
    data = live_findings_json(host, findings, t)            # watch (supervisor/sentinels.py)
    standing = [f for f in read_live_findings(path) if f["state"] == "standing"]   # summary
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_doctor.schema.safe_read import read_json

SCHEMA = 1
STATES = ("standing", "cleared")
MAX_BYTES = 4 * 2**20  # a handful of findings; a file past this is not watch's
REQUIRED = {"id": str, "severity": str, "title": str, "state": str}


def live_findings_json(host: str, findings: list[dict[str, Any]], updated_t: float) -> dict[str, Any]:
    return {"schema": SCHEMA, "host": host, "updated_t": updated_t, "findings": findings}


def read_live_findings(path: str | Path) -> list[dict[str, Any]]:
    """The findings of one watch's live-findings.json: those with the required fields of the right types
    (a damaged entry is left out). Raises UnreadableFile (an OSError and a ValueError) for a file that
    cannot be read or is not JSON."""
    data = read_json(path, cap=MAX_BYTES, what="watch's live-findings.json")
    found = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(found, list):
        return []
    return [f for f in found if isinstance(f, dict) and all(isinstance(f.get(k), t) for k, t in REQUIRED.items())
            and f["state"] in STATES]
