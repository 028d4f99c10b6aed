"""`grpo-doctor probe` results as the analyser sees them: every node's report and the ranks'
collectives file, from run directories (their `probe/`), probe directories or the JSON files
themselves; and the probe's problems turned into findings of the stable ids.

Typical use:
    probe = load_probe(paths, warnings)          # ProbeEvidence; empty when no probe ran
    yield from probe_findings(run.probe, "config-mismatch")    # inside a rule
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_doctor.analysis.findings import SEVERITIES, Finding
from grpo_doctor.probe.results import COLLECTIVES_FILE, CollectivesReport, NodeReport, probe_dir

MAX_PROBE_FILE_BYTES = 64 * 2**20
NODE_FILE = re.compile(r"node-\d{3,}-.+\.json")  # results.node_file_name; not a node's log (node-1.log)


@dataclass
class ProbeEvidence:
    nodes: list[tuple[str, NodeReport]] = field(default_factory=list)  # (file, report)
    collectives: list[tuple[str, CollectivesReport]] = field(default_factory=list)

    def problems(self) -> list[tuple[str, dict[str, Any]]]:
        """(file, problem dict) for every problem, each distinct one once: every node saw the
        same comparison, and a shared run directory holds all their files."""
        seen: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        for path, report in [*self.nodes, *self.collectives]:
            for problem in report.problems:
                seen.setdefault((problem.get("id", ""), problem.get("message", "")), (path, problem))
        return list(seen.values())


def probe_files(path: Path) -> list[Path]:
    """The probe files a path given to `report` holds (a run dir, its probe/ dir, or a file)."""
    if path.is_file():
        return [path] if path.name == COLLECTIVES_FILE or NODE_FILE.fullmatch(path.name) else []
    folder = path if path.name == "probe" else probe_dir(path)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("node-*.json") if NODE_FILE.fullmatch(p.name)) + sorted(folder.glob(COLLECTIVES_FILE))


def load_probe(paths: list[Path], warnings: list[str]) -> ProbeEvidence:
    probe = ProbeEvidence()
    for path in [f for p in paths for f in probe_files(Path(p))]:
        try:
            if path.stat().st_size > MAX_PROBE_FILE_BYTES:
                raise ValueError(f"over {MAX_PROBE_FILE_BYTES // 2**20} MiB")
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if path.name == COLLECTIVES_FILE:
                probe.collectives.append((str(path), CollectivesReport.from_dict(data)))
            else:
                probe.nodes.append((str(path), NodeReport.from_dict(data)))
        except (OSError, ValueError, TypeError) as exc:
            warnings.append(f"probe file {path} skipped: {exc} (rerun `grpo-doctor probe` to replace it)")
    return probe


def probe_findings(probe: ProbeEvidence | None, finding_id: str, extra_hints: tuple[str, ...] = ()) -> Iterator[Finding]:
    """One finding per distinct probe problem with this id. Evidence keys: `source` ("probe"),
    `probe_file`, `message`, `nodes` (node ranks)."""
    if probe is None:
        return
    for path, problem in probe.problems():
        if problem.get("id") != finding_id:
            continue
        hints = tuple(h for h in (problem.get("hint"), *extra_hints) if h)
        severity = problem.get("severity") if problem.get("severity") in SEVERITIES else "warning"
        yield Finding(
            id=finding_id, severity=severity, title=f"probe: {problem.get('message', '')}",
            ranks=tuple(problem.get("ranks", ())), hosts=tuple(problem.get("hosts", ())), step=None, phase=None,
            evidence={"source": "probe", "probe_file": path, "message": problem.get("message", ""),
                      "nodes": list(problem.get("nodes", ()))},
            hints=hints)
