"""`grpo-doctor probe` results as the analyser sees them: every node's report and the ranks'
collectives file, from run directories (their `probe/`), probe directories or the JSON files
themselves; and the probe's problems turned into findings of the stable ids.

Typical use:
    probe = load_probe(paths, warnings)          # ProbeEvidence; empty when no probe ran
    yield from probe_findings(run.probe, "config-mismatch")    # inside a rule
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.analysis.findings import SEVERITIES, Finding
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.probe_results import CollectivesReport, NodeReport, Problem
from grpo_doctor.schema.run_paths import PROBE_COLLECTIVES_FILE, PROBE_NODE_FILE
from grpo_doctor.schema.safe_read import UnreadableFile, read_json

MAX_PROBE_FILE_BYTES = 64 * 2**20


@dataclass
class ProbeEvidence:
    nodes: list[tuple[str, NodeReport]] = field(default_factory=list)  # (file, report)
    collectives: list[tuple[str, CollectivesReport]] = field(default_factory=list)

    def problems(self) -> list[tuple[str, Problem]]:
        """(file, problem) for every problem, each distinct one once: every node saw the
        same comparison, and a shared run directory holds all their files."""
        seen: dict[tuple[str, str], tuple[str, Problem]] = {}
        reports: list[tuple[str, NodeReport | CollectivesReport]] = [*self.nodes, *self.collectives]
        for path, report in reports:
            for problem in report.problems:
                seen.setdefault((problem.id, problem.message), (path, problem))
        return list(seen.values())


def probe_files(path: Path) -> list[Path]:
    """The probe files a path given to `report` holds (a run dir, its probe/ dir, or a file)."""
    if path.is_file():
        return [path] if path.name == PROBE_COLLECTIVES_FILE or PROBE_NODE_FILE.fullmatch(path.name) else []
    folder = RunPaths(path).probe
    if path.name == folder.name:  # the probe directory itself
        folder = path
    if not folder.is_dir():
        return []
    return (sorted(p for p in folder.glob("node-*.json") if PROBE_NODE_FILE.fullmatch(p.name))
            + sorted(folder.glob(PROBE_COLLECTIVES_FILE)))


def load_probe(paths: list[Path], warnings: list[str]) -> ProbeEvidence:
    probe = ProbeEvidence()
    for path in [f for p in paths for f in probe_files(Path(p))]:
        try:  # a device, a FIFO or a file past the cap is refused without being read (schema/safe_read.py)
            data = read_json(path, cap=MAX_PROBE_FILE_BYTES, what="a probe file")
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if path.name == PROBE_COLLECTIVES_FILE:
                probe.collectives.append((str(path), CollectivesReport.from_dict(data)))
            else:
                probe.nodes.append((str(path), NodeReport.from_dict(data)))
        except UnreadableFile as exc:
            warnings.append(f"probe file {path} skipped: {exc.why} (rerun `grpo-doctor probe` to replace it)")
        except (OSError, ValueError) as exc:  # FormatError is a ValueError: a file of the wrong shape
            warnings.append(f"probe file {path} skipped: {exc} (rerun `grpo-doctor probe` to replace it)")
    return probe


def probe_findings(probe: ProbeEvidence | None, finding_id: str, extra_hints: tuple[str, ...] = ()) -> Iterator[Finding]:
    """One finding per distinct probe problem with this id. Evidence keys: `source` ("probe"),
    `probe_file`, `message`, `nodes` (node ranks)."""
    if probe is None:
        return
    for path, problem in probe.problems():
        if problem.id != finding_id:
            continue
        hints = tuple(h for h in (problem.hint, *extra_hints) if h)
        severity = problem.severity if problem.severity in SEVERITIES else "warning"
        yield Finding(
            id=finding_id, severity=severity, title=f"probe: {problem.message}",
            ranks=tuple(problem.ranks), hosts=tuple(problem.hosts), step=None, phase=None,
            evidence={"source": "probe", "probe_file": path, "message": problem.message,
                      "nodes": list(problem.nodes)},
            hints=hints)
