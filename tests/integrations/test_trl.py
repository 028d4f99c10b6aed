"""The TRL integration on the real GRPOTrainer (trl_grpo.py): one process, and two under `accelerate launch`.

Each run is a real TRL training of 3 steps on CPU (about 20 s for one process, 40 s for two);
its run directory is read back and given to `grpo-doctor report`. Two processes are started the
way TRL's own documentation starts them, `accelerate launch` (its torch.distributed launcher,
gloo on CPU: `--multi_gpu` picks that launcher, and the script's `use_cpu` keeps it on CPU).
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, LaunchedRun, clean_env

from grpo_doctor.cli.main import main
from grpo_doctor.runlog.rank_log import RunLog
from grpo_doctor.schema import PhaseBegin, Rng, Rollout, Step

SCRIPT = Path(__file__).with_name("trl_grpo.py")
DEGENERATE = {"seed-collision", "constant-reward", "dead-step"}
STEPS = 3
TIMEOUT_S = 180


def run_trl(tmp: Path, *args: str, nproc: int = 0) -> LaunchedRun:
    """python trl_grpo.py ARGS, or `accelerate launch` with nproc processes (gloo, CPU)."""
    launcher = [sys.executable]
    if nproc:
        launcher += ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(nproc),
                     "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                     "--main_process_port", "0"]
    cmd = [*launcher, str(SCRIPT), "--run-dir", str(tmp / "run"), "--out-dir", str(tmp / "out"),
           "--steps", str(STEPS), *args]
    began = time.monotonic()
    env = clean_env(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    return LaunchedRun(result.returncode, result.stdout + result.stderr, time.monotonic() - began, tmp / "run")


def finding_ids(run_dir: Path, capsys) -> set[str]:
    main(["report", str(run_dir), "--json"])
    return {f["id"] for f in json.loads(capsys.readouterr().out)["findings"]}


def rollouts_by_step(run: RunLog, rank: int) -> dict[int, Rollout]:
    return {r.step: r for r in run.ranks[rank].of_kind(Rollout)}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """8 rows per step, num_generations 4: two whole groups on the one rank."""
    tmp = tmp_path_factory.mktemp("trl1")
    return run_trl(tmp, "--batch", "8", "--num-generations", "4", "--report-to", "tensorboard",
                   "--log-history", str(tmp / "history.json"))


@pytest.fixture(scope="module")
def two_healthy(tmp_path_factory):
    """4 rows per rank, num_generations 8: one prompt per step, half its copies on each rank."""
    return run_trl(tmp_path_factory.mktemp("trl2"), "--batch", "4", "--num-generations", "8", nproc=2)


@pytest.fixture(scope="module")
def two_same_seed(tmp_path_factory):
    return run_trl(tmp_path_factory.mktemp("trl2same"), "--batch", "4", "--num-generations", "8", "--same-seed",
                   nproc=2)


@pytest.mark.slow
def test_one_process_run_records_trls_metrics_and_rollouts_with_their_groups(one_process):
    assert one_process.returncode == 0, one_process.explain()
    log = one_process.run.ranks[0]
    steps = log.of_kind(Step)
    assert [s.step for s in steps] == list(range(1, STEPS + 1))
    for s in steps:
        assert {"loss", "grad_norm", "reward", "reward_std", "frac_reward_zero_std", "entropy"} <= s.metrics.keys()
    rollouts = rollouts_by_step(one_process.run, 0)
    assert sorted(rollouts) == list(range(1, STEPS + 1))
    for n, r in rollouts.items():
        assert r.num_completions == 8 and r.group_ids == [0, 0, 0, 0, 1, 1, 1, 1] and r.num_groups == 2
        assert len(set(r.prompt_hashes[:4])) == 1 and r.prompt_hashes[0] != r.prompt_hashes[4]
        assert (r.max_length, r.temperature) == (12, 1.0) and 1 <= r.length_max <= 12
        # One process: the rank's rewards are the batch TRL logged as `reward`.
        step_metrics = next(s.metrics for s in steps if s.step == n)
        assert r.reward_mean == pytest.approx(step_metrics["reward"], rel=1e-5)
        assert r.reward_std == pytest.approx(step_metrics["reward_std"], rel=1e-4)
    paths = {p.path for p in log.of_kind(PhaseBegin)}
    assert {"train-step", "train-step/rollout", "train-step/reward"} <= paths
    assert [r.tag for r in log.of_kind(Rng)] == ["init"] + ["step"] * STEPS
    assert log.end.reason == "shutdown" and log.open_path is None


@pytest.mark.slow
def test_nothing_of_grpo_doctor_reaches_trls_logged_metrics_or_its_reporting_callbacks(one_process):
    # What TRL keeps (state.log_history) and what a report_to callback received (TensorBoard's tags).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert one_process.returncode == 0, one_process.explain()
    tmp = one_process.run_dir.parent
    history = json.loads((tmp / "history.json").read_text())
    assert len(history) == STEPS + 1 and "rewards/digit_share/mean" in history[0]
    assert not [key for entry in history for key in entry if "grpo_doctor" in key.lower()]
    (events,) = (tmp / "out").rglob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    assert "train/reward" in tags and "train/rewards/digit_share/mean" in tags, tags
    assert not [tag for tag in tags if "grpo_doctor" in tag.lower()], tags
    assert rollouts_by_step(one_process.run, 0)  # and the rollouts were recorded (above, in detail)


@pytest.mark.slow
def test_healthy_one_process_run_gets_none_of_the_degenerate_rollout_findings(one_process, capsys):
    assert one_process.returncode == 0, one_process.explain()
    assert not finding_ids(one_process.run_dir, capsys) & DEGENERATE


@pytest.mark.slow
@pytest.mark.distributed
def test_two_processes_sample_different_completions_for_the_copies_of_one_prompt(two_healthy, capsys):
    assert two_healthy.returncode == 0, two_healthy.explain()
    run = two_healthy.run
    rank0, rank1 = rollouts_by_step(run, 0), rollouts_by_step(run, 1)
    assert sorted(rank0) == sorted(rank1) == list(range(1, STEPS + 1))
    for n in rank0:
        a, b = rank0[n], rank1[n]
        assert a.group_ids == b.group_ids == [0] * 4 and set(a.prompt_hashes) == set(b.prompt_hashes)
        assert not set(a.completion_hashes) & set(b.completion_hashes)
    inits = [next(r for r in run.ranks[rank].of_kind(Rng) if r.tag == "init") for rank in (0, 1)]
    assert inits[0].torch_cpu != inits[1].torch_cpu  # TRL's set_seed(seed, device_specific=True)
    assert "seed collision" not in two_healthy.output
    assert not finding_ids(two_healthy.run_dir, capsys) & DEGENERATE


@pytest.mark.slow
@pytest.mark.distributed
def test_one_seed_on_both_processes_makes_the_copies_of_a_prompt_identical_across_ranks(two_same_seed):
    assert two_same_seed.returncode == 0, two_same_seed.explain()
    run = two_same_seed.run
    rank0, rank1 = rollouts_by_step(run, 0), rollouts_by_step(run, 1)
    assert sorted(rank0) == sorted(rank1) == list(range(1, STEPS + 1))
    for n in rank0:
        assert rank0[n].prompt_hashes == rank1[n].prompt_hashes
        assert rank0[n].completion_hashes == rank1[n].completion_hashes
        assert rank0[n].duplicate_rate == 0.0  # inside one rank the copies still differ: only ranks collide
    inits = [next(r for r in run.ranks[rank].of_kind(Rng) if r.tag == "init") for rank in (0, 1)]
    assert inits[0].torch_cpu == inits[1].torch_cpu
    # Said at train begin by rank 0 (the callback gathers the first audit), without watch or report.
    said = [line for line in two_same_seed.output.splitlines() if "seed collision" in line]
    assert len(said) == 1 and "ranks 0-1" in said[0] and "torch CPU RNG state" in said[0], said


@pytest.mark.slow
@pytest.mark.distributed
def test_report_names_seed_collision_on_both_ranks_of_the_same_seed_run(two_same_seed, capsys):
    assert two_same_seed.returncode == 0, two_same_seed.explain()
    main(["report", str(two_same_seed.run_dir), "--json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    collision = next((f for f in findings if f["id"] == "seed-collision"), None)
    assert collision is not None, findings
    assert collision["ranks"] == [0, 1]


@pytest.mark.slow
def test_instrument_leaves_trls_rewards_advantages_and_training_unchanged(tmp_path):
    # The same seeded one-process training with and without grpo-doctor's two lines: TRL's own logs
    # (per-step metrics; each completion with its reward and advantage) must be identical.
    import pandas as pd

    args = ("--batch", "8", "--num-generations", "4", "--log-completions")
    runs = {}
    for name, extra in (("plain", ("--plain",)), ("instrumented", ())):
        out = tmp_path / name
        out.mkdir()
        run = run_trl(out, *args, "--log-history", str(out / "history.json"), *extra)
        assert run.returncode == 0, run.explain()
        runs[name] = out
    assert not (runs["plain"] / "run").exists() and (runs["instrumented"] / "run" / "ranks").is_dir()
    plain, instrumented = (json.loads((runs[n] / "history.json").read_text()) for n in ("plain", "instrumented"))
    assert len(plain) == len(instrumented) == STEPS + 1  # a record per step and the run's summary
    timing = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}
    for before, after in zip(plain, instrumented, strict=True):
        assert {k: v for k, v in before.items() if k not in timing} == {k: v for k, v in after.items() if k not in timing}
    columns = ["step", "prompt", "completion", "digit_share", "advantage"]
    for n in range(1, STEPS + 1):
        name = f"completions/completions_{n:05d}.parquet"
        before, after = (pd.read_parquet(runs[r] / "out" / name) for r in ("plain", "instrumented"))
        assert len(before) == 8 and before["advantage"].abs().sum() > 0  # real rewards that differ within groups
        pd.testing.assert_frame_equal(before[columns], after[columns], check_exact=True)
