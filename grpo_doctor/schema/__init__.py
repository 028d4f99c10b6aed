"""The schema layer, the floor every other part stands on (stdlib only): what is written to disk by
one part and read back by another, and where in a run directory it lives.

- `records`: the records of a rank's event log (header, phases, steps, memory, rollouts, ...)
- `run_paths`: `RunPaths`, the name of every file of a run directory
- `stacks`: Python stacks as py-spy shows them (live captures and stacks parsed from logs)
- `field_checks`: bounds on what a record read back may hold
- `ranks`: rank lists as people write them ("0-3,5")
- `watch_files`: watch's hang reports (`HangReport`) and summary (`WatchSummary`) under supervisor/<host>/
- `run_info`: run.json (`RunInfo`, one `WatchHost` per node's watch)
- `cluster_env`: what the scheduler told a node (node count and id, master, job id), kept in run.json
- `probe_results`: `grpo-doctor probe`'s node reports and collectives file, and their `Problem`s
- `json_shapes`: the shape checks their `from_dict` make on a file read back (`FormatError`)
- `errors`: `DoctorError`, the base of every error a user can fix (a message and a hint)
- `safe_read`, `safe_write`: the one opener and the one writer of whole files (`read_json`, `write_file`):
  no device or FIFO read or replaced, reads capped by reading, failures as one-line DoctorErrors

Typical use:
    from grpo_doctor.schema import PhaseBegin, RunPaths   # records are read back by runlog/decoder.py
"""
from grpo_doctor.schema.records import (  # noqa: F401  (the record types are the schema's face)
    DEFAULT_RUNS_ROOT,
    NON_FINITE,
    OMITTED_WHEN_NONE,
    RECORD_TYPES,
    RUN_DIR_ENV,
    SCHEMA_VERSION,
    BadRecord,
    End,
    EndReason,
    Error,
    Header,
    Memory,
    ParallelGroup,
    PhaseBegin,
    PhaseEnd,
    Record,
    RecordKind,
    Rng,
    Rollout,
    Step,
    UnknownRecord,
    WeightSync,
    check_when,
    encode_values,
    field_order,
    omitted_when_none,
    restore_non_finite,
    wire_order,
)
from grpo_doctor.schema.run_paths import RunPaths, host_dir_name  # noqa: F401

