"""The weight-sync check: after a weight push, do the rollout engine's weights equal the trainer's?

Rollout weights that stop following the trainer (a sleep mode that dropped them, a MoE layout a
newer vLLM loads differently, a sync that silently skips a tensor) sample every later rollout from
another policy than the one trained, and nothing fails. Where the engine runs in the training
process (TRL and ms-swift colocate, the reference trainer) its tensors can be read: each tensor
on both sides gets a fingerprint, computed where it lives (on the GPU when it is there):

- its sum: float32 sums of chunks of up to 4,096 elements (bf16 is widened inside the kernel),
  then float64 over the chunks; and the float64 sum of the chunks' absolute values;
- `num_samples` elements at fixed pseudo-random flat indices (SplitMix64 of the element count, so
  the indices agree on both sides whatever the names).

All fingerprints of one side go to the CPU in one transfer. A trainer tensor is cast to the engine
tensor's dtype first when they differ (an fp32 master and a bf16 engine): the engine was given
that cast, so both sides then hold the same values. Sums are compared exactly, sampled elements
too (NaN equals NaN); where the two sides sit on different device types (a CPU-offloaded trainer
tensor, a GPU engine) the reduction order differs and sums are compared within 1e-5 of the
chunks' absolute sum. Cost: one read of every tensor on each side (docs/benchmarks.md).

Names differ between trainer and engine (vLLM fuses q/k/v into `qkv_proj` and gate/up into
`gate_up_proj`; wrappers add prefixes): `name_map` is a mapping or a callable from the trainer's
name to the engine's, a `WeightTarget` (a slice of a fused engine tensor), or None (no
counterpart); names a mapping lacks are looked up as they are. `vllm_name_map(shapes)` builds
vLLM's usual fusions. Tensors without a counterpart, engine tensors nothing fed, and shapes that
cannot be compared are listed in the record, never skipped in silence.

A mismatch is recorded (`WeightSync`, schema/records.py) and becomes a critical
`stale-rollout-weights` finding in the report. Where the engine is another process (a vLLM
server), `weight_sync_not_checked` records why nothing was compared; the log-prob drift half of
that rule still judges such runs.

Typical use (a push that walks the trainer's parameters once: `tap` fingerprints them as they pass,
so ZeRO-3 gathers happen once):
    check = gd.WeightSyncCheck(lambda: engine_model.named_parameters(), name_map=vllm_name_map(shapes))
    for name, tensor in check.tap(trainer_named_parameters()):
        engine_model.load_weights([(name, tensor)])
    check.compare()                                   # a WeightSync record; None when recording is off
    gd.check_weight_sync(policy.named_parameters(), rollout_copy.named_parameters())   # in one call
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_doctor.rank import api
from grpo_doctor.schema import WeightSync

NUM_SAMPLES = 4  # sampled elements per tensor
MAX_CHUNK = 4096  # elements per float32 partial sum
MAX_LISTED = 8  # names kept per list in a record (the counts say how many there were)
CROSS_DEVICE_RTOL = 1e-5  # sums of one tensor on two device types: relative to the chunks' absolute sum
_said_mismatch = False


@dataclass(frozen=True)
class WeightTarget:
    """Where a trainer tensor sits in the engine: `name`, then `index` (leading indices: an expert of a
    fused MoE tensor), then `rows` (start, length) along the first remaining dimension (a shard of a
    fused tensor such as qkv_proj)."""

    name: str
    index: tuple[int, ...] = ()
    rows: tuple[int, int] | None = None

    def describe(self) -> str:
        text = self.name + "".join(f"[{i}]" for i in self.index)
        return text + (f"[{self.rows[0]}:{self.rows[0] + self.rows[1]}]" if self.rows else "")


Target = str | WeightTarget | None
NameMap = Mapping[str, Target] | Callable[[str], Target] | None


def check_weight_sync(trainer_weights: Iterable, engine_weights: Iterable | Callable[[], Iterable], *,
                      name_map: NameMap = None, engine: str = "engine", step: int | None = None,
                      num_samples: int = NUM_SAMPLES) -> WeightSync | None:
    """Compare (name, tensor) pairs of the trainer with the engine's, now; record and return the result
    (None when recording is off or the check failed: one line says why)."""
    check = WeightSyncCheck(engine_weights, name_map=name_map, engine=engine, num_samples=num_samples)
    for _ in check.tap(trainer_weights):
        pass
    return check.compare(step)


def weight_sync_not_checked(engine: str, reason: str, step: int | None = None) -> WeightSync | None:
    """Record that this run's engine weights cannot be compared here, and why (said once on stderr)."""
    rec = api.current_recorder()
    if rec is None:
        return None
    api._say(f"weight sync not checked ({engine}): {reason}")
    record = WeightSync(rank=rec.ident.rank, host=rec.ident.host, pid=rec.ident.pid,
                        step=rec.current_step if step is None else step, t=time.time(), mono=time.monotonic(),
                        engine=str(engine), checked=False, reason=str(reason))
    rec.sink.enqueue(record)
    return record


