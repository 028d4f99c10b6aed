"""A `transformers.TrainerCallback` that records any Hugging Face Trainer with grpo-doctor.

TRL's GRPOTrainer and ms-swift's trainers are Trainers, so this one callback serves both
(`trl.instrument` and `swift.register` add it for you; it only reads the logs it is given,
so nothing of grpo-doctor reaches the metrics the Trainer reports). What it records, on every rank:
- init at train begin (rank numbers from torch.distributed, which the Trainer's accelerator has
  set up by then), and a shutdown at train end when it was the one that started recording;
- one Step record per optimizer step, carrying the numbers the Trainer logged for that step
  (loss, grad_norm, reward, reward_std, frac_reward_zero_std, kl, entropy, ...); steps without
  a log still get a Step record, which is the supervisor's progress heartbeat;
- a "train-step" phase around each optimizer step (a rank stuck inside a step shows it);
- a memory snapshot after every `memory_every` steps and a seed audit at train begin and after
  every `seed_audit_every` steps, with the vLLM seed and tensor-parallel place where TRL or
  ms-swift colocate vLLM (both seed it with process_index // vllm_tensor_parallel_size); with
  `compare_seeds_across_ranks=True` (as `trl.instrument` and `swift.register` make it) the
  train-begin audit is gathered across ranks, and rank 0 prints any ranks sharing a seed: a
  collective, so then every rank must have the callback.

Step numbers are the Trainer's: records made during the optimizer step that ends with
`state.global_step == n` carry step n. Evaluation and end-of-training summaries are not a
step's metrics and are not recorded.

Typical use:
    from grpo_doctor.rank.integrations.callback import GrpoDoctorCallback
    trainer = Trainer(..., callbacks=[GrpoDoctorCallback(seed_audit_every=10)])
"""
from __future__ import annotations

import os

from transformers import TrainerCallback

import grpo_doctor as gd

STEP_PHASE = "train-step"


class GrpoDoctorCallback(TrainerCallback):
    """Records the run with grpo-doctor; see the module docstring. 0 turns a periodic record off."""

    def __init__(
        self,
        run_dir: str | os.PathLike | None = None,
        *,
        seed_audit_every: int = 10,
        memory_every: int = 1,
        compare_seeds_across_ranks: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self.seed_audit_every = seed_audit_every
        self.memory_every = memory_every
        self.compare_seeds_across_ranks = compare_seeds_across_ranks
        self._owns_recording = False
        self._phase: gd.phase | None = None
        self._unrecorded_step: int | None = None  # ended, its Step record waits for the step's log
        self._sampling: dict[str, int] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        was_recording = gd.is_recording()
        recording = gd.init(self.run_dir) is not None
        self._owns_recording = recording and not was_recording
        if recording:
            gd.set_step(state.global_step + 1)
        self._sampling = sampling_place(args)
        # A collective: every process takes part, even one whose recording failed to start.
        gd.seed_audit("init", **self._sampling, compare_across_ranks=self.compare_seeds_across_ranks)

    def on_step_begin(self, args, state, control, **kwargs):
        self._record_unlogged_step()
        gd.set_step(state.global_step + 1)
        self._phase = gd.phase(STEP_PHASE)
        self._phase.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        self._close_phase()
        n = state.global_step
        self._unrecorded_step = n
        if self.memory_every and n % self.memory_every == 0:
            gd.memory_snapshot("step")
        if self.seed_audit_every and n % self.seed_audit_every == 0:
            gd.seed_audit("step", **self._sampling)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # The Trainer logs a step's metrics right after on_step_end; later logs at the same
        # global_step (the end-of-training summary) and evaluation ("eval_" keys) are not the step's.
        logs = logs or {}
        if self._unrecorded_step != state.global_step or any(key.startswith("eval_") for key in logs):
            return
        self._unrecorded_step = None
        gd.step(state.global_step, **numeric_metrics(logs))

    def on_train_end(self, args, state, control, **kwargs):
        self._close_phase()
        self._record_unlogged_step()
        if self._owns_recording:
            gd.shutdown()
        else:
            gd.flush()

    def _record_unlogged_step(self) -> None:
        if self._unrecorded_step is not None:
            gd.step(self._unrecorded_step)
            self._unrecorded_step = None

    def _close_phase(self) -> None:
        if self._phase is not None:
            self._phase.__exit__(None, None, None)
            self._phase = None


def numeric_metrics(logs: dict) -> dict[str, float | int]:
    """The numbers of a Trainer log (NaN and inf kept: they are findings)."""
    return {key: value for key, value in logs.items() if isinstance(value, (int, float)) and not isinstance(value, bool)}


def sampling_place(args) -> dict[str, int]:
    """seed_audit's sampling_seed / tp_rank / tp_group for vLLM colocated in the training processes.

    TRL (trl/generation/vllm_generation.py) and ms-swift (swift/rlhf_trainers/rollout_mixin.py)
    both build the colocated engine with seed=process_index // vllm_tensor_parallel_size. A vLLM
    server runs elsewhere: its seed is not known here. A `seed` in TRL's generation_kwargs becomes
    every request's SamplingParams seed; colocated, each copy of a prompt is its own request (n=1),
    so every copy on every rank draws the same sample: that seed is what every rank samples with.
    """
    if not getattr(args, "use_vllm", False) or getattr(args, "vllm_mode", None) != "colocate":
        return {}
    request_seed = (getattr(args, "generation_kwargs", None) or {}).get("seed")
    if request_seed is not None:
        return {"sampling_seed": int(request_seed)}
    tp_size = int(getattr(args, "vllm_tensor_parallel_size", 1) or 1)
    index = int(getattr(args, "process_index", 0))
    return {"sampling_seed": index // tp_size, "tp_rank": index % tp_size, "tp_group": index // tp_size}
