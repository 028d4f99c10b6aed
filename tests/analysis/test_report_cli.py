import json

import pytest
from helpers import REPO, clean_env
from rundata import LOGS, common, header, write_rank

from grpo_doctor.cli.main import main
from grpo_doctor.schema import End, EndReason, Step


def test_raw_logs_alone_give_findings_exit_1_and_report_and_findings_json_at_out(tmp_path, capsys):
    status = main(["report", str(LOGS / "torchrun_nccl_timeout.log"), "--out", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert status == 1
    # The rank that never joined leads; the timeout it caused follows as its consequence.
    assert out.startswith("CRITICAL rank-crash: rank(s) 7 crashed") and "(root cause)" in out.splitlines()[0]
    assert "  <- rank 7: nccl-timeout:" in out and "fix: " in out
    data = json.loads((tmp_path / "findings.json").read_text())
    assert {f["id"] for f in data["findings"]} >= {"nccl-timeout", "rank-crash"}
    assert "nccl-timeout" in (tmp_path / "r.html").read_text()


def test_a_healthy_run_exits_0_and_writes_findings_json_into_the_run(tmp_path, capsys):
    for rank in (0, 1):
        write_rank(tmp_path, rank, [header(rank, 2), Step(**common(rank, step=0, t=2.0), metrics={"loss": 0.1}),
                                    End(**common(rank, step=0, t=3.0), reason=EndReason.EXIT)])
    assert main(["report", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "findings.json").read_text())
    assert printed["findings"] == [] and printed["schema"] == 1


def test_a_missing_path_exits_2_with_a_one_line_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'nope'} does not exist" in err and "hint:" in err


@pytest.mark.distributed
@pytest.mark.slow
def test_injected_crash_under_torchrun_is_reported_as_rank_crash_on_rank_1(launch_trainer, tmp_path):
    import subprocess
    import sys

    result = launch_trainer(tmp_path / "run", "--steps", "3", "--inject", "crash:rank=1,step=1")
    assert result.returncode != 0, result.explain()
    report = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "report", str(tmp_path / "run"), "--json"],
                            cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert report.returncode == 1, report.stderr
    findings = json.loads(report.stdout)["findings"]
    crash = findings[0]
    assert (crash["id"], crash["severity"], crash["ranks"]) == ("rank-crash", "critical", [1])
    assert (crash["evidence"]["exc_type"], crash["step"], crash["phase"]) == ("RuntimeError", 1, "forward")
