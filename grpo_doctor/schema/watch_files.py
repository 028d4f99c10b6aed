"""What `grpo-doctor watch` leaves in `supervisor/<host>/` for the report to read back: a hang report
per hang (`hang-N.json`) and the summary written when the job ends (`summary.json`).

watch writes them (`supervisor/hang.py`, `supervisor/summary.py`); the loader reads them back
(`analysis/watch_files.py`) for the rules and the report. `from_dict` is tolerant the way a reader of
old or damaged files must be: absent fields take their defaults (a file of an older version), and a
known field of the wrong shape raises `FormatError` naming it (json_shapes.py), so the file is left out
with one warning instead of stopping the report.

Typical use:
    report = HangReport.from_dict(json.loads(path.read_text()))   # FormatError when damaged
    report.culprits, report.ranks[1].open_phase, report.stacks[1].frames[0].function
    report.fleet.id, report.ranks[3].host        # a verdict over the watches of several nodes
    summary = WatchSummary.from_dict(data); summary.ranks[0].gone, summary.live_scan_complete
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from grpo_doctor.schema.json_shapes import (
    Check,
    by_rank,
    check_object,
    dict_of,
    fields_problem,
    int_keys,
    is_rank,
    list_of,
    opt,
    str_keys,
)
from grpo_doctor.schema.stacks import ThreadStack

_int, _num, _str, _bool = opt(int), opt(int, float), opt(str), opt(bool)


def _thread(value: Any) -> bool:
    """A ThreadStack as to_dict writes it (null where the rank had none)."""
    if value is None:
        return True
    if type(value) is not dict or type(value.get("frames")) not in (list, type(None)):
        return False
    if not all(type(f) is dict and type(f.get("function")) is str and type(f.get("filename")) is str
               for f in value.get("frames") or []):
        return False
    try:
        ThreadStack.from_dict(value)
    except (KeyError, TypeError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class HangRank:
    """One rank at a hang: what its event log said, and what the two looks at its stack showed."""

    pid: int | None = None
    verdict: str | None = None  # "stuck" (same stack both looks), "moving", "unknown" (no stack)
    open_phase: str | None = None  # None: no event log, or between phases
    step: int | None = None
    idle_s: float | None = None  # since its last record
    timeout_s: float | None = None  # the stall timeout it was judged by
    role: str | None = None  # a Ray actor's process title at the hang, "ray::PolicyWorker.train_step"
    host: str | None = None  # the host the rank ran on (set in a fleet verdict; the report's host otherwise)
    left_phase: str | None = None  # between phases: the phase it left last (where the time since went)

    FIELDS: ClassVar[dict[str, Check]] = {"pid": _int, "verdict": _str, "open_phase": _str, "step": _int,
                                          "idle_s": _num, "timeout_s": _num, "role": _str, "host": _str,
                                          "left_phase": _str}

    def to_dict(self) -> dict[str, Any]:
        out = {"pid": self.pid, "verdict": self.verdict, "open_phase": self.open_phase, "step": self.step,
               "idle_s": self.idle_s, "timeout_s": self.timeout_s}
        # Written only when known, so that files of older versions write back as they were read.
        return out | {k: v for k, v in (("role", self.role), ("host", self.host), ("left_phase", self.left_phase))
                      if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HangRank:
        return cls(**{k: data.get(k) for k in cls.FIELDS})


def _node_keys(value: Any) -> bool:
    """None, or an object keyed by node id ("0", "17") whose values are strings (host names, reasons)."""
    return value is None or (type(value) is dict and all(
        type(k) is str and k.isdecimal() and len(k) < 7 and type(v) is str for k, v in value.items()))


def phase_words(info: HangRank) -> str:
    """Where a rank was in its loop at a hang, in words: "in reward", "between phases, after all_gather"
    (a reward function --instrument does not wrap), or "in no phase" when nothing says more."""
    if info.open_phase:
        return f"in {info.open_phase}"
    if info.left_phase:
        return f"between phases, after {info.left_phase}"
    return "in no phase"


@dataclass(frozen=True)
class HangFleet:
    """The fleet part of a hang verdict made over the watches of several nodes (supervisor/fleet.py):
    which decision it is, who made it, which nodes' stacks it merged and which nodes it could not hear."""

    id: str = ""  # names the decision: every watch of the job writes the same verdict under it
    decider: str = ""  # the host of the watch that decided
    decider_node: int | None = None
    nodes: dict[int, str] = field(default_factory=dict)  # node id -> host, of the stacks merged
    missing: dict[int, str] = field(default_factory=dict)  # node id -> why it is not in ("no report for 40 s")
    nnodes: int | None = None  # the job's node count, as the scheduler said
    action: str = "report"  # "kill": the decider's --on-hang kill, every watch ends its own node's tree
    stacks_kept: str = "all"  # "all", or "groups": one stack per group and the culprits' (a large job)

    FIELDS: ClassVar[dict[str, Check]] = {"id": _str, "decider": _str, "decider_node": _int, "nodes": _node_keys,
                                          "missing": _node_keys, "nnodes": _int, "action": _str, "stacks_kept": _str}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "decider": self.decider, "decider_node": self.decider_node,
                "nodes": str_keys(self.nodes), "missing": str_keys(self.missing), "nnodes": self.nnodes,
                "action": self.action, "stacks_kept": self.stacks_kept}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HangFleet:
        return cls(id=data.get("id") or "", decider=data.get("decider") or "", decider_node=data.get("decider_node"),
                   nodes=int_keys(data.get("nodes")), missing=int_keys(data.get("missing")), nnodes=data.get("nnodes"),
                   action=data.get("action") or "report", stacks_kept=data.get("stacks_kept") or "all")