class WeightSyncCheck:
    """One comparison: `tap` (or `add`) the trainer's tensors, push, then `compare`.

    engine_weights: (name, tensor) pairs of the engine, or a callable returning them, read at the first
    trainer tensor (after a sleeping engine was woken for the push). Nothing here raises into training:
    a failure is said once and the check records nothing.
    """

    def __init__(self, engine_weights: Iterable | Callable[[], Iterable], *, name_map: NameMap = None,
                 engine: str = "engine", num_samples: int = NUM_SAMPLES) -> None:
        self.engine = str(engine)
        self.num_samples = max(0, int(num_samples))
        self._engine_source = engine_weights
        self._engine: dict[str, Any] | None = None
        self._resolve = _resolver(name_map)
        self._rec = api.current_recorder()
        self._failed: str | None = None if self._rec is not None else "recording is off"
        self._spent_s = 0.0  # in the check itself, not in the push between tap and compare
        # name, target, trainer fingerprint (tensors on its device), engine view, on two device types
        self._pairs: list[tuple[str, WeightTarget, tuple, Any, bool]] = []
        self._trainer_only: list[str] = []
        self._unchecked: list[dict[str, str]] = []
        self._covered: set[str] = set()
        self._indices: dict[tuple[int, Any], Any] = {}
        self._num_elements = 0

    def tap(self, trainer_weights: Iterable) -> Iterator:
        """Yield the trainer's (name, tensor) pairs unchanged, fingerprinting each as it passes."""
        for name, tensor in trainer_weights:
            if self._failed is None:
                began = time.perf_counter()
                try:
                    self._add_trainer(str(name), tensor)
                except Exception as exc:  # an observer must not stop the push
                    self._fail(f"{type(exc).__name__}: {exc}")
                self._spent_s += time.perf_counter() - began
            yield name, tensor

    def add(self, trainer_weights: Iterable) -> None:
        for _ in self.tap(trainer_weights):
            pass

    def compare(self, step: int | None = None) -> WeightSync | None:
        """Fingerprint the engine's side, compare, record; the record, or None (recording off, a failure)."""
        if self._failed is not None:
            return None
        try:
            record = self._compare(step)
        except Exception as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            return None
        self._rec.sink.enqueue(record)
        global _said_mismatch
        if record.num_mismatched and not _said_mismatch:
            _said_mismatch = True  # once per process: the records hold every later check
            names = ", ".join(m["name"] for m in record.mismatched[:3])
            api._say(f"weight sync: {record.num_mismatched} of {record.num_tensors} tensors differ between the trainer "
                     f"and the rollout engine ({self.engine}) after the push at step {record.step} (first: {names}); "
                     "rollouts sample from other weights than the ones trained (later checks: in the run's records)")
        unmatched = record.num_trainer_only + record.num_engine_only + record.num_unchecked
        if unmatched:
            api._say(f"weight sync ({self.engine}): {unmatched} tensors could not be paired or compared "
                     f"(trainer only {record.trainer_only[:3]}, engine only {record.engine_only[:3]}, "
                     f"unchecked {[u['name'] for u in record.unchecked[:3]]}); pass a name_map")
        return record

    # -- the trainer's side, as tensors pass --------------------------------------------------------

    def _add_trainer(self, name: str, tensor) -> None:
        import torch

        if self._engine is None:
            source = self._engine_source() if callable(self._engine_source) else self._engine_source
            self._engine = {str(n): t for n, t in source}
        target = self._resolve(name)
        if target is None or target.name not in self._engine:
            self._trainer_only.append(name)
            return
        self._covered.add(target.name)  # paired: an unchecked pair is listed as such, not as engine-only too
        view, why = _engine_view(self._engine[target.name], target, tuple(tensor.shape))
        if view is None:
            self._unchecked.append({"name": name, "why": why})
            return
        flat = tensor.detach()  # detached: no autograd graph, no no_grad() per tensor
        if flat.dtype != view.dtype:
            flat = flat.to(view.dtype)
        cross = flat.device.type != view.device.type
        self._num_elements += flat.numel()
        self._pairs.append((name, target, self._fingerprint(flat.reshape(-1), cross, torch), view.detach(), cross))

    def _fingerprint(self, flat, with_abs: bool, torch) -> tuple:
        """(float64 sum, float64 sum of |chunk sums| or None, sampled elements), tensors on flat's device:
        three or four kernels, nothing waits for the device."""
        n = flat.numel()
        key = (n, flat.device)
        index = self._indices.get(key)
        if index is None:
            index = self._indices[key] = torch.tensor(sample_indices(n, self.num_samples), dtype=torch.long,
                                                      device=flat.device)
        if n == 0:
            zero = torch.zeros((), dtype=torch.float64, device=flat.device)
            return zero, zero if with_abs else None, flat.take(index)
        acc = torch.float64 if flat.dtype == torch.float64 else torch.float32
        partials = flat.view(-1, _chunk(n)).sum(1, dtype=acc)
        absolute = partials.abs().sum(dtype=torch.float64) if with_abs else None
        return partials.sum(dtype=torch.float64), absolute, flat.take(index)

    # -- the engine's side, and the comparison -------------------------------------------------------

    def _compare(self, step: int | None) -> WeightSync:
        import torch

        began = time.perf_counter()
        engine_prints = [self._fingerprint(view.reshape(-1), cross, torch) for _, _, _, view, cross in self._pairs]
        trainer = _to_cpu([fp for _, _, fp, _, _ in self._pairs], torch)
        engine = _to_cpu(engine_prints, torch)
        mismatched = []
        for (name, target, _, _, cross), ours, theirs in zip(self._pairs, trainer, engine, strict=True):
            differing = sum(not _same(a, b) for a, b in zip(ours[2], theirs[2], strict=True))
            if differing or not _same_sum(ours, theirs, cross):
                mismatched.append({"name": name, "engine_name": target.describe(), "trainer_sum": ours[0],
                                   "engine_sum": theirs[0], "samples_differing": differing})
        engine_only = [n for n in self._engine or {} if n not in self._covered]
        rec = self._rec
        return WeightSync(
            rank=rec.ident.rank, host=rec.ident.host, pid=rec.ident.pid,
            step=rec.current_step if step is None else api._whole_number(step), t=time.time(), mono=time.monotonic(),
            engine=self.engine, checked=True, num_tensors=len(self._pairs), num_elements=self._num_elements,
            num_mismatched=len(mismatched), mismatched=mismatched[:MAX_LISTED],
            num_trainer_only=len(self._trainer_only), trainer_only=self._trainer_only[:MAX_LISTED],
            num_engine_only=len(engine_only), engine_only=engine_only[:MAX_LISTED],
            num_unchecked=len(self._unchecked), unchecked=self._unchecked[:MAX_LISTED], num_samples=self.num_samples,
            duration_s=round(self._spent_s + time.perf_counter() - began, 6),
        )

    def _fail(self, why: str) -> None:
        self._failed = why
        api._say(f"weight sync check ({self.engine}) recorded nothing ({why}); training goes on")


