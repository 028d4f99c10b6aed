"""NCCL's RAS status report (NCCL >= 2.24), as `ncclras` prints it in text or JSON, read into one summary.

NCCL 2.24 and later run a RAS thread in every process; the threads watch each other over TCP and answer
a client on localhost:28028 (`NCCL_RAS_ADDR`). `ncclras` (or `echo status | nc localhost 28028`) prints
the job's state: a job summary (nodes, processes, GPUs), a table of communicator groups (status RUNNING,
INIT, FINALIZE, ABORT, NOCOMM; errors OK, INCOMPLETE, ERROR, MISMATCH), then "Errors" (INCOMPLETE: job
processes that gave no data, "Process 3748990 on node node1 managing GPU 3"; DEAD: processes RAS could
not reach for 60 s; per communicator "#0-0 (1bdb83b038775869) INCOMPLETE" with the missing ranks, "Rank 7
-- GPU 3 managed by process 3748990 on node node1" (2.26+) or "The missing rank: 21" (2.24), ERROR with
the ranks' NCCL errors) and "Warnings" (TIMEOUT; MISMATCH: ranks that launched different numbers of
collectives or report another status, the outliers listed). `ncclras -f json` (2.28.7+) prints every
communicator with its `ranks` and `missing_ranks` (rank, host, pid, cuda_dev, nvml_dev, status);
`ncclras -m` (2.29+) prints events such as "[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node
172.16.64.245 managing GPU 1". The wording is `rasOutAppend` in NCCL's src/ras/client_support.cc; real
outputs are in tests/data/nccl_ras/ (SOURCES.md).

Ranks are ranks inside their communicator; in the communicator of every GPU (torch's default group) that
is the global rank. Lists are capped at `MAX_LISTED` entries (the counts RAS printed stay exact).

Stdlib only, never raises on any input: text that is no RAS report gives None.

Typical use:
    report = parse(text)                  # text or JSON; None when it is no RAS report
    if report and report.verdict != "ok":
        for comm, rank in report.missing_ranks:
            print(comm.label, rank.rank, rank.node, rank.pid, rank.gpu)
    block = RasBlock()                    # line by line, as signatures.LineScanner reads a log
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

MAX_LISTED = 256  # ranks / processes kept per list
MAX_BLOCK_LINES = 20_000  # a report pasted into a log longer than this is read up to here
MAX_JSON_CHARS = 16 << 20
# What the verdict can be, worst first.
VERDICTS = ("dead", "incomplete", "error", "mismatch", "ok")
# ncclResult_t as NCCL numbers it (src/nccl.h.in); RAS's JSON gives init_state / async_error as these numbers.
NCCL_RESULTS = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}
_FINE_RESULTS = (0, 7)  # success, and initialisation still in progress

_INT_LIST = r"\d+(?:,\d+)*"
_VERSION = re.compile(r"^NCCL version (\S+) compiled with CUDA (\S+)$")
_CUDA = re.compile(r"^CUDA runtime version (-?\d+), driver version (-?\d+)$")
_SUMMARY_HEADER = re.compile(r"^(?:(?:Nodes|Processes|GPUs|\(total\)|per node|per process)\s*)+$")
_NUMBER_ROW = re.compile(r"^\d+(?:\s+\d+)*$")
_OUTLIER = re.compile(r"^(?:The outlier nodes?:|Node \S+ running process(?:es)? [\d,]+)$")
_COMMUNICATORS = re.compile(r"^Communicators\.\.\.(?:\s*\((\d+(?:\.\d+)?)s\))?")
_OBTAINED = re.compile(r"obtained a result in (\d+(?:\.\d+)?)s")
_GROUP_HEADER = re.compile(r"^(?:Group\s+Comms\s+Nodes\s+Ranks|#\s+in group\s+per comm)")
_GROUP_ROW = re.compile(r"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z]+(?:,[A-Z]+)*)$")
_UNDERLINE = re.compile(r"^=+$")
_COMM = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)$")
_MISSING_DATA = re.compile(r"^Missing communicator data from (\d+) (job process(?:es)?|ranks?)$")
_DEAD_COUNT = re.compile(r"^(\d+) job process(?:es are| is) considered dead")
_PROCESS = re.compile(rf"^Process (\d+) on node (\S+) managing GPUs? ({_INT_LIST})(?: \(NVML ({_INT_LIST})\))?$")
_NOT_FOUND = re.compile(r"^\[could not find information on \d+ process(?:es)?\]$")
_MISSING_LIST = re.compile(rf"^The missing ranks?: ({_INT_LIST})$")
_RANK = re.compile(r"^Rank (\d+)(?: (.+?))? -- (?:GPU (\d+)(?: \(NVML (\d+)\))? managed by process (\d+) on node (\S+)"
                   r"|\[process information not found\])$")
_DIFFERENT = re.compile(r"^Communicator ranks have different (.+)$")
_RANKS_HAVE = re.compile(r"^\d+ ranks have ((?:status \S+)|(?:launched up to operation \d+)|(?:not launched any operations))$")
_RANKS_REPORTED = re.compile(r"^\d+ ranks reported (.+)$")
_ERRORS_ON = re.compile(r"^(Initialization|Asynchronous) errors? on \d+ ranks?$")
_TIMEOUTS = re.compile(r"^Encountered (\d+) communication timeouts? while gathering communicator data$")
_MONITOR_HEADER = re.compile(r"^RAS Monitor Mode\b")
_PEER_DEAD = re.compile(rf"PEER_DEAD: Process (\d+) on node (\S+) managing GPUs? ({_INT_LIST})(?: \(NVML ({_INT_LIST})\))?")
# Lines that may open a report in a log, and the keywords (detectors.KEYWORDS) that make them reach
# `opens_block`: one holds each opener (the job-level "INCOMPLETE" heading, "#0-0 (hash) INCOMPLETE",
# "Group     Comms     Nodes ...", "1 job process is considered dead (unreachable via the RAS network)").
_OPENERS = (re.compile(r"^Job summary$"), re.compile(r"^NCCL version \S+ compiled with CUDA \S+$"), _COMMUNICATORS,
            _GROUP_HEADER, _COMM, _DEAD_COUNT, re.compile(r"^INCOMPLETE$"))
KEYWORDS = ("Job summary", "compiled with CUDA", "Communicators...", "Comms", "INCOMPLETE", "MISMATCH", "RAS network",
            "PEER_DEAD")


@dataclass(frozen=True)
class RasProcess:
    """A job process as RAS names it: pid, node (the address or name of its host), its GPUs (CUDA
    device numbers; `nvml_gpus` only where they differ, under CUDA_VISIBLE_DEVICES)."""

    pid: int | None
    node: str | None
    gpus: tuple[int, ...] = ()
    nvml_gpus: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "node": self.node, "gpus": list(self.gpus), "nvml_gpus": list(self.nvml_gpus)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RasProcess:
        return cls(pid=_int(data.get("pid")), node=_str(data.get("node")), gpus=_ints(data.get("gpus")),
                   nvml_gpus=_ints(data.get("nvml_gpus")))


@dataclass(frozen=True)
class RasRank:
    """One rank of a communicator RAS singled out: `rank` in that communicator, where it runs (None where
    RAS printed "[process information not found]" or, before 2.26, only the rank number), and `detail`:
    "unresponsive", "considered dead", "has status FINALIZE", "has launched up to operation 60",
    "reported Remote process error", "async_error 6 (ncclRemoteError)", ..."""

    rank: int
    node: str | None = None
    pid: int | None = None
    gpu: int | None = None
    nvml_gpu: int | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "pid": self.pid, "gpu": self.gpu, "nvml_gpu": self.nvml_gpu,
                "detail": self.detail}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RasRank:
        return cls(rank=_int(data.get("rank")) or 0, node=_str(data.get("node")), pid=_int(data.get("pid")),
                   gpu=_int(data.get("gpu")), nvml_gpu=_int(data.get("nvml_gpu")), detail=_str(data.get("detail")))

    def where(self) -> str:
        """"GPU 3, process 3748990 on node1", or "" when RAS did not say."""
        parts = [f"GPU {self.gpu}" if self.gpu is not None else "",
                 f"process {self.pid}" + (f" on {self.node}" if self.node else "") if self.pid is not None else ""]
        return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class RasCommunicator:
    """One communicator RAS reported on: `label` "#<group>-<n>" (text form only), `hash` (16 hex digits,
    as NCCL's debug output prints it), `size` (its ranks), `num_reporting` (ranks that answered),
    `status` and `problems` (INCOMPLETE, ERROR, MISMATCH), the ranks `missing` (with `num_missing`, the
    count RAS gave), the ranks with NCCL `errors`, and for a MISMATCH what differs (`mismatch`: "AllReduce
    operation counts", "status") and the outlier ranks RAS listed (`mismatched`)."""

    label: str | None = None
    hash: str | None = None
    size: int | None = None
    num_reporting: int | None = None
    status: str | None = None
    problems: tuple[str, ...] = ()
    num_missing: int | None = None
    missing: tuple[RasRank, ...] = ()
    errors: tuple[RasRank, ...] = ()
    mismatch: str | None = None
    mismatched: tuple[RasRank, ...] = ()

    @property
    def name(self) -> str:
        return " ".join(p for p in (self.label, f"({self.hash})" if self.hash else None) if p) or "a communicator"

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "hash": self.hash, "size": self.size, "num_reporting": self.num_reporting,
                "status": self.status, "problems": list(self.problems), "num_missing": self.num_missing,
                "missing": [r.to_dict() for r in self.missing], "errors": [r.to_dict() for r in self.errors],
                "mismatch": self.mismatch, "mismatched": [r.to_dict() for r in self.mismatched]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RasCommunicator:
        return cls(label=_str(data.get("label")), hash=_str(data.get("hash")), size=_int(data.get("size")),
                   num_reporting=_int(data.get("num_reporting")), status=_str(data.get("status")),
                   problems=tuple(p for p in data.get("problems") or () if isinstance(p, str)),
                   num_missing=_int(data.get("num_missing")), missing=_ranks(data.get("missing")),
                   errors=_ranks(data.get("errors")), mismatch=_str(data.get("mismatch")),
                   mismatched=_ranks(data.get("mismatched")))


@dataclass(frozen=True)
class RasGroup:
    """One row of the text form's communicator table (communicators of one size and state, grouped)."""

    group: int
    comms: int
    nodes_per_comm: int
    ranks_per_node: str  # "8" or "7-8"
    ranks_per_comm: int
    ranks_in_group: int
    status: str
    errors: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "comms": self.comms, "nodes_per_comm": self.nodes_per_comm,
                "ranks_per_node": self.ranks_per_node, "ranks_per_comm": self.ranks_per_comm,
                "ranks_in_group": self.ranks_in_group, "status": self.status, "errors": list(self.errors)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RasGroup:
        return cls(group=_int(data.get("group")) or 0, comms=_int(data.get("comms")) or 0,
                   nodes_per_comm=_int(data.get("nodes_per_comm")) or 0,
                   ranks_per_node=str(data.get("ranks_per_node") or ""), ranks_per_comm=_int(data.get("ranks_per_comm")) or 0,
                   ranks_in_group=_int(data.get("ranks_in_group")) or 0, status=str(data.get("status") or ""),
                   errors=tuple(e for e in data.get("errors") or () if isinstance(e, str)))


@dataclass(frozen=True)
class RasReport:
    """One RAS answer. `form`: "text", "json" or "monitor" (`ncclras -m` events). Counts RAS printed
    are kept beside the (capped) lists: `num_missing_processes`, `num_dead_processes`; None where the
    report did not say."""

    form: str
    nccl_version: str | None = None
    cuda_runtime: int | None = None
    cuda_driver: int | None = None
    num_nodes: int | None = None
    num_processes: int | None = None
    num_gpus: int | None = None
    groups: tuple[RasGroup, ...] = ()
    communicators: tuple[RasCommunicator, ...] = ()
    num_missing_processes: int | None = None
    missing_processes: tuple[RasProcess, ...] = ()
    num_dead_processes: int | None = None
    dead_processes: tuple[RasProcess, ...] = ()
    timeouts: int | None = None
    collection_s: float | None = None
    no_communicators: bool = False  # "No communicator data collected!"

    @property
    def missing_ranks(self) -> list[tuple[RasCommunicator, RasRank]]:
        return [(comm, rank) for comm in self.communicators for rank in comm.missing]

    @property
    def error_ranks(self) -> list[tuple[RasCommunicator, RasRank]]:
        return [(comm, rank) for comm in self.communicators for rank in comm.errors]

    @property
    def verdict(self) -> str:
        """The worst thing the report says, one of VERDICTS: "dead" (a process RAS gave up on), "incomplete"
        (ranks or processes that gave no data), "error" (a rank's NCCL error), "mismatch" (ranks out of step:
        often transient), else "ok"."""
        problems = {p for comm in self.communicators for p in comm.problems}
        problems |= {e for group in self.groups for e in group.errors}
        if self.num_dead_processes or self.dead_processes or any(
                r.detail == "considered dead" for _, r in self.missing_ranks):
            return "dead"
        if (self.num_missing_processes or self.missing_processes or self.missing_ranks
                or "INCOMPLETE" in problems):
            return "incomplete"
        if self.error_ranks or "ERROR" in problems:
            return "error"
        if "MISMATCH" in problems:
            return "mismatch"
        return "ok"

    @property
    def nodes(self) -> list[str]:
        """The nodes of the processes and ranks the report singles out (missing, dead, with errors), in order."""
        named = [p.node for p in (*self.dead_processes, *self.missing_processes)]
        named += [r.node for _, r in (*self.missing_ranks, *self.error_ranks)]
        return list(dict.fromkeys(n for n in named if n))

    def describe(self) -> str:
        """One line: "NCCL RAS (2.30.7): incomplete: #0-0 (1bdb83b038775869) misses rank 7 (GPU 3, process ...)"."""
        head = f"NCCL RAS ({self.nccl_version})" if self.nccl_version else "NCCL RAS"
        parts: list[str] = []
        for proc in self.dead_processes[:4]:
            parts.append(f"process {proc.pid} on {proc.node}" + _gpus_text(proc) + " is dead")
        if self.num_dead_processes and not self.dead_processes:
            parts.append(f"{self.num_dead_processes} process(es) dead")
        for comm in self.communicators:
            if comm.missing or comm.num_missing:
                ranks = ", ".join(f"rank {r.rank}" + (f" ({r.where()})" if r.where() else "") for r in comm.missing[:4])
                parts.append(f"{comm.name} misses " + (ranks or f"{comm.num_missing} rank(s)"))
            if comm.errors:
                parts.append(f"{comm.name} errors on rank(s) " + ", ".join(str(r.rank) for r in comm.errors[:8]))
            if comm.mismatch:
                parts.append(f"{comm.name} ranks differ in {comm.mismatch}")
        for proc in self.missing_processes[:4]:
            parts.append(f"no data from process {proc.pid} on {proc.node}" + _gpus_text(proc))
        if self.timeouts:
            parts.append(f"{self.timeouts} timeout(s) gathering data")
        return f"{head}: {self.verdict}" + (": " + "; ".join(parts) if parts else "")

    def to_dict(self) -> dict[str, Any]:
        return {"form": self.form, "verdict": self.verdict, "nccl_version": self.nccl_version,
                "cuda_runtime": self.cuda_runtime, "cuda_driver": self.cuda_driver, "num_nodes": self.num_nodes,
                "num_processes": self.num_processes, "num_gpus": self.num_gpus,
                "groups": [g.to_dict() for g in self.groups],
                "communicators": [c.to_dict() for c in self.communicators],
                "num_missing_processes": self.num_missing_processes,
                "missing_processes": [p.to_dict() for p in self.missing_processes],
                "num_dead_processes": self.num_dead_processes,
                "dead_processes": [p.to_dict() for p in self.dead_processes],
                "timeouts": self.timeouts, "collection_s": self.collection_s,
                "no_communicators": self.no_communicators}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RasReport:
        """Back from `to_dict` (a signature's fields); missing or ill-typed values become None / empty."""
        def dicts(key: str) -> list[dict[str, Any]]:
            value = data.get(key)
            return [d for d in value if isinstance(d, dict)] if isinstance(value, list) else []
        collection = data.get("collection_s")
        return cls(form=str(data.get("form") or "text"), nccl_version=_str(data.get("nccl_version")),
                   cuda_runtime=_int(data.get("cuda_runtime")), cuda_driver=_int(data.get("cuda_driver")),
                   num_nodes=_int(data.get("num_nodes")), num_processes=_int(data.get("num_processes")),
                   num_gpus=_int(data.get("num_gpus")), groups=tuple(RasGroup.from_dict(d) for d in dicts("groups")),
                   communicators=tuple(RasCommunicator.from_dict(d) for d in dicts("communicators")),
                   num_missing_processes=_int(data.get("num_missing_processes")),
                   missing_processes=tuple(RasProcess.from_dict(d) for d in dicts("missing_processes")),
                   num_dead_processes=_int(data.get("num_dead_processes")),
                   dead_processes=tuple(RasProcess.from_dict(d) for d in dicts("dead_processes")),
                   timeouts=_int(data.get("timeouts")),
                   collection_s=float(collection) if type(collection) in (int, float) else None,
                   no_communicators=data.get("no_communicators") is True)


def parse(text: str) -> RasReport | None:
    """The RAS report in `text`, text or JSON form (`ncclras -f json`, or `-m -f json` events), or None
    when it holds none. Of several text reports (repeated queries), the last."""
    if not isinstance(text, str):
        return None
    stripped = text.lstrip()
    if stripped.startswith("{"):
        report = parse_json(stripped)
        if report is not None:
            return report
    reports = parse_text_reports(text)
    return reports[-1] if reports else None


def parse_text(text: str) -> RasReport | None:
    """The last text-form report in `text`, or None."""
    reports = parse_text_reports(text)
    return reports[-1] if reports else None


def parse_text_reports(text: str) -> list[RasReport]:
    """Every text-form report in `text`, in order (a new one starts at "NCCL version ... compiled with
    CUDA" or "Job summary" after another report's content, or at a second communicator table). Lines
    that are no RAS output are skipped."""
    reader = _TextReader()
    reports: list[RasReport] = []
    for line in text.splitlines()[:MAX_BLOCK_LINES]:
        if reader.starts_new(line):
            report = reader.report()
            if report is not None:
                reports.append(report)
            reader = _TextReader()
        reader.feed(line)
    report = reader.report()
    if report is not None:
        reports.append(report)
    return reports


def parse_json(text: str) -> RasReport | None:
    """`ncclras -f json` output (NCCL >= 2.28.7), or the events of `ncclras -m -f json` (PEER_DEAD
    events become dead processes), or None when `text` is neither."""
    if not isinstance(text, str) or len(text) > MAX_JSON_CHARS:
        return None
    objects: list[Any] = []
    decoder = json.JSONDecoder()
    pos, end = 0, len(text)
    while pos < end and len(objects) < 10_000:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            break
        objects.append(value)
    status = [o for o in objects if isinstance(o, dict) and isinstance(o.get("communicators"), list)]
    if status:
        return _status_from_json(status[-1])
    dead = [_process_from_json(o.get("peer")) for o in objects
            if isinstance(o, dict) and o.get("event") == "PEER_DEAD" and isinstance(o.get("peer"), dict)]
    if not dead and not any(isinstance(o, dict) and isinstance(o.get("event"), str) for o in objects):
        return None
    dead = list(dict.fromkeys(dead))[:MAX_LISTED]
    return RasReport(form="monitor", num_dead_processes=len(dead) or None, dead_processes=tuple(dead))


def opens_block(text: str) -> bool:
    """True for a log line with which a RAS report (or a paste of one of its parts) starts."""
    line = text.strip()
    return any(pattern.match(line) for pattern in _OPENERS)


def parse_monitor_line(text: str) -> RasReport | None:
    """`ncclras -m`'s "[...] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1" as a report
    with that dead process, or None."""
    match = _PEER_DEAD.search(text)
    if match is None:
        return None
    proc = _process(match)
    return RasReport(form="monitor", num_dead_processes=1, dead_processes=(proc,))


class RasBlock:
    """A text-form report read line by line out of a log (signatures.LineScanner keeps one per stream).

    `offer(text, line_index)` -> (whether the line is part of the report, entries finished): lines the
    report does not explain are left to the other parsers; after `_MAX_FOREIGN` of them in a row (or
    `MAX_BLOCK_LINES` lines) the block closes. Entries are (fields: `RasReport.to_dict()`, line index of
    the report's first line, one-line text), one per report; `finish()` ends the block."""

    _MAX_FOREIGN = 3

    def __init__(self) -> None:
        self.closed = False
        self.last_line_index = 0
        self._reader = _TextReader()
        self._first_index: int | None = None
        self._foreign = 0
        self._lines = 0

    def offer(self, text: str, line_index: int) -> tuple[bool, list[tuple[dict[str, Any], int, str]]]:
        done: list[tuple[dict[str, Any], int, str]] = []
        self.last_line_index = line_index
        self._lines += 1
        if self._reader.starts_new(text):
            self._finish(done)
        taken = self._reader.feed(text)
        if taken and self._first_index is None and text.strip():
            self._first_index = line_index
        self._foreign = 0 if taken else self._foreign + 1
        if self._foreign >= self._MAX_FOREIGN or self._lines >= MAX_BLOCK_LINES:
            self._finish(done)
            self.closed = True
        return taken, done

    def finish(self) -> list[tuple[dict[str, Any], int, str]]:
        done: list[tuple[dict[str, Any], int, str]] = []
        self._finish(done)
        self.closed = True
        return done

    def _finish(self, done: list[tuple[dict[str, Any], int, str]]) -> None:
        report = self._reader.report()
        if report is not None and self._first_index is not None:
            done.append((report.to_dict(), self._first_index, report.describe()))
        self._reader = _TextReader()
        self._first_index = None


class _TextReader:
    """The text form, one line at a time; `feed` says whether the line was RAS output."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.cuda: tuple[int, int] | None = None
        self.totals: tuple[int, int, int] | None = None
        self.collection_s: float | None = None
        self.groups: list[RasGroup] = []
        self.comms: dict[str, dict[str, Any]] = {}
        self.missing_processes: list[RasProcess] = []
        self.dead_processes: list[RasProcess] = []
        self.num_missing_processes: int | None = None
        self.num_dead_processes: int | None = None
        self.timeouts: int | None = None
        self.no_communicators = False
        self.substance = False  # something a report says (not only headings)
        self.monitor = False  # read `ncclras -m` event lines
        self._header: str = ""  # the last job-summary header line
        self._block: str | None = None  # "incomplete", "dead", "timeout", or a communicator label
        self._detail: str | None = None  # the group header ("has status RUNNING", "reported ...") ranks fall under
        self._error_kind: str | None = None

    def starts_new(self, text: str) -> bool:
        """Whether `text` begins the next report (a repeated query) rather than continuing this one."""
        line = text.strip()
        if line == "Job summary" or _VERSION.match(line) is not None:
            return bool(self.substance or self.groups)
        if _COMMUNICATORS.match(line) or line.startswith("Group ") and _GROUP_HEADER.match(line):
            return bool(self.groups or self.no_communicators)  # a second communicator table
        return False

    def feed(self, text: str) -> bool:
        line = text.strip()
        if not line:
            return True
        if line.startswith("$ ncclras") or line == "[...]":
            return True
        for handler in (self._heading, self._summary, self._table, self._errors, self._ranks, self._monitor):
            if handler(line):
                return True
        return False

    def _heading(self, line: str) -> bool:
        if (match := _VERSION.match(line)) is not None:
            self.version = match.group(1)
            return True
        if (match := _CUDA.match(line)) is not None:
            self.cuda = (int(match.group(1)), int(match.group(2)))
            return True
        if _UNDERLINE.match(line) or line == "Job summary":
            return True
        if line in ("Errors", "Warnings"):
            self._block = None
            return True
        if (match := _COMMUNICATORS.match(line)) is not None:
            if match.group(1):
                self.collection_s = float(match.group(1))
            elif (obtained := _OBTAINED.search(line)) is not None:
                self.collection_s = float(obtained.group(1))
            return True
        if line == "No communicator data collected!":
            self.no_communicators = self.substance = True
            return True
        return False

    def _summary(self, line: str) -> bool:
        if _SUMMARY_HEADER.match(line):
            self._header = line
            return True
        if _OUTLIER.match(line):
            return True
        if _NUMBER_ROW.match(line) and self._header:
            numbers = [int(n) for n in line.split()]
            totals = self._header.count("(total)")
            if totals == 3 and len(numbers) == 5:  # (total) per node per process (total) (total)
                self.totals = (numbers[0], numbers[3], numbers[4])
            elif totals == 3 and len(numbers) == 3:  # (total) (total) (total)
                self.totals = (numbers[0], numbers[1], numbers[2])
            return True
        return False

    def _table(self, line: str) -> bool:
        if _GROUP_HEADER.match(line):
            return True
        match = _GROUP_ROW.match(line)
        if match is None:
            return False
        group, comms, nodes, per_node, per_comm, in_group, status, errors = match.groups()
        if len(self.groups) < MAX_LISTED:
            self.groups.append(RasGroup(int(group), int(comms), int(nodes), per_node, int(per_comm), int(in_group),
                                        status, tuple(errors.split(","))))
        return True

    def _errors(self, line: str) -> bool:
        if line in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            self._block = line.lower()  # a heading alone says nothing yet (a stray "INCOMPLETE" line is no report)
            return True
        if (match := _COMM.match(line)) is not None:
            label = f"#{match.group(1)}-{match.group(2)}"
            comm = self.comms.setdefault(label, {"label": label, "hash": match.group(3).lower().rjust(16, "0"),
                                                 "group": int(match.group(1)), "problems": [], "missing": [],
                                                 "errors": [], "mismatched": [], "num_missing": None,
                                                 "mismatch": None})
            if match.group(4) not in comm["problems"]:
                comm["problems"].append(match.group(4))
            self._block, self._detail, self._error_kind = label, None, match.group(4)
            self.substance = True
            return True
        if (match := _MISSING_DATA.match(line)) is not None:
            self.substance = True
            if match.group(2).startswith("job"):
                self.num_missing_processes = int(match.group(1))
            elif self._block in self.comms:
                self.comms[self._block]["num_missing"] = int(match.group(1))
            return True
        if (match := _DEAD_COUNT.match(line)) is not None:
            self.num_dead_processes = int(match.group(1))
            self._block = "dead"
            self.substance = True
            return True
        if (match := _PROCESS.match(line)) is not None:
            target = self.dead_processes if self._block == "dead" else self.missing_processes
            if self._block in ("dead", "incomplete") and len(target) < MAX_LISTED:
                target.append(_process(match))
                self.substance = True
            return True
        if _NOT_FOUND.match(line):
            return True
        if (match := _TIMEOUTS.match(line)) is not None:
            self.timeouts = int(match.group(1))
            self.substance = True
            return True
        if (match := _MISSING_LIST.match(line)) is not None:
            if self._block in self.comms:
                missing = self.comms[self._block]["missing"]
                for rank in match.group(1).split(","):
                    if len(missing) < MAX_LISTED:
                        missing.append(RasRank(rank=int(rank)))
            return True
        return False

    def _ranks(self, line: str) -> bool:
        comm = self.comms.get(self._block or "")
        if (match := _DIFFERENT.match(line)) is not None:
            if comm is not None:
                comm["mismatch"] = match.group(1)
            return True
        if (match := _RANKS_HAVE.match(line)) is not None:
            self._detail = "has " + match.group(1)
            return True
        if (match := _RANKS_REPORTED.match(line)) is not None:
            self._detail = "reported " + match.group(1)
            return True
        if (match := _ERRORS_ON.match(line)) is not None:
            self._detail = None
            self._error_kind = "ERROR"
            return True
        match = _RANK.match(line)
        if match is None:
            return False
        if comm is None:
            return True
        rank, detail, gpu, nvml, pid, node = match.groups()
        entry = RasRank(rank=int(rank), node=node, pid=_int(pid), gpu=_int(gpu),
                        nvml_gpu=_int(nvml) if nvml is not None else _int(gpu), detail=detail or self._detail)
        key = {"INCOMPLETE": "missing", "ERROR": "errors", "MISMATCH": "mismatched"}[self._error_kind or "MISMATCH"]
        if len(comm[key]) < MAX_LISTED:
            comm[key].append(entry)
        return True

    def _monitor(self, line: str) -> bool:
        if _MONITOR_HEADER.match(line):
            return True
        match = _PEER_DEAD.search(line)
        if match is None:
            return False
        if len(self.dead_processes) < MAX_LISTED:
            self.dead_processes.append(_process(match))
        self.monitor = True
        self.num_dead_processes = max(self.num_dead_processes or 0, len(self.dead_processes))
        self.substance = True
        return True

    def report(self) -> RasReport | None:
        if not (self.substance or self.groups or self.totals):
            return None
        sizes = {g.group: g for g in self.groups}
        comms = []
        for data in self.comms.values():
            group = sizes.get(data["group"])
            size = group.ranks_per_comm if group is not None else None
            missing = data["num_missing"]
            comms.append(RasCommunicator(
                label=data["label"], hash=data["hash"], size=size,
                num_reporting=size - missing if size is not None and missing is not None else None,
                status=group.status if group is not None else None, problems=tuple(data["problems"]),
                num_missing=missing if missing is not None else (len(data["missing"]) or None),
                missing=tuple(data["missing"]), errors=tuple(data["errors"]), mismatch=data["mismatch"],
                mismatched=tuple(data["mismatched"])))
        nodes, processes, gpus = self.totals or (None, None, None)
        status = bool(self.groups or self.totals or self.comms or self.version or self.missing_processes
                      or self.no_communicators or self.num_missing_processes is not None)
        return RasReport(
            form="monitor" if self.monitor and not status else "text", nccl_version=self.version, cuda_runtime=self.cuda[0] if self.cuda else None,
            cuda_driver=self.cuda[1] if self.cuda else None, num_nodes=nodes, num_processes=processes,
            num_gpus=gpus, groups=tuple(self.groups), communicators=tuple(comms),
            num_missing_processes=self.num_missing_processes, missing_processes=tuple(self.missing_processes),
            num_dead_processes=self.num_dead_processes, dead_processes=tuple(self.dead_processes),
            timeouts=self.timeouts, collection_s=self.collection_s, no_communicators=self.no_communicators)


def _status_from_json(data: dict[str, Any]) -> RasReport:
    comms: list[RasCommunicator] = []
    dead: list[RasProcess] = []
    for raw in data["communicators"][:MAX_LISTED]:
        if not isinstance(raw, dict):
            continue
        ranks = [r for r in raw.get("ranks") or () if isinstance(r, dict)] if isinstance(raw.get("ranks"), list) else []
        missing_raw = raw.get("missing_ranks") if isinstance(raw.get("missing_ranks"), list) else []
        missing: list[RasRank] = []
        for entry in missing_raw[:MAX_LISTED]:
            if not isinstance(entry, dict) or _int(entry.get("rank")) is None:
                continue
            status = entry.get("status") if isinstance(entry.get("status"), dict) else {}
            detail = ("considered dead" if status.get("considered_dead") is True
                      else "unresponsive" if status.get("unresponsive") is True else None)
            missing.append(_rank_from_json(entry, detail))
            if status.get("considered_dead") is True:
                dead.append(RasProcess(pid=_int(entry.get("pid")), node=_str(entry.get("host")),
                                       gpus=_ints([entry.get("cuda_dev")])))
        errors: list[RasRank] = []
        for entry in ranks:
            status = entry.get("status") if isinstance(entry.get("status"), dict) else {}
            bad = [f"{name} {code} ({NCCL_RESULTS.get(code, 'unknown')})" for name in ("init_state", "async_error")
                   if (code := _int(status.get(name))) is not None and code not in _FINE_RESULTS]
            if status.get("abort_flag") is True:
                bad.append("aborted")
            if bad and _int(entry.get("rank")) is not None and len(errors) < MAX_LISTED:
                errors.append(_rank_from_json(entry, ", ".join(bad)))
        size = _int(raw.get("size"))
        num_missing = _int(raw.get("missing_ranks_count"))
        num_missing = num_missing if num_missing is not None else len(missing)
        problems = tuple(p for p, present in (("INCOMPLETE", num_missing > 0), ("ERROR", bool(errors))) if present)
        comms.append(RasCommunicator(
            hash=_hash(raw.get("hash")), size=size, num_reporting=_int(raw.get("ranks_count")), problems=problems,
            num_missing=num_missing, missing=tuple(missing), errors=tuple(errors)))
    ras = data.get("ras") if isinstance(data.get("ras"), dict) else {}
    collection = ras.get("collection_time_sec")
    dead = list(dict.fromkeys(dead))
    return RasReport(
        form="json", nccl_version=_str(data.get("nccl_version")), cuda_runtime=_int(data.get("cuda_runtime_version")),
        cuda_driver=_int(data.get("cuda_driver_version")), communicators=tuple(comms),
        num_dead_processes=len(dead) or None, dead_processes=tuple(dead), timeouts=_int(ras.get("timeouts_count")),
        collection_s=float(collection) if type(collection) in (int, float) else None,
        no_communicators=not comms)


def _rank_from_json(entry: dict[str, Any], detail: str | None) -> RasRank:
    return RasRank(rank=_int(entry.get("rank")) or 0, node=_str(entry.get("host")), pid=_int(entry.get("pid")),
                   gpu=_int(entry.get("cuda_dev")), nvml_gpu=_int(entry.get("nvml_dev")), detail=detail)


def _process_from_json(peer: dict[str, Any]) -> RasProcess:
    return RasProcess(pid=_int(peer.get("pid")), node=_str(peer.get("host") or peer.get("addr")),
                      gpus=_ints(peer.get("cuda_devs")), nvml_gpus=_differing(_ints(peer.get("cuda_devs")),
                                                                              _ints(peer.get("nvml_devs"))))


def _process(match: re.Match[str]) -> RasProcess:
    gpus = tuple(int(g) for g in match.group(3).split(","))
    nvml = tuple(int(g) for g in match.group(4).split(",")) if match.group(4) else ()
    return RasProcess(pid=int(match.group(1)), node=match.group(2), gpus=gpus, nvml_gpus=nvml)


def _gpus_text(proc: RasProcess) -> str:
    return f" (GPU {','.join(str(g) for g in proc.gpus)})" if proc.gpus else ""


def _differing(gpus: tuple[int, ...], nvml: tuple[int, ...]) -> tuple[int, ...]:
    return nvml if nvml != gpus else ()


def _hash(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    digits = value.lower().removeprefix("0x")
    return digits.rjust(16, "0") if re.fullmatch(r"[0-9a-f]{1,16}", digits) else None


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value):
        return int(value)
    return None


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(v for v in value[:MAX_LISTED] if type(v) is int)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _ranks(value: Any) -> tuple[RasRank, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(RasRank.from_dict(d) for d in value[:MAX_LISTED] if isinstance(d, dict) and _int(d.get("rank")) is not None)


__all__ = ["KEYWORDS", "MAX_LISTED", "NCCL_RESULTS", "VERDICTS", "RasBlock", "RasCommunicator", "RasGroup", "RasProcess",
           "RasRank", "RasReport", "opens_block", "parse", "parse_json", "parse_monitor_line", "parse_text",
           "parse_text_reports"]
