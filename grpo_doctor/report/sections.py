"""Plain data for the report's tables: ranks, environment by host, stacks and evidence (the findings
and the verdict: finding_blocks.py).

Everything here returns dicts, lists and strings taken as they are from the run; escaping is the
template's job (jinja2 autoescape), so nothing here builds HTML.

Typical use:
    env = environment_table(evidence)   # {"hosts": [...], "rows": [{"key", "values", "differs"}]}
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_doctor.analysis.load import Evidence
from grpo_doctor.runlog.rank_states import rank_state
from grpo_doctor.schema.ranks import format_ranks
from grpo_doctor.schema.safe_read import open_text
from grpo_doctor.schema.watch_files import HangReport

# Variables that differ from rank to rank by design, so a difference means nothing.
PER_RANK_KEYS = frozenset({"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "TORCHELASTIC_RUN_ID"})
MAX_EVIDENCE_CHARS = 600
MAX_STACK_FRAMES = 40


def rank_rows(run: Evidence) -> list[dict[str, Any]]:
    """One row per rank: host, attempts, last step, how it ended, open phase, first error."""
    if run.run is None:  # no rank files were read
        return []
    rows = []
    for rank in sorted(run.known_ranks):
        log = run.rank_logs.get(rank)
        if log is None:
            rows.append({"rank": rank, "host": "", "last_step": None, "end": "no event log", "open_path": "",
                         "error": "", "odd": True})
            continue
        state = rank_state(log, host=run.host_of(rank))
        error = f"{state.error}: {state.error_message}" if state.error else ""
        rows.append({"rank": rank, "host": state.host or "", "last_step": state.shown_step, "end": state.ending,
                     "open_path": state.open_phase or "", "error": error[:300], "odd": not state.clean})
    return rows


def environment_table(run: Evidence) -> dict[str, Any]:
    """Versions and launch settings per host (first rank of each), rows that differ marked."""
    per_host: dict[str, dict[str, Any]] = {}
    for header in run.headers.values():
        if header.host in per_host:
            continue
        values: dict[str, Any] = {f"version: {k}": v for k, v in sorted((header.versions or {}).items())}
        values |= {k: v for k, v in sorted((header.launch or {}).items()) if k not in PER_RANK_KEYS}
        values["ranks on this host"] = header.local_world_size
        per_host[header.host] = values
    hosts = sorted(per_host)
    keys = sorted({k for values in per_host.values() for k in values})
    rows = []
    for key in keys:
        row_values = [per_host[h].get(key) for h in hosts]
        rows.append({"key": key, "values": ["(not set)" if v is None else str(v) for v in row_values],
                     "differs": len(hosts) > 1 and len({repr(v) for v in row_values}) > 1})
    rows.sort(key=lambda r: not r["differs"])
    return {"hosts": hosts, "rows": rows}


def stack_sections(run: Evidence) -> list[dict[str, Any]]:
    """Each hang watch investigated: grouped stacks, the ranks waited for, odd ranks, per-rank stacks."""
    out = []
    for hang in run.hangs:
        odd = set(hang.odd_ranks) | set(hang.culprits)
        per_rank = []
        for rank, info in sorted(hang.ranks.items()):
            per_rank.append({"rank": rank, "odd": rank in odd, "phase": info.open_phase or "",
                             "step": info.step, "verdict": info.verdict or "",
                             "idle_s": info.idle_s, "frames": _stack_text(hang, rank)})
        out.append({"host": hang.host, "file": hang.file or "",
                    "groups": list(hang.groups), "culprits": format_ranks(hang.culprits),
                    "odd": format_ranks(sorted(odd)), "ranks": per_rank,
                    # every rank a key: the page asks for the error of each rank without a stack
                    "stack_errors": {str(r): hang.stack_errors.get(r, "") for r in sorted(hang.ranks)},
                    "ptrace_denied": hang.ptrace_denied})
    return out


def evidence_items(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, value as compact text) for a finding's evidence; long values cut with a mark."""
    out = []
    for key, value in evidence.items():
        text = value if isinstance(value, str) else _rank_text(key, value) or json.dumps(value, default=str)
        if len(text) > MAX_EVIDENCE_CHARS:
            text = text[:MAX_EVIDENCE_CHARS] + f" ... ({len(text) - MAX_EVIDENCE_CHARS} more characters)"
        out.append((key, text))
    return out


def _rank_text(key: str, value: Any) -> str | None:
    """Rank lists as the rest of the report writes them ("0-3,5"), not as JSON ("[0, 1, 2, 3, 5]"):
    `culprits`, `*_ranks` hold a list of ranks, `*rank_sets` a list of such lists."""
    def is_ranks(v: Any) -> bool:
        return isinstance(v, list | tuple) and all(isinstance(r, int) and not isinstance(r, bool) for r in v)

    if (key == "culprits" or key.endswith("ranks") or key.startswith("ranks_")) and is_ranks(value):
        return format_ranks(value) or "none"
    if key.endswith("rank_sets") and isinstance(value, list | tuple) and value and all(is_ranks(s) for s in value):
        return "; ".join(format_ranks(s) for s in value)
    return None


def _stack_text(hang: HangReport, rank: int) -> list[str]:
    """The rank's last py-spy capture as text lines (watch writes rank-NNNNN.txt beside the JSON).
    The run directory may have been moved since: the capture is also looked for under its stacks/.
    A verdict of several nodes' watches lists each node's two looks in turn: every second look is tried."""
    dirs = [Path(d) for d in hang.stack_dirs][1::2] or [Path(d) for d in hang.stack_dirs][-1:]
    if hang.file:
        dirs += [Path(hang.file).parents[2] / "stacks" / d.name for d in dirs]
    for directory in dirs:
        path = directory / f"rank-{rank:05d}.txt"
        try:
            with open_text(path) as f:  # never a FIFO or a device (schema/safe_read.py)
                return [line.rstrip("\n") for _, line in zip(range(MAX_STACK_FRAMES), f, strict=False)]
        except OSError:
            continue
    return []
