"""The ms-swift plugin in a real `swift rlhf --rlhf_type grpo` run on CPU (one process).

The run loads the plugin file the package ships, by the path `python -m
grpo_doctor.rank.integrations.swift_plugin --path` prints, beside the tests' own plugin file (their
reward functions), and adds `--callbacks grpo_doctor`: as the README tells a user. Nothing of
grpo-doctor may reach ms-swift's logging.jsonl or completions.jsonl.

ms-swift cannot share grpo-doctor's test environment (ms-swift 4.6 asks for trl < 1.0 and
transformers < 5.20; TRL's tests here use TRL 1.16), so it lives in its own virtual environment,
.venv-swift, which the README's test command builds (constraints-swift.txt). Without it these
tests skip, saying how to build it. Each run trains a tiny random Llama for a few steps (about
40 s, most of it ms-swift's start-up); the run directory and ms-swift's own logging.jsonl are then
given to `grpo-doctor report`.

ms-swift 4.6 with two CPU processes fails inside ms-swift itself (an assertion on the advantages
in `_postprocess_batch`, with or without grpo-doctor), so only one process is run here.
"""
import json
import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO, LaunchedRun, clean_env

from grpo_doctor.cli.main import main
from grpo_doctor.schema import Rng, Rollout, Step

SWIFT_VENV = REPO / ".venv-swift"
HERE = Path(__file__).parent
DEGENERATE = {"seed-collision", "constant-reward", "dead-step", "zero-std-groups", "nan-loss"}
MAX_COMPLETION_LENGTH = 12
TIMEOUT_S = 300

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (SWIFT_VENV / "bin" / "swift").exists(), reason=(
        "no ms-swift environment: python3 -m venv .venv-swift && .venv-swift/bin/pip install "
        "-c constraints-swift.txt ms-swift msgspec -e .")),
]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("swift-job")
    subprocess.run([str(SWIFT_VENV / "bin" / "python"), str(HERE / "swift_job.py"), str(directory)],
                   check=True, capture_output=True, timeout=120, env=clean_env())
    return directory


def shipped_plugin() -> str:
    """The README's `$(python -m grpo_doctor.rank.integrations.swift_plugin --path)`, in .venv-swift."""
    out = subprocess.run([str(SWIFT_VENV / "bin" / "python"), "-m", "grpo_doctor.rank.integrations.swift_plugin",
                          "--path"], check=True, capture_output=True, text=True, timeout=60, env=clean_env())
    return out.stdout.strip()


def run_swift(job: Path, out: Path, reward: str, steps: int) -> LaunchedRun:
    cmd = [
        str(SWIFT_VENV / "bin" / "swift"), "rlhf", "--rlhf_type", "grpo", "--model", str(job / "model"),
        "--model_type", "llama", "--template", "default", "--use_hf", "true", "--dataset", str(job / "data.jsonl"),
        "--tuner_type", "full", "--torch_dtype", "float32", "--use_vllm", "false",
        # grpo-doctor's part: the plugin file the package ships (after the tests' own) and the callback.
        "--external_plugins", str(HERE / "swift_plugin.py"), shipped_plugin(), "--callbacks", "grpo_doctor",
        "--reward_funcs", reward,
        "--max_steps", str(steps), "--num_generations", "4", "--per_device_train_batch_size", "4",
        "--max_completion_length", str(MAX_COMPLETION_LENGTH), "--temperature", "1.0", "--logging_steps", "1",
        "--log_completions", "true", "--output_dir", str(out / "out"), "--save_strategy", "no",
        "--report_to", "none", "--dataloader_num_workers", "0", "--seed", "0",
    ]
    env = clean_env(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="",
                    GRPO_DOCTOR_RUN_DIR=str(out / "run"))
    began = time.monotonic()
    result = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    return LaunchedRun(result.returncode, result.stdout + result.stderr, time.monotonic() - began, out / "run")


def swift_logs(run: LaunchedRun) -> list[Path]:
    """What ms-swift wrote itself: logging.jsonl (and completions.jsonl) in its versioned output dir."""
    (version_dir,) = (run.run_dir.parent / "out").glob("v*-*")
    return sorted(p for p in version_dir.glob("*.jsonl"))


