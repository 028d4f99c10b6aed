"""A healthy run of the trainer under torchrun (DDP, DeepSpeed ZeRO-2 and ZeRO-3) and alone."""
from __future__ import annotations

import math

import pytest

from grpo_doctor.schema import Memory, PhaseBegin, Step

STEPS = 3
# B=2 < G=4: the four copies of the step's prompt are spread over both ranks, as in TRL.
HEALTHY = ("--steps", str(STEPS), "--per-device-batch", "2", "--num-generations", "4")
PHASE_ORDER = ["weight-sync", "rollout", "reward", "ref-logprob", "forward", "backward", "optimizer-step"]
METRICS = {"loss", "kl", "reward", "reward_std", "frac_reward_zero_std", "frac_identical_groups", "grad_norm",
           "lr", "completion_length", "num_tokens", "logprob_diff"}

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def ddp(launch_trainer, tmp_path_factory):
    return launch_trainer(tmp_path_factory.mktemp("ddp"), *HEALTHY)


@pytest.fixture(scope="module")
def zero2(launch_trainer, tmp_path_factory):
    return launch_trainer(tmp_path_factory.mktemp("zero2"), *HEALTHY, "--engine", "deepspeed", "--zero-stage", "2")


@pytest.fixture(scope="module")
def zero3(launch_trainer, tmp_path_factory):
    return launch_trainer(tmp_path_factory.mktemp("zero3"), *HEALTHY, "--engine", "deepspeed", "--zero-stage", "3")


def steps_of(log) -> list[Step]:
    return log.of_kind(Step)


def assert_healthy_run(result, world_size: int = 2) -> None:
    assert result.returncode == 0, result.explain()
    run = result.run
    assert run.warnings == []
    assert sorted(run.ranks) == list(range(world_size))
    for rank, log in run.ranks.items():
        assert log.header.world_size == world_size
        assert [s.step for s in steps_of(log)] == list(range(STEPS))
        for s in steps_of(log):
            # with a second rank, the rank-side hash gather's share of copies found on another rank
            expected = METRICS | {"cross_rank_duplicate_frac"} if world_size > 1 else METRICS
            assert set(s.metrics) == expected, rank
            assert all(math.isfinite(v) for v in s.metrics.values())
        for n in range(STEPS):
            phases = [r.phase for r in log.of_kind(PhaseBegin) if r.step == n]
            assert phases == PHASE_ORDER, (rank, n)
        assert [m.step for m in log.of_kind(Memory) if m.tag == "step"] == list(range(STEPS))
        assert log.end.reason == "shutdown" and log.open_path is None
    # Rewards are gathered over ranks: every rank reports the same batch statistics.
    for key in ("reward", "reward_std", "frac_reward_zero_std", "frac_identical_groups"):
        assert len({tuple(s.metrics[key] for s in steps_of(log)) for log in run.ranks.values()}) == 1


@pytest.mark.parametrize("engine", ["ddp", "zero2", "zero3"])
def test_healthy_run_records_every_phase_step_and_metric_on_every_rank(engine, request):
    assert_healthy_run(request.getfixturevalue(engine))


def test_healthy_run_learns_from_distinct_completions(ddp):
    assert ddp.returncode == 0, ddp.explain()
    steps = steps_of(ddp.run.ranks[0])
    assert all(s.metrics["frac_identical_groups"] == 0 for s in steps)  # every rank samples its own stream
    assert steps[0].metrics["kl"] == 0  # policy == reference before the first update
    assert any(s.metrics["kl"] > 0 for s in steps[1:])
    assert any(s.metrics["grad_norm"] > 0 for s in steps)
    assert "step 2 loss" in ddp.output  # rank 0's progress line


@pytest.mark.parametrize("engine", ["zero2", "zero3"])
def test_deepspeed_trains_the_same_as_ddp_from_the_same_seed(engine, ddp, request):
    ds = request.getfixturevalue(engine)
    assert ds.returncode == 0 and ddp.returncode == 0, ds.explain()
    for rank in (0, 1):
        ours, theirs = steps_of(ds.run.ranks[rank]), steps_of(ddp.run.ranks[rank])
        for a, b in zip(ours[:2], theirs[:2], strict=True):
            assert a.metrics["loss"] == pytest.approx(b.metrics["loss"], rel=1e-4, abs=1e-6)
            assert a.metrics["reward"] == b.metrics["reward"]


def test_a_single_process_without_torchrun_is_a_world_of_one(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, *HEALTHY[:2], "--per-device-batch", "4", nproc=0)
    assert_healthy_run(result, world_size=1)


def test_no_record_writes_nothing(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path / "run", "--steps", "1", "--no-record", nproc=0)
    assert result.returncode == 0, result.explain()
    assert not (tmp_path / "run").exists()
