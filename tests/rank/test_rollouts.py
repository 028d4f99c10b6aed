"""gd.rollouts(): what a real process records for a step's completions, and what it never does."""
import json
import subprocess
import sys

import pytest
from helpers import clean_env, free_port, run_program, write_program

from grpo_doctor.checks.hashing import hash_text, hash_token_ids
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Rollout, Step


def rollout_records(run_dir):
    return load_run([run_dir]).ranks[0].of_kind(Rollout)


def test_a_step_of_token_ids_is_recorded_as_hashes_and_statistics(tmp_path):
    out = run_program(tmp_path, """
        import json, grpo_doctor as gd
        gd.init("run")
        gd.step(4)
        prompts = ["2+2="] * 4 + ["3*3="] * 4
        ids = [[5, 6, 7], [5, 6, 7], [5, 6, 9], [1, 2], [8, 8, 8, 8], [8, 8, 8, 8], [8, 8, 8, 8], [3]]
        texts = ["4", "4", "x" * 900, "3", "9", "9", "9", "1"]
        rewards = [1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5]
        rec = gd.rollouts(prompts, texts, rewards, completion_ids=ids, max_length=4, temperature=0.7, num_samples=3)
        print(json.dumps(rec.to_dict()))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    (rec,) = rollout_records(tmp_path / "run")
    assert rec.to_dict() == json.loads(out.stdout)  # the returned record is the one written
    assert (rec.step, rec.num_completions, rec.num_groups, rec.group_ids) == (5, 8, 2, [0, 0, 0, 0, 1, 1, 1, 1])
    assert rec.completion_hashes[0] == rec.completion_hashes[1] == hash_token_ids([5, 6, 7])
    assert rec.completion_hashes[2] != rec.completion_hashes[0]
    assert rec.prompt_hashes == [hash_text("2+2=")] * 4 + [hash_text("3*3=")] * 4
    assert rec.duplicate_rate == pytest.approx((1 / 4 + 2 / 4) / 2)
    assert rec.distinct_1 == pytest.approx(8 / 24)  # tokens 1 2 3 5 6 7 8 9, of 24
    assert rec.distinct_2 == pytest.approx(5 / 16)  # 56 67 69 12 88, of 16 bigrams
    # group 0, all 6 pairs: 0, 1/3, 1, 1/3, 1, 1; group 1: three clones (0) and three of 4/4
    assert rec.edit_distance == pytest.approx((6 + 2 / 3) / 12)
    assert (rec.length_mean, rec.length_min, rec.length_max) == (3.0, 1, 4)
    assert rec.truncated_frac == 3 / 8 and rec.max_length == 4 and rec.temperature == 0.7
    assert rec.reward_mean == pytest.approx(0.5) and rec.zero_std_frac == 0.5
    assert [s["group"] for s in rec.samples] == [0, 0, 1]  # completions 0, 2 and 5
    assert len(rec.samples[1]["completion"]) == 500 and rec.samples[1]["reward"] == 0.0


def test_text_alone_is_hashed_as_utf8_and_measured_in_characters(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
        gd.rollouts(["p", "p", "q", "q"], ["a b", "a b", "ü c d", "e"], [1, 0, 1, 1], group_ids=[3, 3, 9, 9], step=0)
    """)
    assert out.returncode == 0, out.stderr
    (rec,) = rollout_records(tmp_path / "run")
    assert rec.completion_hashes == [hash_text(t) for t in ["a b", "a b", "ü c d", "e"]]
    assert rec.group_ids == [3, 3, 9, 9] and rec.num_groups == 2
    assert (rec.length_min, rec.length_max, rec.truncated_frac) == (1, 5, None)
    assert rec.distinct_1 == pytest.approx(6 / 8)  # whitespace tokens a b ü c d e, of 8
    assert rec.duplicate_rate == 0.25 and rec.zero_std_frac == 0.5


def test_tensors_and_numpy_arrays_are_taken_as_they_come_from_a_trainer(tmp_path):
    out = run_program(tmp_path, """
        import numpy as np, torch, grpo_doctor as gd
        gd.init("run")
        ids = torch.tensor([[4, 5, 6], [4, 5, 6]])
        gd.rollouts(["p", "p"], ["x", "x"], torch.tensor([1.0, 0.0]), completion_ids=list(ids),
                    prompt_ids=[np.array([1, 2])] * 2, max_length=np.int64(3))
    """)
    assert out.returncode == 0, out.stderr
    (rec,) = rollout_records(tmp_path / "run")
    assert rec.completion_hashes == [hash_token_ids([4, 5, 6])] * 2
    assert rec.prompt_hashes == [hash_token_ids([1, 2])] * 2
    assert rec.truncated_frac == 1.0 and rec.reward_std == pytest.approx(0.5**0.5)


