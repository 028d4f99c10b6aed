"""seed_audit(): fingerprints of this rank's random generators, to catch a seed shared by mistake.

Case 2 of CASES.md: every process of a node sampled with the same seed, so every copy of a
prompt came out identical and GRPO had nothing to learn from. Each generator's state is hashed
to 16 hex digits (BLAKE2b): ranks that must sample differently must show different
fingerprints, and ranks of one tensor-parallel group the same. Covered: torch's CPU generator,
the CUDA generators (only where CUDA is initialised), numpy's global RandomState and Python's
`random`, each only if its module is already imported: an audit never imports torch or numpy
itself. numpy Generators made with default_rng() are the caller's own objects and are not seen;
pass the rollout engine's seed (vLLM's `seed`) as `sampling_seed`.

Call it once the seeds are set, before the first rollout, and again every N steps (states
advance as they are used: ranks that started equal and stay equal are still colliding). It
costs about 0.3 ms of CPU (torch, numpy and `random` all present; docs/benchmarks.md). With
`compare_across_ranks=True` (the first audit, say) rank 0 also prints the ranks sharing a seed.

Typical use:
    torch.manual_seed(seed + rank)
    gd.seed_audit("init", sampling_seed=seed + rank, compare_across_ranks=True)
    for n in range(num_steps):
        if n and n % 10 == 0:
            gd.seed_audit("step", sampling_seed=seed + rank)
"""
from __future__ import annotations

import struct
import sys
import time
from array import array

from grpo_doctor.checks.hashing import hash_bytes
from grpo_doctor.rank import api
from grpo_doctor.rank.seed_gather import say_shared_seeds
from grpo_doctor.schema import Rng


def seed_audit(
    tag: str = "init",
    sampling_seed: int | None = None,
    tp_rank: int | None = None,
    tp_group: int | None = None,
    compare_across_ranks: bool = False,
) -> Rng | None:
    """Record the fingerprints; returns the record, None when recording is off or it failed.

    sampling_seed: the seed the rollout engine samples with. tp_rank, tp_group: this rank's
    place in its tensor-parallel group, when one is used (its ranks should share sampling).
    compare_across_ranks: also gather every rank's audit now (a collective: every rank must call
    it here) and print from rank 0 the ranks that share a seed (seed_gather.py).
    """
    record = _audit(tag, sampling_seed, tp_rank, tp_group)
    if compare_across_ranks and not api.disabled_by_environment():  # the same on every rank: all gather, or none
        say_shared_seeds(record)
    return record


def _audit(tag: str, sampling_seed: int | None, tp_rank: int | None, tp_group: int | None) -> Rng | None:
    rec = api.current_recorder()
    if rec is None:
        return None
    try:
        record = Rng(
            rank=rec.ident.rank, host=rec.ident.host, pid=rec.ident.pid, step=rec.current_step,
            t=time.time(), mono=time.monotonic(), tag=str(tag),
            **fingerprints(),
            sampling_seed=None if sampling_seed is None else api._whole_number(sampling_seed),
            tp_rank=None if tp_rank is None else api._whole_number(tp_rank),
            tp_group=None if tp_group is None else api._whole_number(tp_group),
        )
        rec.sink.enqueue(record)
    except Exception as exc:  # an audit must never stop training
        api._say(f"seed_audit({tag!r}) recorded nothing ({type(exc).__name__}: {exc})")
        return None
    return record


def fingerprints() -> dict[str, str | None]:
    """{"torch_cpu", "torch_cuda", "numpy", "python"}: 16 hex digits each, None where absent."""
    torch = sys.modules.get("torch")
    np_random = sys.modules.get("numpy.random")  # numpy loads it lazily: absent means never used
    python_random = sys.modules.get("random")
    return {
        "torch_cpu": _tensor_hash(torch.random.get_rng_state()) if torch is not None else None,
        "torch_cuda": _cuda_fingerprint(torch) if torch is not None else None,
        "numpy": _numpy_fingerprint(np_random) if np_random is not None else None,
        "python": _python_fingerprint(python_random) if python_random is not None else None,
    }


def _tensor_hash(*states) -> str:
    if "numpy" in sys.modules:
        return hash_bytes(b"".join(s.numpy().tobytes() for s in states))
    return hash_bytes(b"".join(bytes(s.tolist()) for s in states))  # uint8 tensors; slower, no numpy needed


def _cuda_fingerprint(torch) -> str | None:
    # is_initialized(), not is_available(): reading the state would initialise CUDA in a process
    # that does not use it.
    if not torch.cuda.is_initialized():
        return None
    return _tensor_hash(*torch.cuda.get_rng_state_all())


def _numpy_fingerprint(np_random) -> str:
    name, keys, pos, has_gauss, cached = np_random.get_state()
    return hash_bytes(name.encode() + keys.tobytes() + struct.pack("<iid", pos, has_gauss, cached))


def _python_fingerprint(python_random) -> str:
    version, state, gauss_next = python_random.getstate()
    return hash_bytes(array("Q", state).tobytes() + repr((version, gauss_next)).encode())
