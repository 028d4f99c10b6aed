"""Installing grpo-doctor into a training environment leaves its torch alone (README, "Install").

A fresh virtual environment (no --system-site-packages: it holds only what is installed here) gets
torch 2.13.0 (this machine's local CPU wheel) and numpy 1.26.4, a numpy 1 as environments built for
vLLM < 0.7 or torch < 2.3 hold it. Then, as a user would, from a copy of this checkout named
grpo-doctor:
- the README's two install blocks (from a checkout; a wheel built there), run in bash exactly as
  written with that environment's pip on PATH, each install the core: torch's version, its dist-info
  RECORD and the size and modification time of every file the RECORD lists are unchanged, numpy is still 1.26.4 (pip picks a pandas that accepts it), and
  `grpo-doctor --help` runs there;
- `pip install --dry-run --report` of the `train` and `trl` extras, without this machine's pip cap
  on torch, would install neither torch nor another numpy over the installed ones.
pip's cache makes a second run cheap: 49 s here with a warm cache (76 s, and once 300 s, while
other jobs loaded the 2 shared cores), most of it unpacking torch, installing the core's
dependencies and resolving the extras against PyPI, which the dry run needs; without a network the
test skips, saying so.

Typical use:
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_install_isolation.py
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TORCH = "2.13.0"
NUMPY = "1.26.4"
TIMEOUT_S = 300
# What a wheel of the checkout is built from (pyproject.toml names the rest nowhere).
SOURCES = ("pyproject.toml", "README.md", "grpo_doctor", "trainer")
OFFLINE = ("Could not find a version", "No matching distribution", "NewConnectionError", "Network is unreachable",
           "Temporary failure in name resolution")

pytestmark = pytest.mark.slow


def pip_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing of this checkout or of .venv on the path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("GRPO_DOCTOR_")}
    env.update(extra)
    return env


def pip(venv: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """This interpreter's pip acting on `venv` (pip --python): the venv needs no pip of its own."""
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=pip_env(**env))


def installed_files(venv: Path, name: str) -> tuple[str, bytes, dict[str, tuple[int, int]]]:
    """A distribution's version, its RECORD, and (size, mtime_ns) of every file the RECORD lists."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    (info,) = site.glob(f"{name}-*.dist-info")
    record = (info / "RECORD").read_bytes()
    files = {}
    for line in record.decode().splitlines():
        path = site / line.split(",")[0]
        if path.is_file() and "__pycache__" not in path.parts:
            stat = path.stat()
            files[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return info.name.removesuffix(".dist-info").split("-")[1], record, files


def fail_or_skip(result: subprocess.CompletedProcess, what: str) -> None:
    if result.returncode == 0:
        return
    output = result.stdout + result.stderr
    # No index carries grpo-doctor: an install line that asks one for it fails here, network or not.
    if re.search(r"(matching distribution|version that satisfies).* for grpo[-_]doctor", output, flags=re.I):
        pytest.fail(f"{what}: asks a package index for grpo-doctor:\n{output[-2000:]}")
    if any(sign in output for sign in OFFLINE):
        pytest.skip(f"{what}: pip cannot reach the package index ({output.strip().splitlines()[-1]})")
    pytest.fail(f"{what} failed (exit status {result.returncode}):\n{output[-4000:]}")


def readme_install_blocks() -> list[str]:
    """The bash blocks of the README's **Install** paragraph (before **Use**), as a user copies them."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    part = text[text.index("**Install**"):text.index("**Use**")]
    blocks = re.findall(r"```bash\n(.*?)```", part, flags=re.S)
    assert len(blocks) == 2, f"expected the checkout and the wheel install blocks, found {len(blocks)}"
    return blocks


def checkout_copy(parent: Path) -> Path:
    """What a user has: a checkout named grpo-doctor (only the files a wheel is built from)."""
    source = parent / "grpo-doctor"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    return source


def run_as_written(block: str, venv: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The block in bash, with the training environment's pip first on PATH, as if activated."""
    env = pip_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", block], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env, cwd=cwd)


def test_the_readme_install_commands_work_as_written_and_leave_torch_and_numpy_as_they_were(tmp_path):
    venv = tmp_path / "training-env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    fail_or_skip(pip(venv, "install", "--quiet", "--no-compile", f"torch=={TORCH}", f"numpy=={NUMPY}"),
                 "the training environment's torch and numpy")
    before = installed_files(venv, "torch")
    assert before[0].split("+")[0] == TORCH and len(before[2]) > 1000  # 2.13.0+cpu
    checkout_copy(tmp_path)

    for number, block in enumerate(readme_install_blocks(), 1):
        fail_or_skip(run_as_written(block, venv, tmp_path), f"README install block {number}:\n{block}")
        after = installed_files(venv, "torch")
        assert after[0] == before[0] and after[1] == before[1], f"block {number} reinstalled torch"
        changed = sorted(path for path, stat in before[2].items() if after[2].get(path) != stat)
        assert not changed, f"block {number}: {len(changed)} of torch's files changed, e.g. {changed[:3]}"
        assert installed_files(venv, "numpy")[0] == NUMPY
        helped = subprocess.run([str(venv / "bin" / "grpo-doctor"), "--help"], capture_output=True, text=True,
                                timeout=120, env=pip_env(), cwd=tmp_path)
        assert helped.returncode == 0 and "usage: grpo-doctor" in helped.stdout, helped.stderr
        if number == 1:  # the wheel block must install grpo-doctor itself, not find it there already
            removed = pip(venv, "uninstall", "--yes", "grpo-doctor")
            assert removed.returncode == 0, removed.stderr
    (wheel,) = (tmp_path / "grpo-doctor" / "dist").glob("grpo_doctor-*.whl")

    plugin = subprocess.run([str(venv / "bin" / "python"), "-m", "grpo_doctor.rank.integrations.swift_plugin",
                             "--path"], capture_output=True, text=True, timeout=60, env=pip_env(), cwd=tmp_path)
    assert plugin.returncode == 0, plugin.stderr
    assert Path(plugin.stdout.strip()).is_file() and str(venv) in plugin.stdout  # inside the installed package

    # The extras, resolved against PyPI without this machine's cap on torch (PIP_CONFIG_FILE=/dev/null
    # drops the pip.conf that caps it): a torch or numpy they needed would be in the report's "install".
    report = tmp_path / "report.json"
    dry = pip(venv, "install", "--dry-run", "--quiet", "--report", str(report), f"{wheel}[train,trl]",
              PIP_CONFIG_FILE=os.devnull)
    fail_or_skip(dry, "pip install --dry-run grpo-doctor[train,trl]")
    would_install = {item["metadata"]["name"].lower(): item["metadata"]["version"]
                     for item in json.loads(report.read_text())["install"]}
    assert {"trl", "deepspeed"} <= would_install.keys(), would_install  # the extras were resolved
    assert "torch" not in would_install and "numpy" not in would_install, would_install
