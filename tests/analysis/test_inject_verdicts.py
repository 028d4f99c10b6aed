"""Every fault the reference trainer can inject gets the right finding, naming the right rank.

Each case runs the real thing: `grpo-doctor demo` (torchrun, two gloo ranks on the CPU) with one
`--inject` spec, and for desync and crash also `grpo-doctor watch -- torchrun ... -m
trainer.train` (watch's hang is `grpo-doctor demo`'s own default scenario, tests/cli/test_demo.py;
the demo's raised crash, tests/cli/test_demo.py too). The verdict is read back from the run's findings.json. `leading` is the finding a
person reads first (the root cause once findings are grouped into incidents); where the leading
finding is not yet the expected one, the test checks that the expected finding is present.
Slow (about 20-50 s a run): run one at a time.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, clean_env, free_port

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.supervisor.watch import HANG_EXIT

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

RUN_TIMEOUT_S = 300
# Long enough for a step's collectives on a loaded 2-core machine, short enough to keep a hang short.
DIST_TIMEOUT_S = "12"


def leading(findings: list[Finding]) -> Finding:
    """The finding a person reads first: the first root cause, else the first finding."""
    return next((f for f in findings if f.role == "root-cause"), findings[0])


def read_findings(run_dir: Path) -> list[Finding]:
    data = json.loads((run_dir / "findings.json").read_text())
    return [Finding.from_dict(f) for f in data["findings"]]


def run_demo(tmp_path: Path, spec: str, steps: int) -> list[Finding]:
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "grpo_doctor.cli.main", "demo", "--steps", str(steps), "--out", str(run_dir),
         "--inject", spec, "--dist-timeout-s", DIST_TIMEOUT_S],
        env=clean_env(OMP_NUM_THREADS="1"), cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert (run_dir / "findings.json").is_file(), out.stdout[-3000:] + out.stderr[-3000:]
    return read_findings(run_dir)


def run_watch(tmp_path: Path, spec: str, steps: int, dist_timeout_s: str) -> tuple[subprocess.CompletedProcess, list]:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), "--hang-floor", "5",
           "--hang-factor", "3", "--second-look", "1", "--on-hang", "kill", "--",
           sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", str(steps),
           "--dist-timeout-s", dist_timeout_s, "--inject", spec]
    out = subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=REPO, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT_S)
    assert (run_dir / "findings.json").is_file(), out.stderr[-3000:]
    return out, read_findings(run_dir)


def named(findings: list[Finding], finding_id: str, ranks: tuple[int, ...]) -> Finding:
    """The finding of that id naming exactly those ranks; fails with every finding listed."""
    found = [f for f in findings if f.id == finding_id and f.ranks == ranks]
    assert found, f"no {finding_id} on rank(s) {ranks}: " + "; ".join(f"{f.id} {f.ranks} {f.title}" for f in findings)
    return found[0]


def summary(findings: list[Finding]) -> str:
    return "; ".join(f"{f.id} {f.ranks} {f.role} {f.title}" for f in findings)


# --- demo: the rank records alone ------------------------------------------------------------------

def test_demo_hang_names_the_stuck_rank_its_phase_and_step(tmp_path):
    findings = run_demo(tmp_path, "hang:rank=1,phase=rollout,step=1", steps=3)
    f = named(findings, "hang", (1,))
    assert (f.phase, f.step) == ("rollout", 1)
    assert {int(r): p for r, p in f.evidence["open_phases"].items()}[1] == "rollout"
    assert f.evidence["max_idle_s"] >= 0.9 * float(DIST_TIMEOUT_S)
    assert (leading(findings).id, leading(findings).ranks) == ("hang", (1,)), summary(findings)


def test_demo_desync_names_the_rank_that_called_the_extra_collective_and_both_call_sites(tmp_path):
    findings = run_demo(tmp_path, "desync:rank=1,step=1", steps=3)
    f = named(findings, "collective-mismatch", (1,))
    calls = {int(r): c for r, c in f.evidence["calls"].items()}
    assert calls[1]["op"] == "broadcast_object_list" and calls[1]["site"].startswith("inject.py:")
    assert calls[0]["op"] == "all_gather" and calls[0]["site"].startswith("dist.py:")
    assert (leading(findings).id, leading(findings).ranks) == ("collective-mismatch", (1,)), summary(findings)


def test_demo_host_oom_is_a_host_oom_on_the_rank_with_its_remedies(tmp_path):
    findings = run_demo(tmp_path, "oom:rank=1,step=1", steps=3)
    f = named(findings, "host-oom", (1,))
    assert f.evidence["exc_type"] == "MemoryError" and (f.phase, f.step) == ("forward", 1)
    assert any("ulimit -v" in h for h in f.hints)
    assert (leading(findings).id, leading(findings).ranks) == ("host-oom", (1,)), summary(findings)


def test_demo_slow_rank_is_a_straggler_in_rollout(tmp_path):
    findings = run_demo(tmp_path, "slow:rank=1,delay_s=0.5", steps=3)
    f = named(findings, "straggler", (1,))
    assert f.phase == "rollout" and f.evidence["phases"]["rollout"]["rank_median_s"] >= 0.5
    assert [g.id for g in findings if g.id == "straggler"] == ["straggler"]  # rank 0, which waited, is not one
    assert leading(findings).id == "straggler", summary(findings)


@pytest.mark.parametrize(("spec", "steps", "finding_id", "ranks"), [
    ("crash:rank=1,step=1,how=sigkill", 3, "rank-crash", (1,)),
    ("nan-loss:step=1", 3, "nan-loss", None),
    # constant-reward and seed-collision are found in real runs of ms-swift and TRL (tests/integrations);
    # not run again here, to keep the suite under 30 minutes.
])
def test_demo_faults_that_already_worked_still_lead(tmp_path, spec, steps, finding_id, ranks):
    findings = run_demo(tmp_path, spec, steps)
    lead = leading(findings)
    assert lead.id == finding_id, summary(findings)
    if ranks is not None:
        assert lead.ranks == ranks, summary(findings)


# --- watch: the same faults with stacks ------------------------------------------------------------

def test_watch_desync_names_the_rank_that_called_the_extra_collective(tmp_path):
    out, findings = run_watch(tmp_path, "desync:rank=1,step=1", steps=3, dist_timeout_s="600")
    assert out.returncode == HANG_EXIT, out.stderr[-3000:]
    f = named(findings, "collective-mismatch", (1,))
    calls = {int(r): c for r, c in f.evidence["calls"].items()}
    assert calls[1]["site"].startswith("inject.py:") and calls[0]["site"].startswith("dist.py:")
    assert f.evidence["source"] == "stacks"
    hang = next(g for g in findings if g.id == "hang")
    assert hang.ranks == (1,), summary(findings)  # the odd one, not both
    assert leading(findings).ranks == (1,), summary(findings)


def test_watch_crash_names_the_crashed_rank(tmp_path):
    out, findings = run_watch(tmp_path, "crash:rank=1,step=1", steps=3, dist_timeout_s=DIST_TIMEOUT_S)
    assert out.returncode == 1, out.stderr[-3000:]
    named(findings, "rank-crash", (1,))
    assert (leading(findings).id, leading(findings).ranks) == ("rank-crash", (1,)), summary(findings)
