"""grpo-doctor inside TRL's GRPOTrainer: two added lines record metrics, phases, seeds and rollouts.

`instrument(trainer)`, called before `trainer.train()`:
- adds `GrpoDoctorCallback` (callback.py): TRL's logged metrics as Step records, a "train-step"
  phase per optimizer step, memory snapshots, seed audits;
- appends `RolloutProbe` to `trainer.reward_funcs` with reward weight 0. TRL calls every reward
  function on every rank with that rank's own `prompts`, `completions`, `completion_ids` and
  `trainer_state` (its documented reward-function contract). The probe answers None for every
  completion: TRL turns None into NaN, and all its uses of rewards are NaN-aware (a weighted
  nansum; a row is unscorable only when every function gave NaN), so the probe changes neither
  rewards nor advantages, not even for rows the user's functions leave unscored, which a probe
  answering 0 would make scorable. TRL logs its columns `rewards/grpo_doctor_rollouts/mean|std`
  without a value (None); the callback leaves them out of the Step records;
- reads the rewards afterwards. TRL passes no reward function the values of the others, and
  calling the user's functions again would double their cost and side effects (`log_metric`,
  API calls) and could disagree with what TRL used (a sampling judge). Instead the trainer's
  `_calculate_rewards` (this signature from TRL 0.19 to 1.16, the version tested) is wrapped:
  it returns every function's rewards (sync, async, reward models) gathered from all ranks; the
  wrapper takes this rank's rows with TRL's own process slice, weights them as TRL's logged
  `reward` does, and calls `grpo_doctor.rollouts()` with the group ids of TRL's RepeatSampler
  layout (layout.py), `max_completion_length` and `temperature`. "reward" and "rollout" phases
  mark `_calculate_rewards` and `_generate`.
Evaluation rollouts are not recorded (they would share a step number with training's).

Typical use:
    from grpo_doctor.rank.integrations.trl import instrument
    trainer = instrument(GRPOTrainer(model=..., reward_funcs=[accuracy], args=config, train_dataset=data))
    trainer.train()
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import grpo_doctor as gd
from grpo_doctor.rank import api
from grpo_doctor.rank.integrations.callback import PROBE_NAME, GrpoDoctorCallback
from grpo_doctor.rank.integrations.layout import as_text, layout_group_ids

__all__ = ["GrpoDoctorCallback", "RolloutProbe", "instrument"]


def instrument(
    trainer,
    *,
    run_dir: str | os.PathLike | None = None,
    seed_audit_every: int = 10,
    memory_every: int = 1,
    num_samples: int = 4,
    compare_seeds_across_ranks: bool = True,
    compare_across_ranks: bool = False,
):
    """Record this GRPOTrainer's run with grpo-doctor; returns the same trainer. Call before train(),
    in every process alike (the comparisons below are collectives).

    compare_seeds_across_ranks: gather the train-begin seed audit (about 250 bytes per rank, once);
    rank 0 prints the ranks that share a seed.
    compare_across_ranks: also gather every rank's completion hashes each step (one all_gather of
    2 KiB per rank, inside TRL's reward computation, which every rank runs in step) and log
    `cross_rank_duplicate_frac`.
    """
    if any(isinstance(f, RolloutProbe) for f in trainer.reward_funcs):
        api._say("instrument(trainer) ignored: this trainer is already instrumented")
        return trainer
    import torch  # TRL has imported it already

    probe = RolloutProbe(trainer, num_samples=num_samples, compare_across_ranks=compare_across_ranks)
    trainer.reward_funcs.append(probe)
    trainer.reward_func_names.append(PROBE_NAME)
    trainer.reward_processing_classes.append(None)
    weights = trainer.reward_weights
    trainer.reward_weights = torch.cat([weights, torch.zeros(1, dtype=weights.dtype, device=weights.device)])
    if hasattr(trainer, "_calculate_rewards"):
        trainer._calculate_rewards = _reading_rewards(trainer._calculate_rewards, probe)
        probe.rewards_read_later = True
    else:
        api._say("this TRL version has no GRPOTrainer._calculate_rewards: rollouts are recorded without rewards")
    if hasattr(trainer, "_generate"):
        trainer._generate = _in_phase("rollout", trainer._generate)
    trainer.add_callback(GrpoDoctorCallback(run_dir, seed_audit_every=seed_audit_every, memory_every=memory_every,
                                            compare_seeds_across_ranks=compare_seeds_across_ranks))
    return trainer


@dataclass(frozen=True)
class _Batch:
    prompts: list[str]
    completions: list[str]
    completion_ids: list[list[int]] | None
    step: int | None


class RolloutProbe:
    """A zero-weight TRL reward function that hands this rank's rollouts to grpo_doctor.rollouts()."""

    __name__ = PROBE_NAME  # TRL names reward functions by __name__

    def __init__(self, trainer, *, num_samples: int = 4, compare_across_ranks: bool = False) -> None:
        self.trainer = trainer
        self.num_samples = num_samples
        self.compare_across_ranks = compare_across_ranks
        self.rewards_read_later = False
        self._batch: _Batch | None = None

    def __call__(self, prompts, completions, completion_ids=None, trainer_state=None, **kwargs):
        if self.trainer.model.training:
            step = trainer_state.global_step + 1 if trainer_state is not None else None
            self._batch = _Batch([as_text(p) for p in prompts], [as_text(c) for c in completions],
                                 completion_ids, step)
            if not self.rewards_read_later:
                self.record(None)
        return [None] * len(completions)

    def record(self, rewards_per_func) -> None:
        """Record the pending batch; rewards_per_func: what `_calculate_rewards` returned (all ranks)."""
        batch, self._batch = self._batch, None
        if batch is None:
            return
        trainer, args = self.trainer, self.trainer.args
        rewards, group_ids = [math.nan] * len(batch.completions), None
        try:
            index = trainer.accelerator.process_index
            rewards = _rank_rewards(rewards_per_func, trainer.reward_weights, index, len(batch.completions))
            group_ids = layout_group_ids(batch.prompts, index, trainer.num_generations)
            if group_ids is None:
                api._say("rollouts: prompts do not follow TRL's RepeatSampler layout; grouping equal "
                         "consecutive prompts instead")
        except Exception as exc:  # an observer must not stop training
            api._say(f"rollouts recorded without some rewards or groups ({type(exc).__name__}: {exc})")
        # Called on every rank whatever happened above: with compare_across_ranks, the others wait in its gather.
        gd.rollouts(batch.prompts, batch.completions, rewards, group_ids, completion_ids=batch.completion_ids,
                    max_length=getattr(args, "max_completion_length", None),
                    temperature=getattr(args, "temperature", None), step=batch.step, num_samples=self.num_samples,
                    compare_across_ranks=self.compare_across_ranks)


def _rank_rewards(rewards_per_func, weights, process_index: int, n: int) -> list[float]:
    """This rank's total rewards as TRL logs them: the weighted nansum, NaN where no function scored."""
    if rewards_per_func is None:
        return [math.nan] * n
    rows = rewards_per_func[process_index * n:(process_index + 1) * n]
    totals = (rows * weights.to(rows.device).unsqueeze(0)).nansum(dim=1)
    totals[rows.isnan().all(dim=1)] = math.nan
    return totals.tolist()


def _reading_rewards(calculate_rewards, probe: RolloutProbe):
    @functools.wraps(calculate_rewards)
    def wrapper(*args, **kwargs):
        with gd.phase("reward"):
            rewards_per_func = calculate_rewards(*args, **kwargs)
        probe.record(rewards_per_func)
        return rewards_per_func

    return wrapper


def _in_phase(name: str, method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with gd.phase(name):
            return method(*args, **kwargs)

    return wrapper
