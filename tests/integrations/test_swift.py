"""The ms-swift plugin without ms-swift: registration into registries shaped like ms-swift's, the
shipped plugin file, and the rollout recorder called the way ms-swift calls `_compute_rewards_per_func`
(swift/rlhf_trainers/grpo_trainer.py). The trainer here is a namespace holding the attributes the
recorder reads; the real run is tests/integrations/test_swift_run.py."""
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import REPO, clean_env, run_program
from transformers import TrainerCallback

from grpo_doctor.rank.integrations.swift import SwiftCallback, register
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Rollout


def test_register_fills_ms_swift_4_callbacks_map_with_a_factory_that_wraps_a_grpo_trainers_rewards():
    callbacks_map = {"early_stop": object}
    register(run_dir="runs/x", callbacks_map=callbacks_map)
    args = SimpleNamespace(num_generations=4)
    compute = lambda samples: None  # noqa: E731
    trainer = SimpleNamespace(_compute_rewards_per_func=compute)
    callback = callbacks_map["grpo_doctor"](args, trainer)  # as swift/trainers/mixin.py builds it
    assert isinstance(callback, SwiftCallback) and isinstance(callback, TrainerCallback)
    assert (callback.args, callback.trainer, callback.run_dir) == (args, trainer, "runs/x")
    assert callback.compare_seeds_across_ranks  # ms-swift imports the plugin in every process: all gather
    assert callback.records_rollouts and trainer._compute_rewards_per_func.compute is compute
    assert not callbacks_map["grpo_doctor"](args, trainer).records_rollouts  # wrapped once
    assert not callbacks_map["grpo_doctor"](args, SimpleNamespace()).records_rollouts  # not a GRPO trainer


def test_register_appends_a_callback_instance_for_ms_swift_3():
    extra_callbacks = []
    register(extra_callbacks=extra_callbacks)
    assert len(extra_callbacks) == 1 and isinstance(extra_callbacks[0], TrainerCallback)
    assert not extra_callbacks[0].records_rollouts


@pytest.mark.skipif(importlib.util.find_spec("swift") is not None, reason="ms-swift is installed here")
def test_register_without_ms_swift_says_what_is_missing():
    with pytest.raises(ImportError, match="needs ms-swift"):
        register()


def test_the_shipped_plugin_file_is_printed_by_path_and_lives_alone_in_its_folder():
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.rank.integrations.swift_plugin", "--path"],
                         capture_output=True, text=True, timeout=60, env=clean_env())
    assert out.returncode == 0, out.stderr
    plugin = Path(out.stdout.strip())
    assert plugin.is_absolute() and plugin.is_file() and plugin.name != "swift.py"
    assert plugin.parent.parent == REPO / "grpo_doctor" / "rank" / "integrations"
    # ms-swift puts this folder first on sys.path: nothing in it may shadow a real package.
    assert sorted(p.name for p in plugin.parent.glob("*.py")) == ["__init__.py", plugin.name]
    assert "register()" in plugin.read_text()


def test_the_recorder_returns_the_rewards_untouched_and_records_this_ranks_rows(tmp_path):
    out = run_program(tmp_path, """
        from types import SimpleNamespace
        import torch
        import grpo_doctor as gd
        from grpo_doctor.rank.integrations.swift import record_rollouts

        gd.init("run")
        nan = float("nan")
        # Rank 1 of 2, 4 rows per rank, gathered rewards of two functions (ms-swift >= 4.4).
        gathered = torch.tensor([[0.0, 0.0]] * 4 + [[1.0, 1.0], [0.0, 1.0], [1.0, nan], [nan, nan]])
        calls = []
        trainer = SimpleNamespace(
            args=SimpleNamespace(num_generations=4, max_completion_length=3, temperature=0.7),
            model=SimpleNamespace(training=True), state=SimpleNamespace(global_step=6),
            accelerator=SimpleNamespace(process_index=1), reward_weights=torch.tensor([1.0, 0.5]),
            processing_class=None, _compute_rewards_per_func=lambda samples: calls.append(samples) or gathered)
        assert record_rollouts(trainer)
        chat = lambda q, a: [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        samples = [SimpleNamespace(messages=chat("2+2=", a), response_token_ids=ids)
                   for a, ids in (("4", [[7, 2]]), ("5", [[8, 2]]), ("6", [[9, 9, 9]]), ("6", [[9, 9, 9]]))]
        assert trainer._compute_rewards_per_func(samples) is gathered and calls == [samples]
        # ms-swift 4.0-4.3: dicts, this rank's rewards alone; no token ids: lengths in characters.
        trainer.state.global_step = 7
        trainer._compute_rewards_per_func.compute = lambda rows: torch.tensor([[1.0, 0.0], [0.0, 0.0]])
        trainer._compute_rewards_per_func([{"messages": chat("q", "ab")}, {"messages": chat("q", "")}])
        trainer.model.training = False  # evaluation: not recorded
        trainer._compute_rewards_per_func(samples)
        gd.shutdown()
    """)
    assert out.returncode == 0, out.stderr
    first, dicts = load_run([tmp_path / "run"]).ranks[0].of_kind(Rollout)
    assert (first.step, first.group_ids, first.num_groups) == (7, [1, 1, 1, 1], 1)
    assert first.completion_hashes[2] == first.completion_hashes[3] and first.duplicate_rate == 0.25
    assert (first.length_max, first.max_length, first.truncated_frac, first.temperature) == (3, 3, 0.5, 0.7)
    assert first.reward_mean == pytest.approx((1.5 + 0.5 + 1.0) / 3)  # weighted as ms-swift logs `reward`
    assert first.samples[0]["prompt"] == "user: 2+2="
    assert (dicts.step, dicts.max_length, dicts.length_max, dicts.reward_mean) == (8, None, 2, 0.5)
