"""Paths that are no ordinary files, given where grpo-doctor reads or writes one: one line, exit status 2,
never a traceback, a hang, all the memory, or a device turned into a regular file (issue 22).

Every case runs the real command in a child process, under a memory cap and a time limit, against
real objects: device nodes made with mknod (the numbers of /dev/zero, /dev/urandom and /dev/full),
FIFOs, symlink loops, an immutable file (chattr +i), /proc and /sys. The class-level guarantees are
tested in tests/schema/test_safe_read.py and test_safe_write.py.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
OOM_LINE = next(line for line in (LOGS / "cuda_oom_variants.log").read_text().splitlines()
                if "torch.OutOfMemoryError: CUDA out of memory" in line)
MEMORY_CAP_BYTES = 3 * 2**30
DEVICES = {"zero": (1, 5), "urandom": (1, 9), "full": (1, 7)}
# A 7B model's config.json, enough for the planner.
MODEL_CONFIG = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}


def _limited_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))


def _child(*args: str, timeout_s: float = 120, cwd: Path | None = None, stdout=subprocess.PIPE):
    command = [sys.executable, "-m", "grpo_doctor.cli.main", *args]
    return subprocess.run(command, env=clean_env(), stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=timeout_s, preexec_fn=_limited_memory, cwd=cwd)


def _one_line_error(out) -> str:
    """Exit status 2, `grpo-doctor: error: ...` and at most its hint, no traceback."""
    lines = out.stderr.splitlines()
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and lines and lines[0].startswith("grpo-doctor: error: "), out.stderr
    assert len(lines) <= 2 and (len(lines) == 1 or lines[1].startswith("  hint: ")), out.stderr
    return lines[0]


def _device(folder: Path, name: str, kind: str) -> Path:
    path = folder / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*DEVICES[kind]))
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


def _is_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


def _special(tmp_path: Path, kind: str, name: str) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp_path / name)
        return tmp_path / name
    return _device(tmp_path, name, kind)


def _logs(tmp_path: Path) -> Path:
    log = tmp_path / "train.log"
    log.write_text(OOM_LINE + "\n")
    return log


# -- item 1: reading a device or a FIFO ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["zero", "urandom", "fifo"])
def test_plan_model_config_that_is_a_device_or_fifo_is_one_line(tmp_path, kind):
    special = _special(tmp_path, kind, "config.json")
    out = _child("plan", "--gpu-memory", "80GiB", "--model", "Qwen/Qwen2.5-7B-Instruct", "--model-config",
                 str(special), timeout_s=60)
    line = _one_line_error(out)
    assert str(special) in line and ("character device" in line or "FIFO" in line), line
    assert stat.S_ISFIFO(os.stat(special).st_mode) if kind == "fifo" else _is_device(special)


@pytest.mark.parametrize("kind", ["zero", "fifo"])
def test_plan_deepspeed_config_that_is_a_device_or_fifo_is_one_line(tmp_path, kind):
    config = tmp_path / "model.json"
    config.write_text(json.dumps(MODEL_CONFIG))
    special = _special(tmp_path, kind, "ds.json")
    out = _child("plan", "--gpu-memory", "80GiB", "--model-config", str(config), "--", "swift", "rlhf",
                 "--rlhf_type", "grpo", "--model", "Qwen/Qwen2.5-7B-Instruct", "--deepspeed", str(special),
                 timeout_s=60)
    line = _one_line_error(out)
    assert str(special) in line and ("character device" in line or "FIFO" in line), line


@pytest.mark.parametrize("kind", ["zero", "fifo"])
def test_report_rules_config_that_is_a_device_or_fifo_is_one_line(tmp_path, kind):
    special = _special(tmp_path, kind, "rules.toml")
    out = _child("report", str(_logs(tmp_path)), "--out", str(tmp_path / "out"), "--rules-config", str(special),
                 timeout_s=90)
    line = _one_line_error(out)
    assert str(special) in line and ("character device" in line or "FIFO" in line), line


def test_watch_and_probe_files_that_are_devices_or_fifos_are_one_warning_each(tmp_path):
    """A run directory's own files, as the report reads them whole: never waited on, never read endlessly."""
    from grpo_doctor.schema import PhaseBegin, RunPaths, Step

    run = tmp_path / "run"
    paths = RunPaths(run)
    paths.ranks.mkdir(parents=True)
    common = dict(rank=0, host="node-0", pid=100, t=11.0, mono=11.0)
    paths.rank_file(0).write_text(json.dumps(PhaseBegin(**common, step=0, phase="rollout", path="rollout").to_dict())
                                  + "\n" + json.dumps(Step(**common, step=0, metrics={"loss": 0.5}).to_dict()) + "\n")
    host_dir = paths.supervisor_host("node-0")
    host_dir.mkdir(parents=True)
    os.mkfifo(host_dir / "summary.json")
    hang = _device(host_dir, "hang-1.json", "zero")
    paths.probe.mkdir()
    os.mkfifo(paths.probe_node_file(0, "node-0"))
    out = _child("report", str(run), "--out", str(tmp_path / "out"), "--json", timeout_s=90)
    assert out.returncode in (0, 1, 3) and "Traceback" not in out.stderr, out.stderr[-3000:]
    warnings = json.loads(out.stdout)["warnings"]
    for name, kind in (("summary.json", "FIFO"), ("hang-1.json", "character device"), ("node-000-node-0.json", "FIFO")):
        assert sum(name in w and kind in w for w in warnings) == 1, (name, warnings)
    assert _is_device(hang)


