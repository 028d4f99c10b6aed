"""Read one PyTorch flight-recorder dump: the last collectives a rank issued, as torch recorded them.

torch's c10d FlightRecorder (NCCL; gloo too, seen in torch 2.13) keeps a ring buffer of collectives
(`TORCH_FR_BUFFER_SIZE`, formerly `TORCH_NCCL_TRACE_BUFFER_SIZE`) and writes it as a pickle of plain
dicts and lists: on a watchdog timeout to `<TORCH_FR_DUMP_TEMP_FILE><rank>` (`TORCH_NCCL_DUMP_ON_TIMEOUT`),
or on request (`torch._C._distributed_c10d._dump_fr_trace()`); `_dump_fr_trace_json()` gives the same
as JSON (pg_status numbers as strings, no stack frames). Layout, dump version "2.10" as torch 2.13 writes it:
  {"version", "comm_lib_version", "nccl_comm_state"?, "pg_config": {name: {"name", "desc", "ranks": "[0, 1]"}},
   "pg_status": {pg_id: {"last_enqueued_collective", "last_started_collective", "last_completed_collective"}},
   "entries": [{"record_id", "pg_id", "process_group": (name, desc), "collective_seq_id", "p2p_seq_id",
                "op_id", "profiling_name": "nccl:all_reduce", "time_created_ns", "input_sizes": [[8]],
                "input_dtypes": ["Float"], "output_sizes", "output_dtypes", "state", "retired", "timeout_ms",
                "is_p2p", "duration_ms"?, "frames": [{"name", "filename", "line"}], ...}]}
The dump does not say which rank wrote it: the file name does (torch's writer appends the rank).

A pickle runs code when it names a callable; torch's dump never does, so the unpickler here refuses
every global and a crafted file can at worst fail to load. A pickle also refers to an object it
built before in two bytes (its memo), so a few hundred bytes can describe a list of 10**30 strings
that only turning it into text would expand ("billion laughs"): the loaded value is walked once as if
expanded, within a budget of objects proportional to the file's size and a depth no dump comes
near, before anything reads it, and every field is checked for its type before it is converted.

Typical use:
    dump = read_flight_dump("runs/job-17/fr/nccl_trace_rank_3")
    print(dump.rank, [(e.op, e.collective_seq_id, e.state) for e in dump.entries])
"""
from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.safe_read import UnreadableFile, open_regular, read_bytes

MAX_DUMP_BYTES = 64 * 1024 * 1024  # a full 2,000-entry buffer with stacks is a few MB
MAX_FRAMES = 12  # innermost frames kept per entry: enough to reach the training code
# A pickle can repeat one entry a million times for two bytes each; real buffers hold 2,000 by default.
MAX_ENTRIES = 100_000
SNIFF_BYTES = 4096
MAX_DEPTH = 16  # torch's layout is 6 levels deep (entries -> entry -> frames -> frame -> value)
# Objects (and 64-character pieces of strings) a dump may hold once shared references are expanded,
# per byte of the file: a real dump refers to an earlier object in two bytes at the least, so it
# never comes near; a crafted one that repeats references inside repeated references goes past.
MAX_OBJECTS_PER_BYTE = 4
MIN_OBJECT_BUDGET = 100_000
STATES = ("scheduled", "started", "completed")


class FlightDumpError(DoctorError):
    """A file is not a readable flight-recorder dump; the message names the file and the cause."""


@dataclass(frozen=True)
class Frame:
    name: str
    filename: str
    line: int

    def __str__(self) -> str:
        return f"{self.name} ({self.filename}:{self.line})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "filename": self.filename, "line": self.line}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Frame:
        return cls(str(data.get("name", "?")), str(data.get("filename", "?")), int(data.get("line") or 0))


