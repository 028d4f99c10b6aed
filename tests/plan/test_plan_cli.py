"""`grpo-doctor plan` as a user runs it: the table, --json, the exit status, and one line for bad input.

The model is transformers' own default Qwen2 config (7.7B parameters, written to config.json by
transformers itself), so these tests need no fixture beyond it.

Typical use:
    .venv/bin/python -m pytest -q tests/plan/test_plan_cli.py
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from grpo_doctor.cli.main import main  # noqa: E402

SWIFT = ["swift", "rlhf", "--rlhf_type", "grpo", "--tuner_type", "full", "--deepspeed", "zero2", "--use_vllm", "true",
         "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization", "0.6", "--per_device_train_batch_size", "4",
         "--max_completion_length", "2048", "--num_generations", "8"]


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("qwen2-default")
    transformers.Qwen2Config().to_json_file(folder / "config.json")
    return folder


def plan(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["plan", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_job_that_does_not_fit_exits_1_naming_the_gpu_and_a_flag_that_frees_enough(capsys, qwen2, monkeypatch):
    monkeypatch.setenv("NPROC_PER_NODE", "8")
    status, out, _ = plan(capsys, "--gpu-memory", "80GiB", "--model", str(qwen2), "--", *SWIFT)
    assert status == 1
    assert "DOES NOT FIT: GPUs 0-7 (trainer + vLLM)" in out
    assert "cheapest changes first" in out
    assert "--sleep_level 1" in out or "--deepspeed zero3" in out


def test_json_has_the_verdict_the_parts_per_gpu_and_fixes_as_exact_flags(capsys, qwen2, monkeypatch):
    monkeypatch.setenv("NPROC_PER_NODE", "8")
    status, out, _ = plan(capsys, "--gpu-memory", "80GiB", "--model", str(qwen2), "--json", "--", *SWIFT)
    data = json.loads(out)
    assert status == 1 and data["fits"] is False
    gpu = data["gpus"][0]
    assert gpu["peak_bytes"] == max(p["total_bytes"] for p in gpu["phases"].values())
    training = gpu["phases"]["backward"]["parts"]
    assert {"policy weights", "gradients", "optimizer states", "activations", "vLLM KV cache"} <= set(training)
    assert sum(training.values()) == gpu["phases"]["backward"]["total_bytes"]
    fitting = [f for f in data["fixes"] if f["fits"]]
    assert fitting and all(f["flag"].startswith(("--", "NPROC_PER_NODE=", "PYTORCH_CUDA_ALLOC_CONF=")) for f in fitting)
    assert all(f["frees_bytes"] > 0 for f in data["fixes"])


def test_the_cheapest_fitting_fix_makes_the_plan_fit(capsys, qwen2, monkeypatch):
    monkeypatch.setenv("NPROC_PER_NODE", "8")
    _, out, _ = plan(capsys, "--gpu-memory", "80GiB", "--model", str(qwen2), "--json", "--", *SWIFT)
    fix = next(f for f in json.loads(out)["fixes"] if f["fits"])
    flag, _, value = fix["flag"].partition(" ")
    status, _, _ = plan(capsys, "--gpu-memory", "80GiB", "--model", str(qwen2), "--", *SWIFT, flag, value)
    assert status == 0


def test_a_job_with_room_fits_and_exits_0(capsys, qwen2, monkeypatch):
    monkeypatch.setenv("NPROC_PER_NODE", "8")
    status, out, _ = plan(capsys, "--gpu-memory", "80GiB", "--model", str(qwen2), "--", *SWIFT, "--sleep_level", "1",
                          "--deepspeed", "zero3", "--vllm_gpu_memory_utilization", "0.4")
    assert status == 0 and out.count("FITS:") == 1


def test_an_unknown_framework_flag_is_one_line_naming_it_and_the_real_one(capsys, qwen2):
    status, out, err = plan(capsys, "--gpu-memory", "80GiB", "--model", str(qwen2), "--", *SWIFT,
                            "--vllm_gpu_memory_utilisation", "0.5")
    assert status == 2 and out == ""
    assert err.splitlines()[0] == ("grpo-doctor: error: unknown flag --vllm_gpu_memory_utilisation for swift rlhf "
                                   "(did you mean --vllm_gpu_memory_utilization?)")


def test_a_model_config_that_cannot_be_read_is_one_line(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    status, out, err = plan(capsys, "--gpu-memory", "80GiB", "--model", str(tmp_path), "--", *SWIFT)
    assert status == 2 and out == ""
    assert err.startswith(f"grpo-doctor: error: cannot read model config {tmp_path / 'config.json'}")


def test_a_model_nowhere_on_this_machine_is_one_line_saying_how_to_give_it(capsys):
    status, _, err = plan(capsys, "--gpu-memory", "80GiB", "--", *SWIFT, "--model", "Org/Not-Cached-7B")
    assert status == 2
    assert "no config.json for model 'Org/Not-Cached-7B'" in err and "--model-config" in err


def test_tensor_parallel_larger_than_the_gpus_is_one_line(capsys, qwen2, monkeypatch):
    monkeypatch.setenv("NPROC_PER_NODE", "4")
    status, _, err = plan(capsys, "--gpus", "4", "--gpu-memory", "80GiB", "--model", str(qwen2), "--", *SWIFT,
                          "--vllm_tensor_parallel_size", "8")
    assert status == 2
    assert err.splitlines()[0] == ("grpo-doctor: error: vLLM tensor parallel size 8 is larger than the 4 GPUs per "
                                   "node its engines run on")


def test_no_gpu_size_on_a_machine_without_gpus_is_one_line(capsys, qwen2):
    status, _, err = plan(capsys, "--model", str(qwen2), "--", *SWIFT)
    assert status == 2 and "NVML sees no GPU" in err and "--gpu-memory 80GiB" in err


def test_an_unknown_program_is_one_line_listing_what_the_plan_reads(capsys):
    status, _, err = plan(capsys, "--gpu-memory", "80GiB", "--", "make", "train")
    assert status == 2 and "cannot tell which framework 'make' is" in err and "verl.trainer.main_ppo" in err


def test_nproc_per_node_and_nnodes_come_from_the_environment_as_ms_swift_reads_them(capsys, qwen2, monkeypatch):
    monkeypatch.setenv("NPROC_PER_NODE", "4")
    monkeypatch.setenv("NNODES", "2")
    _, out, _ = plan(capsys, "--gpus", "8", "--gpu-memory", "80GiB", "--model", str(qwen2), "--json", "--", *SWIFT)
    data = json.loads(out)
    assert data["nodes"] == 2 and [g["gpus"] for g in data["gpus"]] == [[0, 1, 2, 3]]


def test_the_installed_command_runs_the_plan(qwen2, tmp_path):
    """The console script, as a user types it: env assignments on the command line, --out."""
    done = subprocess.run([str(Path(sys.executable).parent / "grpo-doctor"), "plan", "--gpu-memory", "80GiB",
                           "--out", str(tmp_path), "--model", str(qwen2), "--", "NPROC_PER_NODE=8", *SWIFT],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["fits"] is False


def test_a_hub_id_is_found_in_the_local_hugging_face_cache_never_downloaded(capsys, qwen2, tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--Org--Cached-7B" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((qwen2 / "config.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("NPROC_PER_NODE", "8")
    status, out, _ = plan(capsys, "--gpu-memory", "80GiB", "--json", "--", *SWIFT, "--model", "Org/Cached-7B")
    assert status == 1 and json.loads(out)["model"]["config"] == str(snapshot / "config.json")
