"""The ms-swift plugin without ms-swift: registration into registries shaped like ms-swift's, and the
probe called the way ms-swift calls a reward function (swift/rl_core/grpo_algorithm.py). No ms-swift
run is faked here; see grpo_doctor/rank/integrations/swift.py for what was read from its source."""
import importlib.util
from types import SimpleNamespace

import pytest
from helpers import run_program
from transformers import TrainerCallback

from grpo_doctor.rank.integrations.swift import GrpoDoctorRollouts, SwiftCallback, register
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Rollout


def test_register_fills_ms_swift_4_registries_with_a_callback_factory_and_the_probe():
    callbacks_map, orms = {"early_stop": object}, {"accuracy": object}
    register(run_dir="runs/x", callbacks_map=callbacks_map, orms=orms)
    args, trainer = SimpleNamespace(num_generations=4), object()
    callback = callbacks_map["grpo_doctor"](args, trainer)  # as swift/trainers/mixin.py builds it
    assert isinstance(callback, SwiftCallback) and isinstance(callback, TrainerCallback)
    assert (callback.args, callback.trainer, callback.run_dir) == (args, trainer, "runs/x")
    assert callback.compare_seeds_across_ranks  # ms-swift imports the plugin in every process: all gather
    assert orms["grpo_doctor_rollouts"] is GrpoDoctorRollouts and "accuracy" in orms


def test_register_appends_a_callback_instance_for_ms_swift_3():
    extra_callbacks, orms = [], {}
    register(extra_callbacks=extra_callbacks, orms=orms)
    assert len(extra_callbacks) == 1 and isinstance(extra_callbacks[0], TrainerCallback)
    assert orms["grpo_doctor_rollouts"] is GrpoDoctorRollouts


@pytest.mark.skipif(importlib.util.find_spec("swift") is not None, reason="ms-swift is installed here")
def test_register_without_ms_swift_says_what_is_missing():
    with pytest.raises(ImportError, match="needs ms-swift"):
        register()


def test_the_probe_answers_none_and_records_what_ms_swift_hands_a_reward_function(tmp_path):
    out = run_program(tmp_path, """
        from types import SimpleNamespace
        import grpo_doctor as gd
        from grpo_doctor.rank.integrations.swift import GrpoDoctorRollouts

        gd.init("run")
        args = SimpleNamespace(num_generations=2, max_completion_length=3, temperature=0.7)
        probe = GrpoDoctorRollouts(args=args)  # ms-swift: orms[name](args=args)
        chat = lambda q, a: [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        # The keyword arguments of swift/rl_core/data.py to_reward_row, batched per sample.
        answer = probe(["4", "5", "6", "6"], messages=[chat("2+2=", "4"), chat("2+2=", "5"), chat("3+3=", "6"),
                       chat("3+3=", "6")], trainer_state=SimpleNamespace(global_step=6),
                       response_token_ids=[[[7, 2]], [[8, 2]], [[9, 9, 9]], [[9, 9, 9]]], solution=["4", "4", "6", "6"])
        assert answer == [None] * 4, answer
        probe(["x"], messages=[chat("q", "x")], trainer_state=None)  # ms-swift 3.x: no token ids
        import numpy as np  # single-turn ids come flat (vLLM's choice.token_ids), maybe as numpy ints
        probe(["ab", ""], messages=[chat("q", "ab"), chat("q", "")], trainer_state=None,
              response_token_ids=[list(np.array([5, 6])), []])
        gd.shutdown()
    """)
    assert out.returncode == 0, out.stderr
    first, second, flat = load_run([tmp_path / "run"]).ranks[0].of_kind(Rollout)
    assert (first.step, first.group_ids, first.num_groups) == (7, [0, 0, 1, 1], 2)
    assert first.prompt_hashes[0] == first.prompt_hashes[1] != first.prompt_hashes[2]
    assert first.completion_hashes[2] == first.completion_hashes[3] and first.duplicate_rate == 0.25
    assert (first.length_max, first.max_length, first.truncated_frac, first.temperature) == (3, 3, 0.5, 0.7)
    assert first.reward_mean is None and first.zero_std_frac is None  # ms-swift hands a reward function no rewards
    assert first.samples[0]["prompt"] == "user: 2+2="
    assert second.max_length is None and second.length_max == 1  # characters: no token limit applies
    assert (flat.length_max, flat.length_min, flat.max_length) == (2, 0, 3)  # token counts, the empty one too