@dataclass(frozen=True)
class CollectiveEntry:
    """One recorded collective (or p2p op) of one rank."""

    record_id: int
    pg_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    profiling_name: str  # "<backend>:<op>", p2p with peers: "nccl:send 0->1"
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str  # one of STATES; gloo never updates it, so its entries stay "scheduled"
    is_p2p: bool = False
    retired: bool = False  # watchdog let go of it: completed, failed or timed out
    time_created_ns: int = 0
    timeout_ms: int | None = None
    duration_ms: float | None = None
    frames: tuple[Frame, ...] = ()  # innermost first

    @property
    def op(self) -> str:
        return self.profiling_name.partition(":")[2].split(" ")[0] or self.profiling_name

    @property
    def user_frame(self) -> Frame | None:
        """The innermost frame outside torch: where the training code issued the collective."""
        return next((f for f in self.frames if "/torch/" not in f.filename), self.frames[-1] if self.frames else None)

    def to_dict(self) -> dict[str, Any]:
        return {"record_id": self.record_id, "pg_id": self.pg_id, "pg_name": self.pg_name, "pg_desc": self.pg_desc,
                "collective_seq_id": self.collective_seq_id, "p2p_seq_id": self.p2p_seq_id,
                "profiling_name": self.profiling_name, "input_sizes": [list(s) for s in self.input_sizes],
                "output_sizes": [list(s) for s in self.output_sizes], "input_dtypes": list(self.input_dtypes),
                "output_dtypes": list(self.output_dtypes), "state": self.state, "is_p2p": self.is_p2p,
                "retired": self.retired, "time_created_ns": self.time_created_ns, "timeout_ms": self.timeout_ms,
                "duration_ms": self.duration_ms, "frames": [f.to_dict() for f in self.frames]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectiveEntry:
        return cls(**{**data, "input_sizes": _sizes(data["input_sizes"]), "output_sizes": _sizes(data["output_sizes"]),
                      "input_dtypes": tuple(data["input_dtypes"]), "output_dtypes": tuple(data["output_dtypes"]),
                      "frames": tuple(Frame.from_dict(f) for f in data.get("frames") or ())})


@dataclass(frozen=True)
class PgStatus:
    """A rank's own count of one group's collectives; None where torch does not track it (-1)."""

    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"last_enqueued": self.last_enqueued, "last_started": self.last_started,
                "last_completed": self.last_completed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PgStatus:
        return cls(data.get("last_enqueued"), data.get("last_started"), data.get("last_completed"))


@dataclass(frozen=True)
class FlightDump:
    path: str
    rank: int | None  # from the file name; None when it does not end in one
    version: str
    format: str  # "pickle" or "json"
    comm_lib_version: str
    pg_ranks: dict[str, tuple[int, ...]]  # group name -> global ranks, as pg_config says (gloo: often empty)
    pg_status: dict[int, PgStatus]  # pg_id -> status
    entries: tuple[CollectiveEntry, ...]
    host: str | None = None  # torch's dumps do not name the host; a loader that knows may set it

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "rank": self.rank, "host": self.host, "version": self.version,
                "format": self.format, "comm_lib_version": self.comm_lib_version,
                "pg_ranks": {k: list(v) for k, v in self.pg_ranks.items()},
                "pg_status": {k: v.to_dict() for k, v in self.pg_status.items()},
                "entries": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FlightDump:
        return cls(path=data["path"], rank=data.get("rank"), version=data["version"], format=data["format"],
                   comm_lib_version=data.get("comm_lib_version") or "",
                   pg_ranks={k: tuple(v) for k, v in (data.get("pg_ranks") or {}).items()},
                   pg_status={int(k): PgStatus.from_dict(v) for k, v in (data.get("pg_status") or {}).items()},
                   entries=tuple(CollectiveEntry.from_dict(e) for e in data.get("entries") or ()),
                   host=data.get("host"))


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a flight-recorder dump holds only plain data")


def is_flight_dump(path: str | Path) -> bool:
    """Cheap look at the first bytes: torch's pickle starts with a dict whose first key is "version";
    its JSON (keys sorted) with "comm_lib_version", and any layout names "collective_seq_id" early."""
    try:
        with open_regular(path) as f:  # a FIFO is never opened, a device never read (schema/safe_read.py)
            head = f.read(SNIFF_BYTES)
    except OSError:
        return False
    if head[:1] == b"\x80":
        return b"version" in head[:64] and b"pg_config" in head
    return head.lstrip()[:1] == b"{" and any(k in head for k in (b'"comm_lib_version"', b'"pg_config"',
                                                                  b'"collective_seq_id"'))


def read_flight_dump(path: str | Path, rank: int | None = None, max_bytes: int = MAX_DUMP_BYTES) -> FlightDump:
    """Parse one dump file; raises FlightDumpError for anything that is not a readable dump."""
    path = Path(path)
    try:  # a device, a FIFO or a file past the cap is refused without being read (schema/safe_read.py)
        data = read_bytes(path, cap=max_bytes, what="a flight-recorder dump")
    except UnreadableFile as exc:
        if exc.over_cap is not None:
            raise FlightDumpError(f"{path}: over the {max_bytes}-byte limit for a dump") from None
        raise FlightDumpError(f"{path}: cannot be read ({exc.why})") from None
    if not data.strip():
        raise FlightDumpError(f"{path}: empty file (the rank was probably killed while dumping)")
    fmt = "pickle" if data[:1] == b"\x80" else "json"
    try:
        raw = _NoGlobalsUnpickler(io.BytesIO(data)).load() if fmt == "pickle" else json.loads(data)
    except Exception as exc:  # noqa: BLE001 - arbitrary bytes can fail in any of a dozen ways; all mean "not a dump"
        raise FlightDumpError(f"{path}: not a readable flight-recorder {fmt} ({_one_line(exc)})") from None
    if rank is None:
        match = re.search(r"(\d+)(\.json)?$", path.name)
        rank = int(match.group(1)) if match else None
    try:
        _check_bounded(raw, max(MIN_OBJECT_BUDGET, MAX_OBJECTS_PER_BYTE * len(data)))
        return _build(raw, str(path), rank, fmt)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:  # OverflowError: int(inf)
        raise FlightDumpError(f"{path}: not a flight-recorder dump ({_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # KeyError's str() adds quotes
    return f"{type(exc).__name__}: {' '.join(str(detail).split())}"


def _check_bounded(raw: Any, max_objects: int) -> None:
    """Walks the value as if every shared reference were a copy, without copying: ValueError past
    `max_objects` objects or MAX_DEPTH levels. Iterative, so depth costs no recursion."""
    stack, count = [(raw, 1)], 1
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str | bytes):
            count += len(item) // 64
        elif isinstance(item, dict | list | tuple | set | frozenset):
            if depth > MAX_DEPTH:
                raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
            children = [v for kv in item.items() for v in kv] if isinstance(item, dict) else item
            count += len(children)
            if count > max_objects:
                raise ValueError(f"more than {max_objects} objects once expanded (repeated references)")
            stack.extend((child, depth + 1) for child in children)
        if count > max_objects:
            raise ValueError(f"more than {max_objects} objects once expanded (repeated references)")


def _group_ranks(value: Any) -> tuple[int, ...]:
    """pg_config's "ranks": "[0, 1]" as torch writes it, or a list of ints."""
    if isinstance(value, str):
        return tuple(int(r) for r in re.findall(r"\d+", value[:1_000_000]))
    if isinstance(value, list | tuple) and all(type(r) is int for r in value):
        return tuple(value)
    raise ValueError(f"pg_config ranks is a {type(value).__name__}, not a list of ranks")


def _build(raw: Any, path: str, rank: int | None, fmt: str) -> FlightDump:
    if not isinstance(raw, dict) or "version" not in raw or not ({"entries", "pg_config"} & raw.keys()):
        raise ValueError("no 'version' and 'entries' / 'pg_config' at the top level")
    pg_config = raw.get("pg_config") or {}
    if not isinstance(pg_config, dict) or not all(isinstance(info, dict) for info in pg_config.values()):
        raise ValueError("pg_config is not a dict of groups")
    pg_ranks = {str(name): _group_ranks(info.get("ranks", ""))
                for name, info in pg_config.items() if name}
    pg_status = {int(pg_id): PgStatus(*(_count(s.get(k)) for k in ("last_enqueued_collective",
                                                                    "last_started_collective",
                                                                    "last_completed_collective")))
                 for pg_id, s in (raw.get("pg_status") or {}).items()}
    raw_entries = raw.get("entries") or ()
    if len(raw_entries) > MAX_ENTRIES:
        raise ValueError(f"{len(raw_entries)} entries, over the limit of {MAX_ENTRIES}")
    entries = tuple(_entry(i, e) for i, e in enumerate(raw_entries))
    return FlightDump(path=path, rank=rank, version=str(raw["version"]), format=fmt,
                      comm_lib_version=str(raw.get("comm_lib_version") or ""), pg_ranks=pg_ranks,
                      pg_status=pg_status, entries=entries)


def _entry(index: int, e: dict[str, Any]) -> CollectiveEntry:
    missing = [k for k in ("process_group", "collective_seq_id", "profiling_name") if k not in e]
    if missing:
        raise KeyError(f"entry {index} lacks {', '.join(missing)}")
    pg_name, pg_desc = e["process_group"]
    name = str(e["profiling_name"])
    state = str(e.get("state") or "scheduled")
    timeout = e.get("timeout_ms")
    duration = e.get("duration_ms")
    return CollectiveEntry(
        record_id=int(e.get("record_id", index)), pg_id=int(e.get("pg_id", 0)), pg_name=str(pg_name),
        pg_desc=str(pg_desc), collective_seq_id=int(e["collective_seq_id"]), p2p_seq_id=int(e.get("p2p_seq_id", 0)),
        profiling_name=name, input_sizes=_sizes(e.get("input_sizes") or ()),
        output_sizes=_sizes(e.get("output_sizes") or ()), input_dtypes=tuple(map(str, e.get("input_dtypes") or ())),
        output_dtypes=tuple(map(str, e.get("output_dtypes") or ())), state=state if state in STATES else "scheduled",
        # dumps before is_p2p existed: p2p ops are the ones named send/recv
        is_p2p=bool(e.get("is_p2p", re.search(r":(send|recv)\b", name) is not None)),
        retired=bool(e.get("retired", False)), time_created_ns=int(e.get("time_created_ns") or 0),
        timeout_ms=int(timeout) if timeout is not None else None,
        duration_ms=float(duration) if duration is not None else None,
        frames=tuple(Frame.from_dict(f) for f in (e.get("frames") or ())[:MAX_FRAMES]))


def _sizes(value: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(d) for d in shape) for shape in value)


def _count(value: Any) -> int | None:
    """pg_status numbers: ints in the pickle, strings in the JSON; -1 means "not tracked"."""
    if value is None:
        return None
    number = int(value)
    return number if number >= 0 else None
