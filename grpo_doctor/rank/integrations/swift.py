"""grpo-doctor as an ms-swift plugin: the callback through `--callbacks`, rollouts as a reward plugin.

ms-swift imports each file named by `--external_plugins` while it parses its arguments, before
it builds the trainer (swift/arguments/base_args/base_args.py, `_import_external_plugins`, which
imports the file by its name: call yours anything but swift.py). `register()`, called there, puts in:
- the callback (callback.py: metrics from on_log, "train-step" phases, seed audits, memory):
  ms-swift >= 4.0 as `callbacks_map["grpo_doctor"]` (swift/callbacks/mapping.py), which the
  trainer builds for `--callbacks grpo_doctor` as `callbacks_map[name](args, trainer)`
  (swift/trainers/mixin.py, `_get_callbacks`); ms-swift 3.x as an instance appended to
  `extra_callbacks` (swift/plugin/callback.py), which every trainer gets (swift/llm/train/sft.py);
- the rollout probe as `orms["grpo_doctor_rollouts"]` (4.x swift/rewards/orm.py, 3.x
  swift/plugin/orm.py), a reward function named in `--reward_funcs` with weight 0 in
  `--reward_weights`. ms-swift calls it on every rank as `probe(completions, **kwargs)` with that
  rank's samples: `messages` (the conversation, the completion last), `trainer_state`, the
  dataset's columns and from 4.0 `response_token_ids`, flat for one turn, a list per turn for
  several (swift/rl_core/grpo_algorithm.py,
  `compute_rewards_per_func`; swift/rl_core/data.py, `to_reward_row`). It answers None, which
  ms-swift turns into NaN and leaves out of its weighted nansum: training is unchanged (ms-swift
  logs `rewards/GrpoDoctorRollouts/mean|std` as NaN; the callback drops them). Groups
  follow TRL's RepeatSampler, which ms-swift samples with (layout.py).
ms-swift passes no reward function the values of the others, so these rollouts are recorded
with NaN rewards (completion hashes, groups, lengths and diversity are complete: enough for
`seed-collision`); ms-swift's own `reward`, `reward_std` (there the mean of the group stds) and
`frac_reward_zero_std` reach the Step records through the callback. Evaluation rollouts are
recorded too: a reward function cannot tell them from training's.

Run against ms-swift 4.6.0 (tests/integrations/test_swift_run.py: `swift rlhf` on CPU, one
process, in its own environment); the 3.x registries are read from its source (before the v4
refactor, commit 67ae6076) and have not been run.

Typical use, a plugin file grpo_doctor_plugin.py:
    from grpo_doctor.rank.integrations.swift import register
    register()
and then
    swift rlhf --rlhf_type grpo ... --external_plugins grpo_doctor_plugin.py --callbacks grpo_doctor \
        --reward_funcs accuracy grpo_doctor_rollouts --reward_weights 1 0
"""
from __future__ import annotations

import functools
import math
import os

import grpo_doctor as gd
from grpo_doctor.rank import api
from grpo_doctor.rank.identity import process_group
from grpo_doctor.rank.integrations.callback import PROBE_NAME, GrpoDoctorCallback
from grpo_doctor.rank.integrations.layout import as_text, layout_group_ids

CALLBACK_NAME = "grpo_doctor"


class SwiftCallback(GrpoDoctorCallback):
    """GrpoDoctorCallback built the way ms-swift >= 4.0 builds a `--callbacks` entry: (args, trainer)."""

    def __init__(self, args=None, trainer=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.args = args
        self.trainer = trainer


class GrpoDoctorRollouts:  # the name ms-swift logs its rewards under: callback.SWIFT_PROBE_CLASS
    """A zero-weight ms-swift reward function (ORM) that hands this rank's rollouts to grpo_doctor.rollouts()."""

    def __init__(self, args=None, num_samples: int = 4, **kwargs) -> None:
        self.args = args  # ms-swift's GRPOConfig
        self.num_samples = num_samples

    def __call__(self, completions, messages=None, trainer_state=None, response_token_ids=None, **kwargs):
        try:
            self._record(completions, messages, trainer_state, response_token_ids)
        except Exception as exc:  # an observer must not stop training
            api._say(f"rollouts not recorded ({type(exc).__name__}: {exc})")
        return [None] * len(completions)

    def _record(self, completions, messages, trainer_state, response_token_ids) -> None:
        n = len(completions)
        prompts = [as_text(m[:-1]) for m in messages] if messages is not None else [""] * n
        ids = None
        if response_token_ids is not None and len(response_token_ids) == n:
            ids = [_joined_turns(sample) for sample in response_token_ids]
        args = self.args
        num_generations = getattr(args, "num_generations", None)
        group_ids = layout_group_ids(prompts, _process_index(), num_generations) if num_generations else None
        gd.rollouts(
            prompts, [as_text(c) for c in completions], [math.nan] * n, group_ids, completion_ids=ids,
            # The limit is in tokens: without token ids the lengths are characters and cannot be compared.
            max_length=getattr(args, "max_completion_length", None) if ids is not None else None,
            temperature=getattr(args, "temperature", None),
            step=trainer_state.global_step + 1 if trainer_state is not None else None,
            num_samples=self.num_samples,
        )


def register(
    *,
    run_dir: str | os.PathLike | None = None,
    callbacks_map: dict | None = None,
    orms: dict | None = None,
    extra_callbacks: list | None = None,
    compare_seeds_across_ranks: bool = True,
) -> None:
    """Register the callback and the rollout probe with ms-swift (or into the registries given).

    compare_seeds_across_ranks: the callback gathers the train-begin seed audit and rank 0 prints
    ranks sharing a seed (a collective: ms-swift imports the plugin file in every process).
    """
    if callbacks_map is None and orms is None and extra_callbacks is None:
        callbacks_map, orms, extra_callbacks = _swift_registries()
    options = {"run_dir": run_dir, "compare_seeds_across_ranks": compare_seeds_across_ranks}
    if callbacks_map is not None:
        callbacks_map[CALLBACK_NAME] = functools.partial(SwiftCallback, **options)
    if extra_callbacks is not None:
        extra_callbacks.append(SwiftCallback(**options))
    if orms is not None:
        orms[PROBE_NAME] = GrpoDoctorRollouts


def _swift_registries() -> tuple[dict | None, dict, list | None]:
    try:
        from swift.callbacks import callbacks_map  # ms-swift >= 4.0
        from swift.rewards import orms
        return callbacks_map, orms, None
    except ImportError:
        pass
    try:
        from swift.plugin import extra_callbacks, orms  # ms-swift 3.x
    except ImportError:
        raise ImportError("grpo_doctor.rank.integrations.swift.register() needs ms-swift in this environment "
                          "(pip install ms-swift); or pass the registries to fill") from None
    return None, orms, extra_callbacks


def _joined_turns(sample: list) -> list[int]:
    """A sample's completion ids: ms-swift hands a single-turn rollout's ids flat (vLLM's
    `choice.token_ids`) and a multi-turn one's as a list per turn, although both are typed List[List[int]]."""
    if not sample or not isinstance(sample[0], (list, tuple)):
        return list(sample)
    return [token for turn in sample for token in turn]


def _process_index() -> int:
    dist = process_group()
    return dist.get_rank() if dist is not None else 0
