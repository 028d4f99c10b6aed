"""grpo-doctor inside TRL's GRPOTrainer: two added lines record metrics, phases, seeds and rollouts.

`instrument(trainer)`, called before `trainer.train()`:
- adds `GrpoDoctorCallback` (callback.py): TRL's logged metrics as Step records, a "train-step"
  phase per optimizer step, memory snapshots, seed audits;
- wraps the trainer's `_calculate_rewards(inputs, prompts, completions, completion_ids_list)`
  (this signature from TRL 0.19 to 1.16, the version tested). TRL calls it on every rank with
  that rank's own prompts, completions and token ids, and it returns every reward function's
  rewards (sync, async, reward models) gathered from all ranks. The wrapper hands them back
  untouched, then takes this rank's rows with TRL's own process slice, weights them as TRL's
  logged `reward` does, and calls `grpo_doctor.rollouts()` with the group ids of TRL's
  RepeatSampler layout (layout.py), `max_completion_length` and `temperature`. "reward" and
  "rollout" phases mark `_calculate_rewards` and `_generate`.
Nothing is added to the trainer's reward functions, so nothing reaches TRL's logged metrics
(no `rewards/...` column in W&B, TensorBoard or `state.log_history`), its completions table or
its advantages. Reading the rewards afterwards, rather than calling the user's functions again,
avoids doubling their cost and side effects (`log_metric`, API calls) and cannot disagree with
what TRL used (a sampling judge). Evaluation rollouts are not recorded (they would share a step
number with training's). TRL < 0.19 has no `_calculate_rewards`: there the callback alone runs
and one line says that rollouts are not recorded.

Typical use:
    from grpo_doctor.rank.integrations.trl import instrument
    trainer = instrument(GRPOTrainer(model=..., reward_funcs=[accuracy], args=config, train_dataset=data))
    trainer.train()
"""
from __future__ import annotations

import functools
import inspect
import math
import os

import grpo_doctor as gd
from grpo_doctor.rank import api
from grpo_doctor.rank.integrations.callback import GrpoDoctorCallback
from grpo_doctor.rank.integrations.layout import as_text, layout_group_ids, rank_rewards

__all__ = ["GrpoDoctorCallback", "RolloutRecorder", "instrument"]


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
    if isinstance(getattr(trainer, "_calculate_rewards", None), RolloutRecorder):
        api._say("instrument(trainer) ignored: this trainer is already instrumented")
        return trainer
    if hasattr(trainer, "_calculate_rewards"):
        trainer._calculate_rewards = RolloutRecorder(trainer, trainer._calculate_rewards, num_samples=num_samples,
                                                     compare_across_ranks=compare_across_ranks)
    else:
        api._say("this TRL version has no GRPOTrainer._calculate_rewards (TRL < 0.19): rollouts are not "
                 "recorded; metrics, phases and seeds are")
    if hasattr(trainer, "_generate"):
        trainer._generate = _in_phase("rollout", trainer._generate)
    trainer.add_callback(GrpoDoctorCallback(run_dir, seed_audit_every=seed_audit_every, memory_every=memory_every,
                                            compare_seeds_across_ranks=compare_seeds_across_ranks))
    return trainer


class RolloutRecorder:
    """Stands in for the trainer's `_calculate_rewards`: returns what it returns, and records the
    training batch's rollouts with this rank's rewards."""

    def __init__(self, trainer, calculate_rewards, *, num_samples: int = 4, compare_across_ranks: bool = False):
        functools.update_wrapper(self, calculate_rewards)
        self.trainer = trainer
        self.calculate_rewards = calculate_rewards
        self.num_samples = num_samples
        self.compare_across_ranks = compare_across_ranks
        self._signature = inspect.signature(calculate_rewards)

    def __call__(self, *args, **kwargs):
        with gd.phase("reward"):
            rewards_per_func = self.calculate_rewards(*args, **kwargs)
        if self.trainer.model.training:  # alike on every rank: the gather of compare_across_ranks stays in step
            try:
                self.record(self._signature.bind(*args, **kwargs).arguments, rewards_per_func)
            except Exception as exc:  # an observer must not stop training
                api._say(f"rollouts not recorded ({type(exc).__name__}: {exc})")
        return rewards_per_func

    def record(self, arguments: dict, rewards_per_func) -> None:
        """Record one batch; arguments: `_calculate_rewards`' by name, rewards_per_func: what it returned."""
        trainer, args = self.trainer, self.trainer.args
        completions = [as_text(c) for c in arguments["completions"]]
        prompts = [as_text(p) for p in arguments["prompts"]]
        completion_ids = arguments.get("completion_ids_list")
        rewards, group_ids = [math.nan] * len(completions), None
        try:
            index = trainer.accelerator.process_index
            rewards = rank_rewards(rewards_per_func, trainer.reward_weights, index, len(completions))
            group_ids = layout_group_ids(prompts, index, trainer.num_generations)
            if group_ids is None:
                api._say("rollouts: prompts do not follow TRL's RepeatSampler layout; grouping equal "
                         "consecutive prompts instead")
        except Exception as exc:  # an observer must not stop training
            api._say(f"rollouts recorded without some rewards or groups ({type(exc).__name__}: {exc})")
        # Called on every rank whatever happened above: with compare_across_ranks, the others wait in its gather.
        gd.rollouts(prompts, completions, rewards, group_ids, completion_ids=completion_ids,
                    max_length=getattr(args, "max_completion_length", None),
                    temperature=getattr(args, "temperature", None), step=trainer.state.global_step + 1,
                    num_samples=self.num_samples, compare_across_ranks=self.compare_across_ranks)


def _in_phase(name: str, method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with gd.phase(name):
            return method(*args, **kwargs)

    return wrapper
