"""The layout of a run directory, named once: every part that writes or reads a file of a run asks here.

Typical use:
    paths = RunPaths(Path("runs/job-17"))
    paths.rank_file(3)              # runs/job-17/ranks/rank-00003.jsonl
    paths.supervisor_host("node-1") # runs/job-17/supervisor/node-1
    paths.watch_files("node-1").hang_report(2)   # runs/job-17/supervisor/node-1/hang-2.json
    paths.probe_node_file(0, "node-1")           # runs/job-17/probe/node-000-node-1.json
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunPaths:
    """Where things live inside one run directory."""

    root: Path

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def ranks(self) -> Path:
        return self.root / "ranks"

    @property
    def memory(self) -> Path:
        return self.root / "memory"

    @property
    def stacks(self) -> Path:
        return self.root / "stacks"

    @property
    def flight_recorder(self) -> Path:
        return self.root / "fr"

    @property
    def supervisor(self) -> Path:
        return self.root / "supervisor"

    @property
    def probe(self) -> Path:
        """`grpo-doctor probe`'s results: one file per node, and the ranks' collectives file."""
        return self.root / "probe"

    @property
    def probe_collectives(self) -> Path:
        return self.probe / PROBE_COLLECTIVES_FILE

    def probe_node_file(self, node_rank: int, host: str) -> Path:
        return self.probe / f"node-{node_rank:03d}-{host_dir_name(host)}.json"

    @property
    def findings_json(self) -> Path:
        return self.root / "findings.json"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def run_json_lock(self) -> Path:
        """Held while a watch adds its host to run.json (several nodes may share one run directory)."""
        return self.root / ".run.json.lock"

    def supervisor_host(self, host: str) -> Path:
        """supervisor/<host>/, the host name made safe as one path component (see host_dir_name)."""
        return self.supervisor / host_dir_name(host)

    def watch_files(self, host: str) -> WatchPaths:
        """The files one host's watch writes, under supervisor_host(host)."""
        return WatchPaths(self.supervisor_host(host))

    def rank_file(self, rank: int) -> Path:
        return self.ranks / f"rank-{rank:05d}.jsonl"

    def hang_stacks(self, label: str) -> tuple[Path, Path]:
        """stacks/hang-<label>-a and -b: every rank's stacks at the first and the second look at a hang."""
        return self.stacks / f"hang-{label}-a", self.stacks / f"hang-{label}-b"

    def rank_files(self) -> list[Path]:
        """The rank files there are now, in name order (none without ranks/)."""
        return sorted(self.ranks.glob("rank-*.jsonl"))

    def oom_memory_dump(self, rank: int) -> Path:
        """The allocator's memory history a rank dumps when it runs out of GPU memory."""
        return self.memory / f"rank-{rank:05d}-oom.pickle"


PROBE_COLLECTIVES_FILE = "collectives.json"
_SIGNATURES_FILE = "signatures.jsonl"
# What one node's watch tells the others through a shared run directory (supervisor/fleet_channel.py).
FLEET_FILES = {"beat": "fleet-beat.json", "stacks": "fleet-stacks.json", "verdict": "fleet-verdict.json"}
# A node's probe file (RunPaths.probe_node_file), not a node's log such as node-1.log.
PROBE_NODE_FILE = re.compile(r"node-\d{3,}-.+\.json")


@dataclass(frozen=True)
class WatchPaths:
    """The files of one host's watch: supervisor/<host>/ (RunPaths.watch_files)."""

    root: Path

    @property
    def memory_plan(self) -> Path:
        """`grpo-doctor plan`'s verdict on the command, made by watch at start (plan/render.py's JSON)."""
        return self.root / "plan.json"

    @property
    def summary_json(self) -> Path:
        return self.root / "summary.json"

    @property
    def samples(self) -> Path:
        return self.root / "samples.jsonl"

    @property
    def signatures(self) -> Path:
        """The failure messages watch found in the job's output as it ran (logs/signatures.py's Signature)."""
        return self.root / _SIGNATURES_FILE

    @staticmethod
    def is_signatures_file(path: str | Path) -> bool:
        """Whether a source is watch's signatures file (not a raw log that an excerpt can be read from)."""
        return Path(path).name == _SIGNATURES_FILE

    @property
    def live_findings(self) -> Path:
        """What watch said about the job's rollouts and steps while it ran (schema/live_findings.py)."""
        return self.root / "live-findings.json"

    @property
    def fail_slow(self) -> Path:
        """watch's stack rounds of a job that moves, but slowly, and their verdicts (schema/slow_rounds.py)."""
        return self.root / "fail-slow.json"

    @property
    def alerts(self) -> Path:
        """Every alert watch sent (webhook, command) and its outcome (supervisor/alerts.py)."""
        return self.root / "alerts.jsonl"

    @property
    def stdout_log(self) -> Path:
        return self.root / "stdout.log"

    @property
    def stderr_log(self) -> Path:
        return self.root / "stderr.log"

    @property
    def errors_log(self) -> Path:
        """watch's own internal errors (tracebacks), never the job's."""
        return self.root / "watch-errors.log"

    @property
    def lock(self) -> Path:
        return self.root / ".watch.lock"

    def fleet_file(self, kind: str) -> Path:
        """This node's message of one kind to the other watches of the job: "beat", "stacks" (its ranks'
        stacks at a look the decider asked for), "verdict" (written by the deciding watch only)."""
        return self.root / FLEET_FILES[kind]

    def hang_report(self, number: int) -> Path:
        """The report of the number-th hang (from 1)."""
        return self.root / f"hang-{number}.json"

    def hang_reports(self) -> list[Path]:
        """Every hang-N.json of this host, in no particular order (a listing that fails: none)."""
        try:
            return [p for p in self.root.glob("hang-*.json") if self.hang_number(p) is not None]
        except OSError:
            return []

    @staticmethod
    def hang_number(path: Path) -> int | None:
        """N for a hang-N.json (0 where N is no number: a copy such as hang-1-old.json is read too, first),
        None for a file that is no hang report."""
        name = Path(path).name
        if not (name.startswith("hang-") and name.endswith(".json")):
            return None
        digits = Path(name).stem.rpartition("-")[2]
        return int(digits) if digits.isdigit() else 0


_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]")


def host_dir_name(host: str) -> str:
    """A host name as one safe path component: characters other than letters, digits, '.', '_' and
    '-' become '_' (a '/' in a host name must not write outside the run directory), and '', '.'
    and '..' become '_'."""
    name = _UNSAFE_IN_NAME.sub("_", host)[:255]
    return "_" if name in ("", ".", "..") else name
