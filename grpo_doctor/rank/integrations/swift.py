"""grpo-doctor as an ms-swift plugin: the callback through `--callbacks`, rollouts read from the trainer.

ms-swift imports each file named by `--external_plugins` while it parses its arguments, before
it builds the trainer (swift/arguments/base_args/base_args.py, `_import_external_plugins`). The
package ships such a file, which calls `register()`: `python -m grpo_doctor.rank.integrations.swift_plugin
--path` prints where it is. `register()` puts the callback in:
- ms-swift >= 4.0: as `callbacks_map["grpo_doctor"]` (swift/callbacks/mapping.py), which the
  trainer builds for `--callbacks grpo_doctor` as `callbacks_map[name](args, trainer)`
  (swift/trainers/mixin.py, `_get_callbacks`). Given the trainer, the callback (callback.py:
  metrics from on_log, "train-step" phases, seed audits, memory) also wraps a GRPO trainer's
  `_compute_rewards_per_func(samples)`, which ms-swift calls on every rank with that rank's
  samples (their `messages`, the completion last, and `response_token_ids`) and which returns
  every reward function's rewards: gathered from all ranks from 4.4 on, this rank's own in
  4.0-4.3 (swift/rlhf_trainers/grpo_trainer.py). The wrapper hands them back untouched and calls
  `grpo_doctor.rollouts()` with this rank's rows weighted by `--reward_weights` (ms-swift's
  logged `reward`), the groups of TRL's RepeatSampler, which ms-swift samples with (layout.py),
  `max_completion_length` and `temperature`. No reward function is added, so nothing of
  grpo-doctor reaches ms-swift's logged metrics or completions table;
- ms-swift 3.x: as an instance appended to `extra_callbacks` (swift/plugin/callback.py), which
  every trainer gets (swift/llm/train/sft.py), but without the trainer: metrics, phases, seeds
  and memory, no rollouts (one line says so).
Evaluation batches are not recorded. Under DAPO's dynamic sampling every resampled batch is
recorded at the step it belongs to; with `dynamic_num_samples` (multi-turn, variable sample
counts) the rewards cannot be sliced per rank and are recorded as NaN. ms-swift 4.0-4.3 with a
gym environment scores without `_compute_rewards_per_func`: no rollouts there.

Run against ms-swift 4.6.0 (tests/integrations/test_swift_run.py: `swift rlhf` on CPU, one
process, in its own environment); 4.0-4.5 and the 3.x registries are read from their source and
have not been run.

Typical use:
    swift rlhf --rlhf_type grpo ... --callbacks grpo_doctor \
        --external_plugins $(python -m grpo_doctor.rank.integrations.swift_plugin --path)
or, in a plugin file of one's own (any name but swift.py):
    from grpo_doctor.rank.integrations.swift import register
    register()
"""
from __future__ import annotations

import functools
import math
import os

import grpo_doctor as gd
from grpo_doctor.rank import api
from grpo_doctor.rank.integrations.callback import GrpoDoctorCallback
from grpo_doctor.rank.integrations.layout import as_text, layout_group_ids, rank_rewards

CALLBACK_NAME = "grpo_doctor"
_HOOK = "_compute_rewards_per_func"


class SwiftCallback(GrpoDoctorCallback):
    """GrpoDoctorCallback built the way ms-swift >= 4.0 builds a `--callbacks` entry: (args, trainer);
    with a GRPO trainer it also records the rollouts (module docstring)."""

    def __init__(self, args=None, trainer=None, *, num_samples: int = 4, **kwargs) -> None:
        super().__init__(**kwargs)
        self.args = args
        self.trainer = trainer
        self.records_rollouts = trainer is not None and record_rollouts(trainer, num_samples=num_samples)

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        if self.trainer is None and hasattr(args, "num_generations"):  # GRPO's arguments
            api._say("ms-swift 3.x hands a callback no trainer: rollouts are not recorded (ms-swift >= 4.0 "
                     "with --callbacks grpo_doctor records them)")


def record_rollouts(trainer, *, num_samples: int = 4) -> bool:
    """Wrap the trainer's `_compute_rewards_per_func` to record each training batch; False where it has none."""
    compute = getattr(trainer, _HOOK, None)
    if compute is None or isinstance(compute, RewardsRecorder):
        return False
    setattr(trainer, _HOOK, RewardsRecorder(trainer, compute, num_samples=num_samples))
    return True


