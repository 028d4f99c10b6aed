"""One rank's column batches: its phase begins, phase ends and memory snapshots in columns.

A run of 64 ranks x 2,000 steps holds 2 M records, 15 of every 16 a phase begin, a phase end or a
memory snapshot, and building a frozen dataclass for each costs more than parsing its line. The
decoder (decoder.py) puts those three kinds into columns (phases already paired, begin with end)
and builds records of the kinds that rules and the report read as objects (header, step, error,
end, rollout, rng, and kinds this version does not know). The log holds the columns as
`log.tables` (`RankTables`), with the answers the records left out would give (the open phase,
the last record, the host of a file without header), which `RankLog` then gives.

Typical use:
    log = decoder.read_rank_file(Path("runs/job-17/ranks/rank-00003.jsonl"))
    log.tables.phases["duration_s"], log.tables.open_path
"""
from __future__ import annotations

from dataclasses import dataclass, field

from grpo_doctor.runlog.columns import Column, as_list, compact, concatenated, selected
from grpo_doctor.runlog.window import ReadPlan
from grpo_doctor.schema import Record, Step, UnknownRecord

# Per rank file; the loader adds rank and host. Open phases (no end yet) come last, end_t None.
PHASE_FIELDS = ("step", "phase", "path", "begin_t", "end_t", "duration_s", "error")
MEMORY_FIELDS = ("step", "t", "tag", "host_rss_bytes", "device", "allocated_bytes", "reserved_bytes",
                 "peak_allocated_bytes", "inactive_split_bytes", "free_bytes", "total_bytes", "num_alloc_retries",
                 "host_vms_bytes")


@dataclass
class RankTables:
    """One rank's phase begins, phase ends and memory snapshots in columns, held by its `RankLog`
    (`log.tables`) in place of those records, with what the records left no longer tell."""

    phases: dict[str, Column] = field(default_factory=dict)  # PHASE_FIELDS
    memory: dict[str, Column] = field(default_factory=dict)  # MEMORY_FIELDS
    # step, t and each metric of the Step records (which stay in `records` too), when every one
    # has the same metrics in the same order; None when not (the loader reads the records then).
    steps: dict[str, Column] | None = field(default_factory=dict)
    open_path: str | None = None  # the phase open at the end of the file
    last_record: Record | UnknownRecord | None = None  # the file's last record, of any kind
    first_host: str | None = None  # of the first record in the file; looked for only without a header
    read_plan: ReadPlan | None = None  # the bytes read (window.py)

    def followed_by(self, later: RankTables, records: list[Record | UnknownRecord]) -> RankTables:
        """These tables and a later file's of the same rank, one after the other; `records` are the
        merged logs' records, whose steps are tabled anew. What was open at the end of this file never
        ends (the later file is a new attempt, which starts with nothing open), as in one file."""
        ended = [end_t is not None for end_t in as_list(self.phases["end_t"])]
        return RankTables(
            phases={name: concatenated(selected(self.phases[name], ended), later.phases[name]) for name in PHASE_FIELDS},
            memory={name: concatenated(self.memory[name], later.memory[name]) for name in MEMORY_FIELDS},
            steps=step_columns([r for r in records if type(r) is Step]), open_path=later.open_path,
            last_record=later.last_record, first_host=self.first_host or later.first_host, read_plan=None)


def step_columns(steps: list[Step]) -> dict[str, Column] | None:
    """step, t and each metric of the Step records, when every one has the same metrics in the same
    order; None when not (the loader reads the records then)."""
    if not steps:
        return {"step": [], "t": []}
    names = tuple(steps[0].metrics) if type(steps[0].metrics) is dict else ()
    if (not names or {"rank", "host", "step", "t"} & set(names)
            or any(type(s.metrics) is not dict or tuple(s.metrics) != names for s in steps)):
        return None
    metrics = [s.metrics for s in steps]
    return {"step": compact([s.step for s in steps]), "t": compact([s.t for s in steps]),
            **{name: compact([m[name] for m in metrics]) for name in names}}