def report(paths: list[Path], capsys) -> list[dict]:
    main(["report", *map(str, paths), "--json", "--out", str(paths[0].parent / "report.html")])
    return json.loads(capsys.readouterr().out)["findings"]


@pytest.fixture(scope="module")
def healthy(job, tmp_path_factory) -> LaunchedRun:
    return run_swift(job, tmp_path_factory.mktemp("swift-healthy"), "digit_share", steps=3)


@pytest.fixture(scope="module")
def constant(job, tmp_path_factory) -> LaunchedRun:
    return run_swift(job, tmp_path_factory.mktemp("swift-constant"), "always_one", steps=6)


def test_the_shipped_plugin_records_ms_swifts_metrics_and_every_steps_rollouts_with_rewards(healthy):
    assert healthy.returncode == 0, healthy.explain()
    assert "rollouts not recorded" not in healthy.output
    log = healthy.run.ranks[0]
    steps = log.of_kind(Step)
    assert [s.step for s in steps] == [1, 2, 3]
    for s in steps:
        assert {"loss", "grad_norm", "reward", "reward_std", "frac_reward_zero_std", "kl",
                "rewards/DigitShare/mean"} <= s.metrics.keys()
    rollouts = {r.step: r for r in log.of_kind(Rollout)}
    assert sorted(rollouts) == [1, 2, 3]
    for n, r in rollouts.items():
        # One process: the rank's rewards are the batch ms-swift logged as `reward`.
        step_metrics = next(s.metrics for s in steps if s.step == n)
        assert r.reward_mean == pytest.approx(step_metrics["reward"], rel=1e-5, abs=1e-6)
        # One prompt, its 4 copies on this rank, lengths in tokens from ms-swift's response_token_ids.
        assert (r.num_completions, r.group_ids, r.num_groups) == (4, [0, 0, 0, 0], 1)
        assert (r.max_length, r.temperature) == (MAX_COMPLETION_LENGTH, 1.0)
        assert 1 <= r.length_max <= MAX_COMPLETION_LENGTH
        assert r.samples and r.samples[0]["prompt"].endswith("=")  # the conversation, system prompt first
    assert [r.tag for r in log.of_kind(Rng)][:1] == ["init"]
    assert log.end.reason == "shutdown" and log.open_path is None


def test_nothing_of_grpo_doctor_reaches_ms_swifts_logged_metrics_or_completions(healthy):
    assert healthy.returncode == 0, healthy.explain()
    logs = {p.name: p for p in swift_logs(healthy)}
    rows = [json.loads(line) for line in logs["logging.jsonl"].read_text().splitlines() if line.strip()]
    assert any("rewards/DigitShare/mean" in row for row in rows), rows[:1]
    assert not [key for row in rows for key in row if "grpo" in key.lower()]
    completions = [json.loads(line) for line in logs["completions.jsonl"].read_text().splitlines() if line.strip()]
    assert completions and not [key for row in completions for key in row if "grpo" in key.lower()]


def test_a_healthy_ms_swift_run_gets_no_degenerate_rollout_finding(healthy, capsys):
    assert healthy.returncode == 0, healthy.explain()
    assert not {f["id"] for f in report([healthy.run_dir], capsys)} & DEGENERATE
    assert not {f["id"] for f in report(swift_logs(healthy), capsys)} & DEGENERATE  # never instrumented


def test_a_reward_function_that_always_answers_one_is_found_from_the_plugin_and_from_ms_swifts_logs(constant, capsys):
    assert constant.returncode == 0, constant.explain()
    instrumented = {f["id"]: f for f in report([constant.run_dir], capsys)}
    assert {"constant-reward", "dead-step"} <= instrumented.keys(), instrumented
    assert instrumented["constant-reward"]["evidence"]["reward_value"] == 1.0
    logs = swift_logs(constant)
    assert "logging.jsonl" in [p.name for p in logs]
    uninstrumented = {f["id"] for f in report(logs, capsys)}
    assert {"constant-reward", "dead-step"} <= uninstrumented, uninstrumented