class RewardsRecorder:
    """Stands in for ms-swift's `_compute_rewards_per_func`: returns what it returns, and records the samples."""

    def __init__(self, trainer, compute, *, num_samples: int = 4) -> None:
        functools.update_wrapper(self, compute)
        self.trainer = trainer
        self.compute = compute
        self.num_samples = num_samples

    def __call__(self, samples, *args, **kwargs):
        with gd.phase("reward"):
            rewards_per_func = self.compute(samples, *args, **kwargs)
        if self.trainer.model.training:
            try:
                self.record(samples, rewards_per_func)
            except Exception as exc:  # an observer must not stop training
                api._say(f"rollouts not recorded ({type(exc).__name__}: {exc})")
        return rewards_per_func

    def record(self, samples, rewards_per_func) -> None:
        trainer, args = self.trainer, self.trainer.args
        tokenizer = getattr(trainer, "processing_class", None)
        messages = [_field(s, "messages") for s in samples]
        prompts = [as_text(m[:-1]) for m in messages]
        completions = [_completion_text(m[-1].get("content"), tokenizer) for m in messages]
        n = len(samples)
        token_ids = [_field(s, "response_token_ids") for s in samples]
        ids = None  # all or none: lengths in tokens and in characters cannot be mixed
        if all(t is not None for t in token_ids) and (any(token_ids) or not any(completions)):
            ids = [_joined_turns(t) for t in token_ids]
        index = trainer.accelerator.process_index
        rewards = [math.nan] * n
        if not getattr(trainer, "dynamic_num_samples", False):
            rewards = rank_rewards(rewards_per_func, trainer.reward_weights, index, n)
        num_generations = getattr(args, "num_generations", None)
        group_ids = layout_group_ids(prompts, index, num_generations) if num_generations else None
        gd.rollouts(
            prompts, completions, rewards, group_ids, completion_ids=ids,
            # The limit is in tokens: without token ids the lengths are characters and cannot be compared.
            max_length=getattr(args, "max_completion_length", None) if ids is not None else None,
            temperature=getattr(args, "temperature", None), step=trainer.state.global_step + 1,
            num_samples=self.num_samples,
        )


def register(
    *,
    run_dir: str | os.PathLike | None = None,
    callbacks_map: dict | None = None,
    extra_callbacks: list | None = None,
    compare_seeds_across_ranks: bool = True,
) -> None:
    """Register the callback with ms-swift (or into the registries given).

    compare_seeds_across_ranks: the callback gathers the train-begin seed audit and rank 0 prints
    ranks sharing a seed (a collective: ms-swift imports the plugin file in every process).
    """
    if callbacks_map is None and extra_callbacks is None:
        callbacks_map, extra_callbacks = _swift_registries()
    options = {"run_dir": run_dir, "compare_seeds_across_ranks": compare_seeds_across_ranks}
    if callbacks_map is not None:
        callbacks_map[CALLBACK_NAME] = functools.partial(SwiftCallback, **options)
    if extra_callbacks is not None:
        extra_callbacks.append(SwiftCallback(**options))


def _swift_registries() -> tuple[dict | None, list | None]:
    try:
        from swift.callbacks import callbacks_map  # ms-swift >= 4.0
        return callbacks_map, None
    except ImportError:
        pass
    try:
        from swift.plugin import extra_callbacks  # ms-swift 3.x
    except ImportError:
        raise ImportError("grpo_doctor.rank.integrations.swift.register() needs ms-swift in this environment "
                          "(pip install ms-swift); or pass the registries to fill") from None
    return None, extra_callbacks


def _field(sample, name: str):
    """A sample's field: ms-swift >= 4.4 hands GRPOSample objects, 4.0-4.3 dicts."""
    return sample.get(name) if isinstance(sample, dict) else getattr(sample, name, None)


def _completion_text(content, tokenizer) -> str:
    """The completion as text; ms-swift may leave token ids in its place (as its `_log_rollout` decodes)."""
    if isinstance(content, str):
        return content
    ids = content.get("token_ids") if isinstance(content, dict) else content
    if tokenizer is not None and isinstance(ids, list) and all(isinstance(i, int) for i in ids):
        return tokenizer.decode(ids)
    return as_text(content)


def _joined_turns(sample: list) -> list[int]:
    """A sample's completion ids: ms-swift hands a single-turn rollout's ids flat (vLLM's
    `choice.token_ids`) and a multi-turn one's as a list per turn, although both are typed List[List[int]]."""
    if not sample or not isinstance(sample[0], (list, tuple)):
        return list(sample)
    return [token for turn in sample for token in turn]
