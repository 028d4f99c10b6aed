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
- with `use_vllm` (TRL 1.x: `trainer.vllm_generation`), wraps `vllm_generation.sync_weights`: in colocate
  mode every `weight_sync_every`-th push is followed by grpo-doctor's weight-sync check
  (rank/weight_sync.py): the trainer's tensors are fingerprinted as TRL's own `_iter_named_params`
  hands them to vLLM (ZeRO-3 gathers once), the engine's read from the model TRL loads into
  (`llm.llm_engine.model_executor.driver_worker.model_runner.model`), names through vLLM's usual
  fusions (`vllm_name_map`). In server mode the weights live in the server: the first push records
  that they are not compared (`weight_sync` record, checked false) and the log-prob drift judges.
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

__all__ = ["GrpoDoctorCallback", "RolloutRecorder", "WeightSyncWatch", "instrument"]


def instrument(
    trainer,
    *,
    run_dir: str | os.PathLike | None = None,
    seed_audit_every: int = 10,
    memory_every: int = 1,
    num_samples: int = 4,
    compare_seeds_across_ranks: bool = True,
    compare_across_ranks: bool = False,
    weight_sync_every: int = 1,
):
    """Record this GRPOTrainer's run with grpo-doctor; returns the same trainer. Call before train(),
    in every process alike (the comparisons below are collectives).

    compare_seeds_across_ranks: gather the train-begin seed audit (about 250 bytes per rank, once);
    rank 0 prints the ranks that share a seed.
    compare_across_ranks: also gather every rank's completion hashes each step (one all_gather of
    2 KiB per rank, inside TRL's reward computation, which every rank runs in step) and log
    `cross_rank_duplicate_frac`.
    weight_sync_every: with vLLM colocated, compare the engine's weights with the trainer's after every
    Nth push into it (0: never); a projected 10-25 ms a push for a 7B model on one GPU (docs/benchmarks.md).
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
    watch_weight_sync(trainer, weight_sync_every)
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


def watch_weight_sync(trainer, every: int = 1) -> WeightSyncWatch | None:
    """Wrap TRL's push into vLLM (`trainer.vllm_generation.sync_weights`) with the weight-sync check;
    the wrapper, or None where there is nothing to wrap (no vLLM, every=0, another TRL layout: one line says)."""
    args = getattr(trainer, "args", None)
    if not every or not getattr(args, "use_vllm", False):
        return None
    generation = getattr(trainer, "vllm_generation", None)
    sync = getattr(generation, "sync_weights", None)
    if isinstance(sync, WeightSyncWatch):
        return sync
    if sync is None or not hasattr(generation, "_iter_named_params"):
        api._say("weight sync not checked: this TRL version pushes weights into vLLM without "
                 "vllm_generation.sync_weights / _iter_named_params (TRL 1.16's layout)")
        return None
    generation.sync_weights = WeightSyncWatch(trainer, generation, sync, every)
    return generation.sync_weights


class WeightSyncWatch:
    """Stands in for `vllm_generation.sync_weights`: pushes as ever, then compares (colocate mode)."""

    SERVER_REASON = ("TRL's vLLM server holds the rollout weights in another process, which grpo-doctor does not "
                     "read; the log-prob drift (sampling/sampling_logp_difference/mean) still judges the run")

    def __init__(self, trainer, generation, sync, every: int) -> None:
        functools.update_wrapper(self, sync)
        self.trainer, self.generation, self.sync, self.every = trainer, generation, sync, max(1, int(every))
        self.num_pushes = 0
        self._name_map = None

    def __call__(self, *args, **kwargs):
        n, self.num_pushes = self.num_pushes, self.num_pushes + 1
        mode = getattr(self.generation, "mode", None)
        if mode != "colocate" or n % self.every:
            if mode == "server" and n == 0:
                gd.weight_sync_not_checked("trl-vllm-server", self.SERVER_REASON)
            return self.sync(*args, **kwargs)
        generation = self.generation
        check = gd.WeightSyncCheck(self.engine_weights, name_map=self.name_map(), engine="trl-vllm-colocate")
        walk = generation._iter_named_params  # TRL's own walk over the parameters, names as vLLM takes them
        own = vars(generation).get("_iter_named_params")  # someone's patch on the instance, kept
        generation._iter_named_params = lambda: check.tap(walk())
        try:
            result = self.sync(*args, **kwargs)
        finally:
            if own is None:
                del generation._iter_named_params  # back to the class's method
            else:
                generation._iter_named_params = own
        check.compare()
        return result

    def engine_weights(self):
        """The parameters of the model TRL loads into, in this process (TRL 1.16's own path to it)."""
        return self.generation.llm.llm_engine.model_executor.driver_worker.model_runner.model.named_parameters()

    def name_map(self):
        """vLLM's fusions of the trainer's names as TRL's walk writes them (PEFT and wrapper prefixes
        removed); full shapes (`ds_shape` under ZeRO-3)."""
        if self._name_map is None:
            fix = getattr(self.generation, "_fix_param_name_to_vllm", lambda name: name)
            shapes = {}
            for name, param in self.generation.model.named_parameters():
                name = fix(name.removeprefix("base_model.model.").replace(".base_layer", ""))
                shapes[name] = tuple(getattr(param, "ds_shape", None) or param.shape)
            self._name_map = gd.vllm_name_map(shapes)
        return self._name_map


def _in_phase(name: str, method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with gd.phase(name):
            return method(*args, **kwargs)

    return wrapper
