"""Line up several ranks' flight-recorder dumps: per process group, collective by collective.

Every member of a group issues the group's collectives in the same order, and torch numbers them
(`collective_seq_id`), so seq N on one rank must meet seq N on all the others. Per group this finds:
  - the first collective some ranks never issued (their last seq is lower than the others');
  - collectives issued with a different op, shapes or dtypes at one seq (after a rank skips one and
    carries on, every later seq differs too: the first one is where to look);
  - each rank's last issued / started / completed collective and where its code issued the last one.
Point-to-point ops are left out (they have their own numbering and only two parties).

Dumps taken at different moments of a healthy job can also be a collective apart; torch writes them
when the watchdog gives up on a collective, when the job is stuck, which is when this is read.

Typical use:
    dumps = [read_flight_dump(p) for p in sorted(Path("runs/job-17/fr").iterdir())]
    for group in match_dumps(dumps).groups:
        print(group.label, group.missing, group.mismatches[:1])
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from grpo_doctor.logs.flight_recorder import CollectiveEntry, FlightDump

# Ops whose shapes legitimately differ between ranks (uneven splits).
VARYING_SIZES = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "all_gather_v",
                           "reduce_scatter_v", "coalesced"})


@dataclass(frozen=True)
class Call:
    """What one rank issued at one seq."""

    op: str
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str
    frame: str | None  # where the training code issued it

    @classmethod
    def of(cls, e: CollectiveEntry) -> Call:
        frame = e.user_frame
        return cls(e.op, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes, e.state,
                   str(frame) if frame else None)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "input_sizes": [list(s) for s in self.input_sizes],
                "output_sizes": [list(s) for s in self.output_sizes], "input_dtypes": list(self.input_dtypes),
                "output_dtypes": list(self.output_dtypes)}


@dataclass(frozen=True)
class RankProgress:
    rank: int
    last_issued: int  # highest seq it issued in the group (0: none)
    last_started: int | None  # None: not tracked (gloo) or nothing started
    last_completed: int | None
    last_call: Call | None  # the call at last_issued, when still in the ring buffer

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "last_issued": self.last_issued, "last_started": self.last_started,
                "last_completed": self.last_completed,
                "last_call": self.last_call.to_dict() if self.last_call else None}


@dataclass(frozen=True)
class MissingCollective:
    """The first collective of a group that some members never issued."""

    seq: int
    call: Call | None  # as a rank that issued it recorded it (None: overwritten in every buffer)
    ranks_present: tuple[int, ...]
    ranks_missing: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "call": self.call.to_dict() if self.call else None,
                "ranks_present": list(self.ranks_present), "ranks_missing": list(self.ranks_missing)}


@dataclass(frozen=True)
class CollectiveMismatch:
    """One seq that the ranks issued differently."""

    seq: int
    kinds: tuple[str, ...]  # of "op", "sizes", "dtypes"
    calls: dict[int, Call]  # rank -> its call
    odd_ranks: tuple[int, ...]  # ranks outside the largest group of identical calls (all of them on a tie)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "kinds": list(self.kinds), "calls": {r: c.to_dict() for r, c in self.calls.items()},
                "odd_ranks": list(self.odd_ranks)}


@dataclass(frozen=True)
class GroupMatch:
    pg_name: str
    pg_desc: str
    ranks: tuple[int, ...]  # members: from pg_config, else every rank whose dump shows the group
    ranks_without_dump: tuple[int, ...]
    progress: dict[int, RankProgress]
    missing: MissingCollective | None
    mismatches: tuple[CollectiveMismatch, ...]

    @property
    def label(self) -> str:
        return f"{self.pg_name} ({self.pg_desc})" if self.pg_desc and self.pg_desc != "undefined" else self.pg_name

    def to_dict(self) -> dict[str, Any]:
        return {"pg_name": self.pg_name, "pg_desc": self.pg_desc, "ranks": list(self.ranks),
                "ranks_without_dump": list(self.ranks_without_dump),
                "progress": {r: p.to_dict() for r, p in self.progress.items()},
                "missing": self.missing.to_dict() if self.missing else None,
                "mismatches": [m.to_dict() for m in self.mismatches]}


@dataclass(frozen=True)
class FlightMatch:
    groups: tuple[GroupMatch, ...]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"groups": [g.to_dict() for g in self.groups], "warnings": list(self.warnings)}


def match_dumps(dumps: Sequence[FlightDump]) -> FlightMatch:
    by_rank: dict[int, FlightDump] = {}
    warnings: list[str] = []
    for dump in dumps:
        if dump.rank is None:
            warnings.append(f"{dump.path}: the file name does not end in a rank; left out of the matching")
        elif dump.rank not in by_rank or _preferred(dump, by_rank[dump.rank]):
            by_rank[dump.rank] = dump  # the same rank as pickle and JSON: keep the fuller one
    groups: dict[str, str] = {}
    for dump in by_rank.values():
        for e in dump.entries:
            if not e.is_p2p:
                groups.setdefault(e.pg_name, e.pg_desc)
    return FlightMatch(tuple(_match_group(name, desc, by_rank) for name, desc in sorted(groups.items())),
                       tuple(warnings))


def _preferred(new: FlightDump, old: FlightDump) -> bool:
    """More entries wins; on a tie the pickle, which carries stack frames."""
    return (len(new.entries), new.format == "pickle") > (len(old.entries), old.format == "pickle")


def _match_group(name: str, desc: str, by_rank: dict[int, FlightDump]) -> GroupMatch:
    calls: dict[int, dict[int, CollectiveEntry]] = {}  # rank -> seq -> entry
    pg_ids: set[int] = set()
    for rank, dump in by_rank.items():
        for e in sorted(dump.entries, key=lambda e: e.record_id):
            if e.pg_name == name and not e.is_p2p:
                calls.setdefault(rank, {}).setdefault(e.collective_seq_id, e)  # coalesced: the first op
                pg_ids.add(e.pg_id)
    configured = set().union(*(set(d.pg_ranks.get(name, ())) for d in by_rank.values()))
    if configured:
        members = configured
    elif desc == "default_pg":  # gloo leaves pg_config empty; every rank is in the default group
        members = set(by_rank)
    else:
        members = set(calls)
    dumped = sorted(members & set(by_rank))
    progress = {rank: _progress(rank, by_rank[rank], calls.get(rank, {}), pg_ids) for rank in dumped}
    return GroupMatch(pg_name=name, pg_desc=desc, ranks=tuple(sorted(members)),
                      ranks_without_dump=tuple(sorted(members - set(by_rank))), progress=progress,
                      missing=_missing(progress, calls), mismatches=_mismatches(calls))


def _progress(rank: int, dump: FlightDump, seqs: dict[int, CollectiveEntry], pg_ids: set[int]) -> RankProgress:
    status = [dump.pg_status[i] for i in pg_ids if i in dump.pg_status]
    # the rank's own counters outlive entries overwritten in the ring buffer; entries fill in the rest
    issued = max([*seqs, *(s.last_enqueued for s in status if s.last_enqueued is not None)], default=0)
    started = max((s.last_started for s in status if s.last_started is not None), default=None)
    if started is None:
        started = max((q for q, e in seqs.items() if e.state in ("started", "completed")), default=None)
    completed = max((s.last_completed for s in status if s.last_completed is not None), default=None)
    if completed is None:
        completed = max((q for q, e in seqs.items() if e.state == "completed"), default=None)
    last = seqs.get(issued)
    return RankProgress(rank, issued, started, completed, Call.of(last) if last else None)


def _missing(progress: dict[int, RankProgress], calls: dict[int, dict[int, CollectiveEntry]]) -> MissingCollective | None:
    if not progress:
        return None
    low = min(p.last_issued for p in progress.values())
    if low == max(p.last_issued for p in progress.values()):
        return None
    seq = low + 1
    present = tuple(r for r, p in progress.items() if p.last_issued >= seq)
    entry = next((calls[r][seq] for r in present if seq in calls.get(r, {})), None)
    return MissingCollective(seq=seq, call=Call.of(entry) if entry else None, ranks_present=present,
                             ranks_missing=tuple(r for r, p in progress.items() if p.last_issued < seq))


def _mismatches(calls: dict[int, dict[int, CollectiveEntry]]) -> tuple[CollectiveMismatch, ...]:
    out = []
    for seq in sorted(set().union(*calls.values()) if calls else ()):
        at_seq = {rank: Call.of(seqs[seq]) for rank, seqs in sorted(calls.items()) if seq in seqs}
        if len(at_seq) < 2:
            continue
        kinds = _differences(list(at_seq.values()))
        if kinds:
            out.append(CollectiveMismatch(seq, kinds, at_seq, _odd_ranks(at_seq)))
    return tuple(out)


def _differences(calls: list[Call]) -> tuple[str, ...]:
    if len({c.op for c in calls}) > 1:
        return ("op",)
    kinds = []
    # empty lists are the non-root side of scatter / gather, not a different shape
    if calls[0].op not in VARYING_SIZES and (_differ(c.input_sizes for c in calls)
                                             or _differ(c.output_sizes for c in calls)):
        kinds.append("sizes")
    if _differ(frozenset(c.input_dtypes) for c in calls) or _differ(frozenset(c.output_dtypes) for c in calls):
        kinds.append("dtypes")
    return tuple(kinds)


def _differ(values) -> bool:
    return len({v for v in values if v}) > 1


def _odd_ranks(at_seq: dict[int, Call]) -> tuple[int, ...]:
    def signature(c: Call) -> tuple:
        return (c.op, c.input_sizes, c.output_sizes, c.input_dtypes, c.output_dtypes)

    counts = Counter(signature(c) for c in at_seq.values()).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return tuple(at_seq)
    return tuple(r for r, c in at_seq.items() if signature(c) != counts[0][0])
