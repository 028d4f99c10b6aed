"""The plan where users already are: watch warns before the first step of a job that will not fit, and
the report's cuda-oom finding quotes the plan's verdict and the change that fits.

The job is a real child process run by `grpo-doctor watch` (a script whose command line reads as a
TRL GRPO script, that prints the OOM line of CASES.md case 4 and fails); the model is transformers'
default Qwen2 config.

Typical use:
    .venv/bin/python -m pytest -q tests/plan/test_plan_in_watch_and_report.py
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.42 GiB. GPU 7 has a total capacity of "
            "79.35 GiB of which 950.19 MiB is free. Process 48213 has 29.59 GiB memory in use. Process 48377 has "
            "48.83 GiB memory in use. Of the allocated memory 27.01 GiB is allocated by PyTorch, and 1.02 GiB is "
            "reserved by PyTorch but unallocated.")
CLI = str(Path(sys.executable).parent / "grpo-doctor")


@pytest.fixture(scope="module")
def watched_oom(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    root = tmp_path_factory.mktemp("plan-watch")
    transformers.Qwen2Config().to_json_file(root / "config.json")
    script = root / "grpo.py"
    script.write_text(f"import sys\nprint({OOM_LINE!r}, file=sys.stderr)\nsys.exit(1)\n")
    # One process (plain python) training LoRA adapters beside a colocated vLLM: 4.8 GiB short of 79.35.
    command = [sys.executable, str(script), "--model_name_or_path", str(root), "--use_peft", "true", "--use_vllm",
               "true", "--vllm_gpu_memory_utilization", "0.6", "--per_device_train_batch_size", "4",
               "--max_completion_length", "2048"]
    done = subprocess.run([CLI, "watch", "--run-dir", str(root / "run"), "--gpu-memory", "79.35GiB", "--", *command],
                          capture_output=True, text=True, timeout=300)
    return done, root / "run"


def test_watch_warns_before_the_job_starts_and_the_job_still_runs(watched_oom):
    done, run = watched_oom
    warning = done.stderr.index("WARNING memory plan: DOES NOT FIT")
    assert warning < done.stderr.index("watching pid")  # said before the job started
    assert "cheapest change that fits: " in done.stderr
    assert done.returncode == 1  # the job's own status: the plan did not stop it
    plan = json.loads(next(run.glob("supervisor/*/plan.json")).read_text())
    assert plan["fits"] is False and plan["fixes"]


def test_the_reports_cuda_oom_finding_quotes_the_plan_and_its_fix(watched_oom):
    _, run = watched_oom
    findings = json.loads((run / "findings.json").read_text())["findings"]
    oom = next(f for f in findings if f["id"] == "cuda-oom")
    plan = oom["evidence"]["plan"]
    assert plan["fits"] is False and plan["fix"]
    assert oom["hints"][0].startswith("The memory plan for this command (watch's plan at start")
    assert plan["fix"] in oom["hints"][0]
    html = (run / "report.html").read_text()
    assert 'id="memory-plan"' in html and "plan-seg" in html


def test_without_watchs_plan_the_report_plans_run_jsons_command_with_the_ooms_gpu_size(watched_oom, tmp_path):
    _, run = watched_oom
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for plan in copy.glob("supervisor/*/plan.json"):
        plan.unlink()
    done = subprocess.run([CLI, "report", str(copy), "--json"], capture_output=True, text=True, timeout=300)
    oom = next(f for f in json.loads(done.stdout)["findings"] if f["id"] == "cuda-oom")
    plan = oom["evidence"]["plan"]
    assert plan["source"] == "planned from run.json's command with the OOM's GPU size"
    assert plan["fits"] is False and plan["fix"] in oom["hints"][0]


CORRUPTIONS = {
    "truncated": lambda text, data: text[: len(text) // 2],
    "worst_gpu a string": lambda text, data: json.dumps({**data, "worst_gpu": "x"}),
    "peak phase not a phase": lambda text, data: json.dumps(
        {**data, "gpus": [{**data["gpus"][0], "peak_phase": "<script>alert(1)</script>"}]}),
    "no phases": lambda text, data: json.dumps({**data, "gpus": [{**data["gpus"][0], "phases": {}}]}),
    "a size past any GPU": lambda text, data: json.dumps({**data, "gpus": [{**data["gpus"][0], "capacity_bytes": 10**400}]}),
    "frees a word": lambda text, data: json.dumps({**data, "fixes": [{**data["fixes"][0], "frees_bytes": "lots"}]}),
    "markup in every string": lambda text, data: json.dumps(
        {**data, "verdict": "<script>alert(1)</script>", "assumptions": ["<img src=x onerror=alert(1)>"],
         "fixes": [{**data["fixes"][0], "flag": "<script>alert(2)</script>"}]}),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_damaged_plan_json_never_costs_the_oom_finding_and_markup_stays_text(watched_oom, tmp_path, corruption):
    _, run = watched_oom
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (plan_file,) = copy.glob("supervisor/*/plan.json")
    text = plan_file.read_text()
    plan_file.write_text(CORRUPTIONS[corruption](text, json.loads(text)))
    done = subprocess.run([CLI, "report", str(copy), "--json"], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stderr
    assert any(f["id"] == "cuda-oom" for f in json.loads(done.stdout)["findings"])
    html = (copy / "report.html").read_text()
    assert "<script>alert" not in html and "<img src=x" not in html


def test_the_reports_own_plan_uses_the_launch_variables_watch_recorded(tmp_path):
    """CASES.md case 4 as ms-swift runs it (NPROC_PER_NODE and NNODES from the environment), with no
    plan.json: the report plans run.json's command with the variables watch kept, so the quote names
    GPU 7, where trainer and vLLM share, not a one-process job on GPU 0."""
    case = json.loads((Path(__file__).parents[1] / "data/plan/cases/swift-3307-qwen7b-16gpu.json").read_text())
    model = Path(__file__).parents[1] / "data/plan/models/Qwen--Qwen2.5-7B-Instruct"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    swift = bin_dir / "swift"  # stands in for ms-swift's launcher: prints case 4's OOM and fails
    swift.write_text(f"#!{sys.executable}\nimport sys\nprint({OOM_LINE!r}, file=sys.stderr)\nsys.exit(1)\n")
    swift.chmod(0o755)
    command = case["command"].replace("path/Qwen2.5-7B-Instruct", str(model)).replace("'", "").split()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NPROC_PER_NODE": "8", "NNODES": "2"}
    run = tmp_path / "run"
    subprocess.run([CLI, "watch", "--run-dir", str(run), "--no-report", "--", *command], env=env,
                   capture_output=True, text=True, timeout=300)
    for plan in run.glob("supervisor/*/plan.json"):  # watch had no GPU size: the report plans on its own
        plan.unlink()
    done = subprocess.run([CLI, "report", str(run), "--json"], capture_output=True, text=True, timeout=300)
    oom = next(f for f in json.loads(done.stdout)["findings"] if f["id"] == "cuda-oom")
    quote = oom["evidence"]["plan"]
    assert quote["worst_gpus"] == [7] and "GPU 7 (trainer + vLLM) of every node" in quote["verdict"]