# -- item 2: writing onto a device, a FIFO, a symlink -------------------------------------------------


def test_report_html_onto_dev_full_is_one_line_and_full_stays_a_device(tmp_path):
    full = _device(tmp_path, "full", "full")
    out = _child("report", str(_logs(tmp_path)), "--out", str(tmp_path / "out"), "--html", str(full), timeout_s=90)
    line = _one_line_error(out)
    assert str(full) in line and "No space left" in line, line
    assert _is_device(full)


def test_report_html_onto_a_device_that_takes_data_writes_through_it(tmp_path):
    zero = _device(tmp_path, "zero", "zero")
    out = _child("report", str(_logs(tmp_path)), "--out", str(tmp_path / "out"), "--html", str(zero), timeout_s=90)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr  # 1: the OOM is critical
    assert _is_device(zero)


def test_report_html_to_dev_stdout_prints_the_page_and_keeps_the_redirection(tmp_path):
    page = tmp_path / "page.html"
    with open(page, "w") as f:
        out = _child("report", str(_logs(tmp_path)), "--out", str(tmp_path / "out"), "--html", "/dev/stdout",
                     "--json", stdout=f, timeout_s=90)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    text = page.read_text()
    assert text.lstrip().startswith("<!DOCTYPE html>") and text.count("<!DOCTYPE html>") == 1
    assert '"findings"' in text  # the JSON printed after it is there too: the file was not replaced


def test_report_html_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "pages" / "report.html"
    target.parent.mkdir()
    target.write_text("old page")
    link = tmp_path / "latest.html"
    link.symlink_to(target)
    out = _child("report", str(_logs(tmp_path)), "--out", str(tmp_path / "out"), "--html", str(link), timeout_s=90)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert link.is_symlink() and "<!DOCTYPE html>" in target.read_text()


def test_report_html_onto_a_fifo_nobody_reads_is_one_line(tmp_path):
    fifo = tmp_path / "page.fifo"
    os.mkfifo(fifo)
    out = _child("report", str(_logs(tmp_path)), "--out", str(tmp_path / "out"), "--html", str(fifo), timeout_s=90)
    line = _one_line_error(out)
    assert str(fifo) in line and "nobody reads it" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_plan_out_onto_dev_full_is_one_line(tmp_path):
    config = tmp_path / "model.json"
    config.write_text(json.dumps(MODEL_CONFIG))
    folder = tmp_path / "planned"
    folder.mkdir()
    full = _device(folder, "plan.json", "full")
    out = _child("plan", "--gpu-memory", "80GiB", "--model", "m", "--model-config", str(config), "--out", str(folder),
                 timeout_s=60)
    assert str(full) in _one_line_error(out)
    assert _is_device(full)


