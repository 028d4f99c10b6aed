import pytest
from test_watch import run_watch, torchrun, watch_cmd

from grpo_doctor.schema import Rng
from grpo_doctor.supervisor.seeds import SeedCheck


def _rng(rank, seed, state, tp_group=None, host="node-0"):
    return Rng(rank=rank, host=host, pid=100 + rank, step=None, t=1.0, mono=1.0, tag="init", torch_cpu=state,
               sampling_seed=seed, tp_group=tp_group)


def test_a_collision_is_said_once_not_again_when_more_ranks_report():
    check = SeedCheck()
    assert len(check.feed([_rng(0, 7, "a"), _rng(1, 7, "b")])) == 1
    assert check.feed([_rng(2, 9, "c")]) == []


def test_a_collision_names_the_ranks_hosts_and_fix():
    [line] = SeedCheck().feed([_rng(0, 7, "a"), _rng(1, 7, "b"), _rng(2, 8, "c")])
    assert "seed collision: ranks 0-1 (host(s) node-0) share the sampling seed 7" in line
    assert "device_specific=True" in line


def test_one_tensor_parallel_group_sharing_its_seed_is_fine():
    assert SeedCheck().feed([_rng(0, 7, "a", tp_group=0), _rng(1, 7, "a", tp_group=0),
                             _rng(2, 8, "b", tp_group=1), _rng(3, 8, "b", tp_group=1)]) == []


@pytest.mark.distributed
def test_watch_says_the_seed_collision_of_a_node_at_start(tmp_path):
    run_dir = tmp_path / "run"
    cmd = watch_cmd(run_dir, "--no-report") + torchrun() + ["-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "2",
                                                           "--inject", "same-seed-per-node"]
    out = run_watch(cmd, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "seed collision: ranks 0-1" in out.stderr and "sampling seed" in out.stderr
    healthy = run_watch(watch_cmd(tmp_path / "ok", "--no-report") + torchrun()
                        + ["-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "1"], tmp_path)
    assert healthy.returncode == 0 and "seed collision" not in healthy.stderr



def test_ranks_with_distinct_sampling_seeds_are_fine_even_if_their_torch_state_agrees():
    # vLLM samples with the sampling seed: the torch CPU generator is not what makes the completions
    assert SeedCheck().feed([_rng(0, 0, "same"), _rng(1, 1, "same")]) == []


def test_a_shared_torch_state_is_named_by_generator_without_a_sampling_seed():
    [line] = SeedCheck().feed([_rng(0, None, "same"), _rng(1, None, "same"), _rng(2, None, "other")])
    assert "seed collision: ranks 0-1 (host(s) node-0) share the torch CPU RNG state" in line


def _later(rank, state, step=10):
    return Rng(rank=rank, host="node-0", pid=100 + rank, step=step, t=2.0, mono=2.0, tag="step", torch_cpu=state)


def test_a_collision_the_next_audit_disproves_is_withdrawn_once():
    check = SeedCheck()
    assert len(check.feed([_rng(0, None, "default"), _rng(1, None, "default")])) == 1
    assert check.feed([_later(0, "s0")]) == []  # rank 1's audit of that step is not in yet
    [line] = check.feed([_later(1, "s1")])
    assert line.startswith("seed collision withdrawn: ranks 0-1 ") and "step 10" in line
    assert check.feed([_later(0, "t0", step=20), _later(1, "t1", step=20)]) == []


def test_a_node_whose_ranks_still_share_in_pairs_later_is_neither_withdrawn_nor_said_again():
    # one torch seed per node; copies of a prompt on pairs of ranks, so the pairs' states advance apart
    check = SeedCheck()
    assert len(check.feed([_rng(r, None, "node-seed") for r in range(4)])) == 1
    assert check.feed([_later(r, "pair-a" if r < 2 else "pair-b") for r in range(4)]) == []
