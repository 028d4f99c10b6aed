"""The records of a run's event log and the layout of a run directory, defined once.

Every process of a job appends records to its own JSON-lines file under `ranks/`; the
supervisor and the analyser read them back with the one decoder, `grpo_doctor.runlog.decoder`. A record is a frozen
dataclass; on disk it is one JSON object per line with the common fields first.

Typical use:
    rec = PhaseBegin(rank=0, host="node-1", pid=42, step=3, t=time.time(), mono=time.monotonic(),
                     phase="rollout", path="rollout")
    line = json.dumps(rec.to_dict())
    assert decoder.record_from_dict(json.loads(line)) == rec   # grpo_doctor.runlog.decoder: the one reader

Compatibility: a reader accepts records of any schema version up to its own; fields it does not
know are dropped, kinds it does not know become `UnknownRecord`.

Non-finite numbers: lines are strict JSON (`jq` reads them), so the sink writes a NaN or infinite
float as the string "NaN", "Infinity" or "-Infinity". Where a number belongs (a step's metric
values, a rollout's statistics and sample rewards) the decoder's `restore_non_finite` turns those
strings back into floats; bare NaN / Infinity tokens, as earlier versions wrote them, are read as ever.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, TypeVar

SCHEMA_VERSION = 1

# A field's metadata key: the field's key is left out of the line while its value is None (a reader
# then sets the default, None). For a rare field on a kind written millions of times.
OMITTED_WHEN_NONE = "omitted_when_none"

RUN_DIR_ENV = "GRPO_DOCTOR_RUN_DIR"
DEFAULT_RUNS_ROOT = "grpo-doctor-runs"


class RecordKind(str, Enum):
    HEADER = "header"
    PHASE_BEGIN = "phase_begin"
    PHASE_END = "phase_end"
    STEP = "step"
    MEMORY = "memory"
    ERROR = "error"
    END = "end"
    ROLLOUT = "rollout"
    RNG = "rng"
    WEIGHT_SYNC = "weight_sync"
    PARALLEL_GROUP = "parallel_group"

    def __str__(self) -> str:
        return self.value


class EndReason(str, Enum):
    EXIT = "exit"  # interpreter shut down normally (sys.exit or end of script)
    SIGNAL = "signal"  # a termination signal was caught (SIGTERM, SIGINT, SIGHUP)
    EXCEPTION = "exception"  # an uncaught exception is ending the process
    SHUTDOWN = "shutdown"  # grpo_doctor.shutdown() was called

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Record:
    """Fields every record carries. `t` is wall time (s since the epoch), `mono` monotonic s."""

    KIND: ClassVar[RecordKind]
    rank: int
    host: str
    pid: int
    step: int | None
    t: float
    mono: float

    def to_dict(self) -> dict[str, Any]:
        return encode_values(type(self), [getattr(self, name) for name in field_order(type(self))])


@dataclass(frozen=True)
class Header(Record):
    """First record of every rank file (and again after each restart of that rank)."""

    KIND: ClassVar[RecordKind] = RecordKind.HEADER
    local_rank: int
    world_size: int
    node_rank: int | None
    local_world_size: int | None
    gpu_uuid: str | None
    versions: dict[str, str | None]  # python, torch, deepspeed, vllm, transformers, trl, nccl, cuda, cuda_driver
    launch: dict[str, str]  # launch settings and NCCL_* / TORCH_* / PYTORCH_* variables as set
    argv: list[str]
    attempt: int = 0  # TORCHELASTIC_RESTART_COUNT
    schema_version: int = SCHEMA_VERSION
    # Where this rank's GPU sits, as NVML numbers it (nvidia-smi's index, "00000000:3B:00.0"); None on CPU,
    # without NVML, or in headers of earlier versions. gpu_uuid above is the same GPU's UUID.
    gpu_index: int | None = None
    gpu_pci_bus_id: str | None = None
    # The memory this process may use, as it stood when the rank started (None: unknown or unlimited):
    # the machine's physical RAM, its memory cgroup's limit (memory.max, the tightest up the cgroup tree)
    # and its address-space limit (RLIMIT_AS, `ulimit -v`). Absent from headers of earlier versions.
    ram_bytes: int | None = None
    cgroup_memory_max_bytes: int | None = None
    rlimit_as_bytes: int | None = None


@dataclass(frozen=True)
class PhaseBegin(Record):
    """`detail` is set by the zero-code instrumentation (rank/auto/): for a collective {"group",
    "group_size", "seq", "numel", "size_bytes", "async"}, for a rollout {"engine"}. A line holds it only
    where it is set (OMITTED_WHEN_NONE), so plain phase lines stay as short as before it was declared."""

    KIND: ClassVar[RecordKind] = RecordKind.PHASE_BEGIN
    phase: str
    path: str  # nested phases joined by "/", e.g. "rollout/generate"
    detail: dict[str, Any] | None = field(default=None, metadata={OMITTED_WHEN_NONE: True})


@dataclass(frozen=True)
class PhaseEnd(Record):
    KIND: ClassVar[RecordKind] = RecordKind.PHASE_END
    phase: str
    path: str
    duration_s: float
    synced: bool  # torch.cuda.synchronize() ran at both ends, so GPU time is included
    error: str | None = None  # exception type that left the phase, if any


@dataclass(frozen=True)
class Step(Record):
    """Step `step` has finished; metrics are its results (loss, kl, reward, grad_norm, ...)."""

    KIND: ClassVar[RecordKind] = RecordKind.STEP
    metrics: dict[str, float | int | str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Memory(Record):
    """One memory snapshot. GPU fields are None where there is no CUDA device."""

    KIND: ClassVar[RecordKind] = RecordKind.MEMORY
    tag: str
    host_rss_bytes: int | None
    device: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    inactive_split_bytes: int | None = None  # free space stranded inside reserved blocks (fragmentation)
    num_alloc_retries: int | None = None
    num_ooms: int | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    # Every process NVML sees on this rank's GPU: [{"pid": int, "used_bytes": int | None}]
    gpu_processes: list[dict[str, int | None]] | None = None
    host_vms_bytes: int | None = None  # the process's virtual size (what RLIMIT_AS caps); absent before


@dataclass(frozen=True)
class Error(Record):
    """An exception that ended (or is about to end) the process."""

    KIND: ClassVar[RecordKind] = RecordKind.ERROR
    exc_type: str
    message: str
    traceback: str
    phase: str | None  # innermost open phase when it was raised
    path: str | None
    memory_dump: str | None = None  # allocator history written for a CUDA OOM, relative to the run dir


@dataclass(frozen=True)
class End(Record):
    KIND: ClassVar[RecordKind] = RecordKind.END
    reason: EndReason | str
    signal: str | None = None
    open_path: str | None = None  # phase still open when the process ended
    num_dropped: int = 0  # records lost because the log could not be written (disk full, ...)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["reason"] = str(self.reason)
        return out


@dataclass(frozen=True)
class Rollout(Record):
    """One step's rollouts on this rank, as statistics and hashes (never every text).

    Completions are listed in the order given; `group_ids[i]` is the GRPO group (the prompt's
    copies) of completion i and `prompt_hashes[i]` the hash of its prompt, so copies of one prompt
    sampled on different ranks can be matched. Hashes are 16 hex digits (64-bit BLAKE2b of the
    token ids, else of the UTF-8 text). Rates are fractions in [0, 1].
    """

    KIND: ClassVar[RecordKind] = RecordKind.ROLLOUT
    num_completions: int
    num_groups: int
    completion_hashes: list[str]
    prompt_hashes: list[str]
    group_ids: list[int]
    duplicate_rate: float | None  # mean over groups of (completions equal to an earlier one in the group) / size
    distinct_1: float | None  # distinct unigrams / unigrams over all completions of the step
    distinct_2: float | None
    edit_distance: float | None  # mean normalised pairwise edit distance within groups, bounded sample
    length_mean: float | None  # tokens (or characters where no token ids were given)
    length_min: int | None
    length_max: int | None
    truncated_frac: float | None  # completions that reached max_length
    reward_mean: float | None
    reward_std: float | None  # over all completions of the step on this rank
    group_reward_std_mean: float | None  # mean over groups of the group's reward std
    zero_std_frac: float | None  # groups whose rewards are all equal (std < 1e-6)
    temperature: float | None = None
    max_length: int | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)  # a few {"group", "prompt", "completion", "reward"}


@dataclass(frozen=True)
class Rng(Record):
    """Fingerprints of this rank's random generators (16 hex digits each; None where absent).

    Ranks that sample different data must differ; ranks of one tensor-parallel group must agree.
    `sampling_seed` is the seed the rollout engine samples with (vLLM's seed), when known.
    """

    KIND: ClassVar[RecordKind] = RecordKind.RNG
    tag: str  # "init", "step", or the caller's label
    torch_cpu: str | None = None
    torch_cuda: str | None = None
    numpy: str | None = None
    python: str | None = None
    sampling_seed: int | None = None
    tp_rank: int | None = None  # rank inside the tensor-parallel group, when one is used
    tp_group: int | None = None  # which tensor-parallel group (ranks of one group share sampling)


@dataclass(frozen=True)
class WeightSync(Record):
    """The trainer's weights compared with the rollout engine's right after a weight push (rank/weight_sync.py).

    Each tensor's fingerprint is its sum (float32 per chunk of up to 4,096 elements, float64 over the
    chunks) and `num_samples` elements at fixed pseudo-random flat indices, taken on each side where
    the tensor lives. `mismatched` lists the first tensors that differ, each as {"name" (the trainer's),
    "engine_name", "trainer_sum", "engine_sum", "samples_differing"} (sums as floats, "NaN" when NaN).
    Tensors without a counterpart are listed by name, never skipped in silence: `trainer_only` (no
    engine tensor: a name map that misses it, a tensor the sync leaves out), `engine_only` (an engine
    tensor no trainer tensor fed), `unchecked` ({"name", "why"}: shapes that differ beyond vocabulary
    padding, quantized engine weights). Each list holds the first few; the `num_*` fields count all.
    `checked` False: the engine's weights cannot be read from this process (a vLLM server), `reason`
    says why and nothing was compared. A new kind: readers that predate it see an `UnknownRecord`
    of kind "weight_sync" and go on.
    """

    KIND: ClassVar[RecordKind] = RecordKind.WEIGHT_SYNC
    engine: str  # "hf-copy", "vllm-colocate", "trl-vllm-colocate", "trl-vllm-server", or the caller's label
    checked: bool
    num_tensors: int = 0  # trainer tensors compared with their engine counterpart
    num_elements: int = 0  # the elements those tensors hold
    num_mismatched: int = 0
    mismatched: list[dict[str, Any]] = field(default_factory=list)
    num_trainer_only: int = 0
    trainer_only: list[str] = field(default_factory=list)
    num_engine_only: int = 0
    engine_only: list[str] = field(default_factory=list)
    num_unchecked: int = 0
    unchecked: list[dict[str, Any]] = field(default_factory=list)
    num_samples: int = 0  # sampled elements per tensor
    duration_s: float | None = None  # wall s in the check, not the push (on a GPU: the one transfer's wait)
    reason: str | None = None  # why nothing was compared (checked False)


@dataclass(frozen=True)
class ParallelGroup(Record):
    """One process group this rank is a member of (rank/auto/groups.py, or the rank API's
    `parallel_group` / `device_mesh` / `parallel_layout`), written when the group is made.

    `ranks`: its members as global ranks, in group-rank order (a rank's position in it is its group
    rank: a pipeline group's position is the stage). `name`: the job's own name for it where it gives one
    (torch's `group_desc`, Megatron's "TENSOR_MODEL_PARALLEL_GROUP", a DeviceMesh dimension's name,
    vLLM's "tp"), else None. `dim`: the parallel dimension that name says ("tp", "pp", "dp", "cp", "ep",
    or a mesh dimension's own name), None where it says none. `pg_name`: torch's group_name. `source`:
    "new_group", "new_subgroups", "device_mesh", "api", or the framework read by `parallel_layout()`. For
    a DeviceMesh dimension: `mesh_shape` ([2, 2]), `mesh_dim_names` (["dp", "tp"]) and `mesh_dim` (1).
    A new kind: readers that predate it see an `UnknownRecord` of kind "parallel_group" and go on.
    """

    KIND: ClassVar[RecordKind] = RecordKind.PARALLEL_GROUP
    ranks: list[int]
    name: str | None = None
    dim: str | None = None
    pg_name: str | None = None
    source: str = "api"
    mesh_shape: list[int] | None = None
    mesh_dim_names: list[str] | None = None
    mesh_dim: int | None = None


@dataclass(frozen=True)
class UnknownRecord:
    """A well-formed line of a kind this version does not know (written by a newer grpo-doctor)."""

    kind: str
    data: dict[str, Any]

    @property
    def rank(self) -> int | None:
        return self.data.get("rank")


_C = TypeVar("_C", bound=type)
_T = TypeVar("_T")


def cache_by_class(fn: Callable[[_C], _T]) -> Callable[[_C], _T]:
    """functools.cache for a function of a record class, typed as taking the class. mypy takes a
    frozen dataclass's class object for unhashable (it reads the instances' __hash__ off the class)
    and would reject every call of a plain functools.cache function with one."""
    return functools.cache(fn)


RECORD_TYPES: dict[str, type[Record]] = {
    cls.KIND.value: cls for cls in (Header, PhaseBegin, PhaseEnd, Step, Memory, Error, End, Rollout, Rng, WeightSync,
                                        ParallelGroup)
}


@cache_by_class
def field_order(cls: type) -> tuple[str, ...]:
    """A record type's field names in constructor order: common fields first, then its own."""
    return tuple(f.name for f in dataclasses.fields(cls))


@cache_by_class
def omitted_when_none(cls: type) -> tuple[str, ...]:
    """The fields of a record type whose key a line leaves out while the value is None."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(OMITTED_WHEN_NONE))


@cache_by_class
def wire_order(cls: type) -> tuple[str, ...]:
    """The keys of a line as the sink writes it when every OMITTED_WHEN_NONE field is None: the
    readers' fast path takes a line with exactly these keys."""
    return ("schema", "kind", *(name for name in field_order(cls) if name not in omitted_when_none(cls)))


def encode_values(cls: type[Record], values) -> dict[str, Any]:
    """The on-disk dict of a record given its field values in `field_order`, without building it.

    The rank's flush thread encodes queued tuples this way: a frozen dataclass costs several
    microseconds to construct, and that thread shares the GIL with training. The values must be
    every declared field, in order (strict: a field added to the declaration but not to the
    writer's tuple, or the reverse, raises here, not on a reader's machine).
    """
    out: dict[str, Any] = {"schema": SCHEMA_VERSION, "kind": cls.KIND.value}
    out.update(zip(field_order(cls), values, strict=True))
    for name in omitted_when_none(cls):
        if out[name] is None:
            del out[name]
    return out


class BadRecord(ValueError):
    """A JSON object that is not a record this version can read."""


NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}  # as the sink writes them


def restore_non_finite(cls: type[Record], data: dict[str, Any]) -> dict[str, Any]:
    """`data` with "NaN", "Infinity" and "-Infinity" turned back into floats where a number belongs:
    a step's metric values; a rollout's float statistics and its samples' rewards. A copy where
    anything changed; else `data` itself (the usual case: no string in those places)."""
    if cls is Step:
        metrics = data.get("metrics")
        if type(metrics) is dict and any(type(v) is str and v in NON_FINITE for v in metrics.values()):
            return {**data, "metrics": {k: NON_FINITE.get(v, v) if type(v) is str else v for k, v in metrics.items()}}
        return data
    changed: dict[str, Any] = {name: NON_FINITE[data[name]] for name in _ROLLOUT_FLOATS
               if type(data.get(name)) is str and data[name] in NON_FINITE}
    samples = data.get("samples")
    if type(samples) is list and any(type(s) is dict and type(s.get("reward")) is str for s in samples):
        changed["samples"] = [
            {**s, "reward": NON_FINITE.get(s["reward"], s["reward"])} if type(s) is dict and type(s.get("reward")) is str else s
            for s in samples
        ]
    return {**data, **changed} if changed else data


def check_when(data: dict[str, Any]) -> None:
    """A record's step, t and mono as the sink writes them: a corrupt line can hold anything there,
    and every reader orders and subtracts them. Raises BadRecord."""
    step, t, mono = data["step"], data["t"], data["mono"]
    if (step is not None and type(step) is not int) or type(t) not in _REAL or type(mono) not in _REAL:
        raise BadRecord(f"{data['kind']} record with step {step!r}, t {t!r}, mono {mono!r}: not numbers")


_REAL = (int, float)


_ROLLOUT_FLOATS = tuple(f.name for f in dataclasses.fields(Rollout) if f.type == "float | None")