# -- item 10: a damaged findings.json, outputs nobody can write ---------------------------------------


def test_a_findings_json_of_brackets_beside_the_output_is_one_line(tmp_path):
    log = _logs(tmp_path)
    (tmp_path / "findings.json").write_text("[" * 100_000)
    out = _child("report", str(log), cwd=tmp_path, timeout_s=90)
    line = _one_line_error(out)
    assert "findings.json" in line and "not overwriting it" in line, line


def test_a_findings_json_of_a_gigabyte_costs_no_gigabyte(tmp_path):
    """Peak memory of the whole command, measured by a parent that has no other child."""
    log = _logs(tmp_path)
    with open(tmp_path / "findings.json", "wb") as f:
        f.truncate(2**30)  # sparse: a gigabyte of NUL bytes on no disk
    code = ("import resource, subprocess, sys\n"
            "out = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "print(out.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            "sys.stderr.write(out.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "grpo_doctor.cli.main", "report", str(log)],
                         env=clean_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    status, peak_kib = map(int, out.stdout.split())
    assert status == 2 and "Traceback" not in out.stderr and "findings.json" in out.stderr, out.stderr[-2000:]
    assert peak_kib < 600 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"


@pytest.mark.parametrize("out_dir", ["/proc", "/proc/self/x", "/sys/kernel", "LOOP"])
def test_an_out_directory_nobody_can_write_is_one_line(tmp_path, out_dir):
    if out_dir == "LOOP":
        (tmp_path / "a").symlink_to(tmp_path / "b")
        (tmp_path / "b").symlink_to(tmp_path / "a")
        out_dir = str(tmp_path / "a")
    out = _child("report", str(_logs(tmp_path)), "--out", out_dir, timeout_s=90)
    line = _one_line_error(out)
    assert out_dir in line, line


def test_html_onto_an_immutable_file_is_one_line(tmp_path):
    if shutil.which("chattr") is None or os.geteuid() != 0:
        pytest.skip("chattr +i needs chattr and root")
    page = tmp_path / "report.html"
    page.write_text("kept")
    if subprocess.run(["chattr", "+i", str(page)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable flag")
    try:
        out = _child("report", str(_logs(tmp_path)), "--out", str(tmp_path / "out"), "--html", str(page),
                     timeout_s=90)
        line = _one_line_error(out)
        assert str(page) in line and "not permitted" in line, line
        assert page.read_text() == "kept"
    finally:
        subprocess.run(["chattr", "-i", str(page)], check=True)


# -- item 13: plan's numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize("flag, value", [("per_device_train_batch_size", "1e308"), ("num_generations", "-5"),
                                         ("per_device_train_batch_size", "2.5"), ("num_generations", "0")])
def test_plan_refuses_an_impossible_count_in_one_line(tmp_path, flag, value):
    config = tmp_path / "model.json"
    config.write_text(json.dumps(MODEL_CONFIG))
    out = _child("plan", "--gpu-memory", "80GiB", "--model-config", str(config), "--", "swift", "rlhf",
                 "--rlhf_type", "grpo", "--model", "Qwen/Qwen2.5-7B-Instruct", f"--{flag}", value, timeout_s=60)
    line = _one_line_error(out)
    assert f"--{flag}" in line and value in line, line


@pytest.mark.parametrize("setting", ["micro_batch=1.0e308", "micro_batch=1e400", "micro_batch=1" + "0" * 308,
                                     "max_completion_len=2.5", "max_prompt_len=-3"])
def test_plan_set_refuses_an_impossible_size_in_one_line(tmp_path, setting):
    config = tmp_path / "model.json"
    config.write_text(json.dumps(MODEL_CONFIG))
    out = _child("plan", "--gpu-memory", "80GiB", "--model", "m", "--model-config", str(config), "--set", setting,
                 timeout_s=60)
    assert setting.split("=")[0] in _one_line_error(out)