def test_bad_input_records_nothing_says_so_once_and_training_goes_on(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
        print(gd.rollouts(["p", "p"], ["a", "b"], [1.0]))                     # a reward missing
        print(gd.rollouts(["p", "p"], ["a", "b"], [1.0, "high"]))             # not a number
        print(gd.rollouts(["p", "p"], ["a", None], [1.0, 0.0]))               # not text
        print(gd.rollouts(["p"], ["a"], [1.0], completion_ids=[[2**40]]))     # not a token id
        print(gd.rollouts(["p"], ["a"], [1.0], max_length=0))
        gd.step(0, loss=1.0)
        print("trained")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None"] * 5 + ["trained"]
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("grpo-doctor") and "rollouts() recorded nothing: 2 completions but 1 rewards" in line
    log = load_run([tmp_path / "run"]).ranks[0]
    assert log.of_kind(Rollout) == [] and log.of_kind(Step)[0].metrics == {"loss": 1.0}


def test_a_reward_that_is_not_a_number_is_named_in_the_warning(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
        gd.rollouts(["p", "p"], ["a", "b"], [1.0, "high"])
    """)
    assert "rewards[1] is 'high', not a number" in out.stderr


def test_a_none_reward_is_unknown_like_in_trl_and_later_steps_are_still_recorded(tmp_path):
    # TRL reward functions return None for samples they do not score; TRL reads None as NaN.
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
        gd.rollouts(["p", "p", "q", "q"], ["a", "b", "c", "d"], [1.0, None, 0.5, 0.5], step=0)
        gd.rollouts(["p", "p"], ["a", "b"], [None, None], step=1)
        gd.rollouts(["p", "p"], ["a", "b"], [1.0, 0.0], step=2)
    """)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    first, unscored, third = rollout_records(tmp_path / "run")
    assert first.reward_mean == pytest.approx(2 / 3)  # the None left out, as TRL's nanmean does
    assert first.zero_std_frac == 1.0  # group p has one known reward: no spread to judge
    assert first.samples[1]["reward"] != first.samples[1]["reward"]  # NaN: not known
    assert (unscored.reward_mean, unscored.zero_std_frac) == (None, None)
    assert (third.step, third.zero_std_frac) == (2, 0.0)


def test_with_recording_off_it_does_nothing(tmp_path):
    out = run_program(tmp_path, """
        import sys, grpo_doctor as gd
        print(gd.rollouts(["p"], ["a"], [1.0]), gd.seed_audit(), "numpy" in sys.modules)
    """, GRPO_DOCTOR_DISABLE="1")
    assert out.returncode == 0 and out.stdout.split() == ["None", "None", "False"]
    assert out.stderr == "" and not (tmp_path / "grpo-doctor-runs").exists()


def test_without_a_process_group_the_cross_rank_comparison_says_it_has_no_effect(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
        gd.rollouts(["p"], ["a"], [1.0], compare_across_ranks=True)
        gd.rollouts(["p"], ["a"], [1.0], compare_across_ranks=True)
    """)
    assert out.returncode == 0, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "compare_across_ranks=True) has no effect: torch.distributed is not initialised" in line
    assert len(rollout_records(tmp_path / "run")) == 2


@pytest.mark.distributed
def test_across_ranks_each_rank_counts_its_completions_another_rank_also_sampled(tmp_path):
    prog = write_program(tmp_path, """
        import torch.distributed as dist, grpo_doctor as gd
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        gd.init("run")
        prompts = ["p0", "p0", "p1", "p1"]
        # "a" for p0 on both ranks is a collision; "b" on rank 1 answers p1, not p0: none.
        completions = [["a", "b", "c", "d"], ["a", "z", "b", "y"]][rank]
        gd.rollouts(prompts, completions, [1.0, 0.0, 1.0, 0.0], compare_across_ranks=True)
        gd.step(0)
        # Rank 1's input is bad: it records nothing but still joins the gather (no hang).
        gd.rollouts(prompts, completions, [1.0, 0.0, 1.0, "bad" if rank else 0.0], compare_across_ranks=True)
        gd.step(1)
        gd.rollouts(prompts, ["same"] * 4, [1.0, 0.0, 1.0, 0.0], compare_across_ranks=True)
        gd.step(2)
        dist.destroy_process_group()
    """)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(prog)]
    out = subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = load_run([tmp_path / "run"]).ranks
    frac = {r: [s.metrics.get("cross_rank_duplicate_frac") for s in log.of_kind(Step)] for r, log in ranks.items()}
    # step 1: rank 1 recorded nothing and sent only padding, so neither rank has anything to compare
    assert frac[0] == [0.25, None, 1.0]
    assert frac[1] == [0.25, None, 1.0]
    assert len(ranks[1].of_kind(Rollout)) == 2