def sample_indices(numel: int, k: int = NUM_SAMPLES) -> list[int]:
    """`k` flat indices in [0, numel), fixed for a given element count (SplitMix64 of numel + i)."""
    if numel <= 0:
        return []
    out = []
    for i in range(k):
        z = (numel * 0x9E3779B97F4A7C15 + (i + 1) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        out.append((z ^ (z >> 31)) % numel)
    return out


_MASK64 = (1 << 64) - 1


def vllm_name_map(shapes: Mapping[str, Sequence[int]]) -> dict[str, WeightTarget]:
    """vLLM's usual fusions of Hugging Face names, from the trainer's parameter shapes (name -> shape,
    full shapes: `ds_shape` under ZeRO-3): q/k/v_proj into qkv_proj and gate/up_proj into gate_up_proj
    (rows stacked in that order; Llama, Qwen2/3, Mistral), MoE experts `experts.E.gate_proj/up_proj`
    (or Mixtral's w1/w3) into `experts.w13_weight[E]` and down_proj (w2) into `experts.w2_weight[E]`.
    Names it does not fuse are left out (looked up as they are). Other layouts (tensor parallelism,
    another vLLM's expert layout) show up as unpaired or unchecked tensors in the record."""
    out: dict[str, WeightTarget] = {}
    for name in shapes:
        for fused, parts in _STACKED:
            for i, part in enumerate(parts):
                for tail in ("weight", "bias"):
                    if not name.endswith(f"{part}.{tail}"):
                        continue
                    head = name[: -len(f"{part}.{tail}")]
                    siblings = [f"{head}{p}.{tail}" for p in parts[: i + 1]]
                    if all(s in shapes and len(shapes[s]) for s in siblings):
                        start = sum(int(shapes[s][0]) for s in siblings[:-1])
                        out[name] = WeightTarget(f"{head}{fused}.{tail}", rows=(start, int(shapes[name][0])))
        expert = _expert_parts(name)
        if expert is not None:
            prefix, number, kind = expert
            if kind in ("gate_proj", "w1", "up_proj", "w3"):
                gate = f"{prefix}.{number}.{'gate_proj' if kind in ('gate_proj', 'up_proj') else 'w1'}.weight"
                if gate in shapes and len(shapes[gate]):
                    first = kind in ("gate_proj", "w1")
                    rows = int(shapes[gate][0])
                    out[name] = WeightTarget(f"{prefix}.w13_weight", index=(number,), rows=(0 if first else rows, rows))
            else:
                out[name] = WeightTarget(f"{prefix}.w2_weight", index=(number,))
    return out


_STACKED = ((".qkv_proj", (".q_proj", ".k_proj", ".v_proj")), (".gate_up_proj", (".gate_proj", ".up_proj")))
_EXPERT_KINDS = ("gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")


def _expert_parts(name: str) -> tuple[str, int, str] | None:
    """("model.layers.0.mlp.experts", 3, "gate_proj") for "model.layers.0.mlp.experts.3.gate_proj.weight"."""
    parts = name.split(".")
    if len(parts) < 4 or parts[-1] != "weight" or parts[-2] not in _EXPERT_KINDS or not parts[-3].isdigit():
        return None
    if parts[-4] != "experts":
        return None
    return ".".join(parts[:-3]), int(parts[-3]), parts[-2]


def _resolver(name_map: NameMap) -> Callable[[str], WeightTarget | None]:
    if name_map is None:
        lookup = None
    elif callable(name_map) and not isinstance(name_map, Mapping):
        lookup = name_map
    else:
        lookup = lambda name: name_map.get(name, name)  # noqa: E731

    def resolve(name: str) -> WeightTarget | None:
        target = name if lookup is None else lookup(name)
        if target is None or isinstance(target, WeightTarget):
            return target
        return WeightTarget(str(target))

    return resolve


def _engine_view(tensor, target: WeightTarget, shape: tuple[int, ...]) -> tuple[Any, str]:
    """(the engine's tensor for this trainer shape, "") or (None, why it cannot be compared)."""
    if not tensor.dtype.is_floating_point or tensor.dtype.itemsize < 2:
        return None, f"engine dtype {str(tensor.dtype).removeprefix('torch.')} (quantized): not comparable"
    view = tensor
    try:
        for i in target.index:
            view = view[i]
        if target.rows is not None:
            view = view.narrow(0, *target.rows)
    except (IndexError, RuntimeError) as exc:
        return None, f"{target.describe()} does not exist in engine shape {list(tensor.shape)} ({exc})"
    if tuple(view.shape) == shape:
        return view, ""
    if (view.dim() == len(shape) and shape and tuple(view.shape[1:]) == shape[1:] and view.shape[0] > shape[0]):
        return view.narrow(0, 0, shape[0]), ""  # vocabulary rows padded by the engine
    return None, f"trainer shape {list(shape)}, engine {target.describe()} shape {list(view.shape)}"


def _chunk(n: int) -> int:
    """The largest power of two up to MAX_CHUNK that divides n: whole chunks, no tail kernel."""
    return math.gcd(n, MAX_CHUNK)


def _to_cpu(prints: list[tuple], torch) -> list[tuple[float, float | None, list[float]]]:
    """Fingerprints as Python floats: one transfer of sums and one of samples per device."""
    out: list[Any] = [None] * len(prints)
    by_device: dict[Any, list[int]] = {}
    for i, (total, _, _) in enumerate(prints):
        by_device.setdefault(total.device, []).append(i)
    for positions in by_device.values():
        sums = [prints[i][0] for i in positions] + [prints[i][1] for i in positions if prints[i][1] is not None]
        sums = torch.stack(sums).cpu().tolist()
        samples = torch.cat([prints[i][2] for i in positions]).to(torch.float64).cpu().tolist()  # promotes, exactly
        absolutes = iter(sums[len(positions):])
        at = 0
        for k, i in enumerate(positions):
            count = prints[i][2].numel()
            out[i] = (sums[k], next(absolutes) if prints[i][1] is not None else None, samples[at:at + count])
            at += count
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _same_sum(ours: tuple, theirs: tuple, cross_device: bool) -> bool:
    """Exactly equal (NaN equals NaN); across device types, within CROSS_DEVICE_RTOL of the chunks' absolute sum."""
    if not cross_device or math.isnan(ours[0]) or math.isnan(theirs[0]):
        return _same(ours[0], theirs[0])
    return abs(ours[0] - theirs[0]) <= CROSS_DEVICE_RTOL * max(ours[1], theirs[1])