def _fleet(value: Any) -> bool:
    return value is None or (type(value) is dict and fields_problem(value, HangFleet.FIELDS) is None)


HANG_FIELDS: dict[str, Check] = {
    "host": _str, "detected_t": _num, "ranks": by_rank(HangRank.FIELDS), "groups": list_of(_str),
    "culprits": list_of(is_rank), "odd_ranks": list_of(is_rank), "odd": list_of(is_rank),
    "stack_dirs": list_of(_str), "stack_errors": by_rank(value=_str), "ptrace_denied": _bool,
    "flight_recorder_files": list_of(_str), "gpus": list_of(lambda g: type(g) is dict),
    "stacks": by_rank(value=_thread),
    "actors": list_of(lambda a: type(a) is dict and type(a.get("pid")) is int),
    "fleet": _fleet,
    "nccl_ras": lambda v: v is None or (type(v) is dict and type(v.get("raw", "")) is str),
}


@dataclass(frozen=True)
class HangReport:
    """`supervisor/<host>/hang-N.json`: every rank when watch found the job making no progress."""

    host: str = ""
    detected_t: float | None = None  # wall s
    ranks: dict[int, HangRank] = field(default_factory=dict)
    groups: tuple[str, ...] = ()  # one line per group of identical stacks
    culprits: tuple[int, ...] = ()  # the ranks the others wait for
    odd_ranks: tuple[int, ...] = ()  # ranks outside the largest group of identical stacks
    stack_dirs: tuple[str, ...] = ()  # the py-spy captures, first look then second
    stack_errors: dict[int, str] = field(default_factory=dict)  # rank -> why its stack is missing
    ptrace_denied: bool = False
    flight_recorder_files: tuple[str, ...] = ()  # names in fr/ at the time
    gpus: tuple[dict[str, Any], ...] = ()  # the latest GPU samples (supervisor/sampler.py's GpuSample)
    # rank -> its main thread at the second look, so the rules need not find the capture files (the run
    # directory may have moved); absent in files written before watch kept them.
    stacks: dict[int, ThreadStack] = field(default_factory=dict)
    # Ray workers of the job with no rank (a rollout or reward actor outside the process group):
    # {"pid", "role" (process title), "verdict", "where" (the stack's headline)}, one per process.
    actors: tuple[dict[str, Any], ...] = ()
    # Set on the verdict of several nodes' watches (supervisor/fleet.py): every rank of every node, each
    # with its `host`; `host` above is then the culprit's host. None: one node's watch judged alone.
    fleet: HangFleet | None = None
    # What NCCL's RAS said at the hang (supervisor/nccl_ras_client.py's RasQuery.to_dict(): "via", "raw",
    # "report", ...), where `ncclras` or its port answered; None on a gloo job or an NCCL before 2.24.
    nccl_ras: dict[str, Any] | None = None
    file: str | None = None  # where it was read from; set by the reader, never written

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "detected_t": self.detected_t,
            "ranks": str_keys({r: info.to_dict() for r, info in self.ranks.items()}), "groups": list(self.groups),
            "culprits": list(self.culprits), "odd_ranks": list(self.odd_ranks), "stack_dirs": list(self.stack_dirs),
            "stack_errors": str_keys(self.stack_errors), "ptrace_denied": self.ptrace_denied,
            "flight_recorder_files": list(self.flight_recorder_files), "gpus": list(self.gpus),
            "stacks": str_keys({r: thread.to_dict() for r, thread in self.stacks.items()}),
        } | ({"actors": list(self.actors)} if self.actors else {}) | (
            {"fleet": self.fleet.to_dict()} if self.fleet is not None else {}) | (
            {"nccl_ras": self.nccl_ras} if self.nccl_ras is not None else {})

    @classmethod
    def from_dict(cls, data: Any, file: str | None = None) -> HangReport:
        """Raises FormatError when a known field has the wrong shape."""
        check_object(data, HANG_FIELDS)
        odd = data.get("odd_ranks") if data.get("odd_ranks") is not None else data.get("odd")  # "odd" in memory once
        return cls(
            host=data.get("host") or "", detected_t=data.get("detected_t"),
            ranks={r: HangRank.from_dict(info) for r, info in int_keys(data.get("ranks")).items()},
            groups=tuple(data.get("groups") or ()), culprits=tuple(int(r) for r in data.get("culprits") or ()),
            odd_ranks=tuple(int(r) for r in odd or ()), stack_dirs=tuple(data.get("stack_dirs") or ()),
            stack_errors=int_keys(data.get("stack_errors")), ptrace_denied=bool(data.get("ptrace_denied")),
            flight_recorder_files=tuple(data.get("flight_recorder_files") or ()), gpus=tuple(data.get("gpus") or ()),
            stacks={r: ThreadStack.from_dict(t) for r, t in int_keys(data.get("stacks")).items() if t},
            actors=tuple(data.get("actors") or ()),
            fleet=HangFleet.from_dict(data["fleet"]) if data.get("fleet") is not None else None, file=file,
            nccl_ras=data.get("nccl_ras"),
        )

    def ranks_with_verdict(self, verdict: str) -> tuple[int, ...]:
        """The ranks whose second look gave this verdict ("stuck", "moving")."""
        return tuple(r for r, info in self.ranks.items() if info.verdict == verdict)

    def host_of(self, rank: int) -> str:
        """The host a rank ran on: its own where the report holds several hosts' ranks, else the report's."""
        info = self.ranks.get(rank)
        return (info.host if info is not None and info.host else None) or self.host

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host whose ranks the report holds, in rank order, each once."""
        return tuple(dict.fromkeys(self.host_of(r) for r in sorted(self.ranks))) or ((self.host,) if self.host else ())


@dataclass(frozen=True)
class WatchedRank:
    """One rank as watch last saw it."""

    pid: int | None = None
    step: int | None = None
    open_phase: str | None = None
    ended: str | None = None  # its end record's reason: "exit", "shutdown", "exception", "signal"
    error: str | None = None  # its last error record, "RuntimeError in rollout"
    gone: str | None = None  # how its process left without a clean end, as watch saw it
    role: str | None = None  # a Ray actor's process title, as last seen
    gone_t: float | None = None  # wall s when watch saw its process gone: which rank went first

    FIELDS: ClassVar[dict[str, Check]] = {"pid": _int, "step": _int, "open_phase": _str, "ended": _str,
                                          "error": _str, "gone": _str, "role": _str, "gone_t": _num}

    @property
    def ended_cleanly(self) -> bool:
        """watch notes every rank that left, also one that wrote its end record and exited normally."""
        return self.ended in ("exit", "shutdown") and not self.error

    def to_dict(self) -> dict[str, Any]:
        out = {"pid": self.pid, "step": self.step, "open_phase": self.open_phase, "ended": self.ended,
               "error": self.error, "gone": self.gone}
        # Written only when known, so that files of older versions write back as they were read.
        return out | {k: v for k, v in (("role", self.role), ("gone_t", self.gone_t)) if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatchedRank:
        return cls(**{k: data.get(k) for k in cls.FIELDS})


SUMMARY_FIELDS: dict[str, Check] = {
    "host": _str, "end_t": _num, "command_status": _int, "exit_status": _int, "command_result": _str,
    "hang_ended_by_watch": _bool, "num_hangs": _int, "ranks": by_rank(WatchedRank.FIELDS),
    "signatures": dict_of(lambda n: type(n) is int), "bad_event_lines": _int, "live_scan_complete": _bool,
    "live_scan_skipped_bytes": _int,
}


@dataclass(frozen=True)
class WatchSummary:
    """`supervisor/<host>/summary.json`: how the job ended, as watch saw it on this host."""

    host: str = ""
    end_t: float | None = None  # wall s
    command_status: int | None = None  # as subprocess reports it: -N for a signal; None if never started
    exit_status: int | None = None  # what watch exited with (124 when it ended a hung job)
    command_result: str | None = None  # "exit status 1", "killed by SIGKILL"
    hang_ended_by_watch: bool = False
    num_hangs: int = 0
    ranks: dict[int, WatchedRank] = field(default_factory=dict)
    signatures: dict[str, int] = field(default_factory=dict)  # failure kind -> times seen in the output
    bad_event_lines: int = 0
    # False: part of the output was not scanned live (the job outran the scanner); the report scans the
    # saved output instead. Files of versions before the live scan count as complete.
    live_scan_complete: bool = True
    live_scan_skipped_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "end_t": self.end_t, "command_status": self.command_status,
            "exit_status": self.exit_status, "command_result": self.command_result,
            "hang_ended_by_watch": self.hang_ended_by_watch, "num_hangs": self.num_hangs,
            "ranks": str_keys({r: info.to_dict() for r, info in self.ranks.items()}),
            "signatures": dict(self.signatures), "bad_event_lines": self.bad_event_lines,
            "live_scan_complete": self.live_scan_complete, "live_scan_skipped_bytes": self.live_scan_skipped_bytes,
        }

    @classmethod
    def from_dict(cls, data: Any) -> WatchSummary:
        """Raises FormatError when a known field has the wrong shape."""
        check_object(data, SUMMARY_FIELDS)
        return cls(
            host=data.get("host") or "", end_t=data.get("end_t"), command_status=data.get("command_status"),
            exit_status=data.get("exit_status"), command_result=data.get("command_result"),
            hang_ended_by_watch=bool(data.get("hang_ended_by_watch")), num_hangs=data.get("num_hangs") or 0,
            ranks={r: WatchedRank.from_dict(info) for r, info in int_keys(data.get("ranks")).items()},
            signatures=dict(data.get("signatures") or {}), bad_event_lines=data.get("bad_event_lines") or 0,
            live_scan_complete=data.get("live_scan_complete") is not False,
            live_scan_skipped_bytes=data.get("live_scan_skipped_bytes") or 0,
        )
