"""The habits users bring from torchrun, py-spy and git, held by the real `grpo-doctor` command:
help that shows defaults, timeouts in seconds under one spelling, `--out DIR` for every command's
files, --debug after the command, a closed pipe that ends quietly, a flag that beats the
environment, watch's last line stating its exit status, and rank-side messages through logging."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env, write_program, write_rank

from grpo_doctor.cli.help_format import shows_default
from grpo_doctor.cli.main import build_parser
from grpo_doctor.schema import End, EndReason, Header, PhaseBegin, PhaseEnd, Step

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def grpo_doctor(*args: str, cwd=None, timeout_s: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", *args], env=clean_env(**env), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout_s)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"grpo-doctor": parser, **sub.choices}


def options(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if action.option_strings and action.help is not argparse.SUPPRESS and not isinstance(
                action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            yield action


def two_rank_run(root: Path, num_ranks: int = 2) -> Path:
    run = root / "run"
    for rank in range(num_ranks):
        c = {"rank": rank, "host": "node-0", "pid": 100 + rank, "t": 1.0, "mono": 1.0}
        write_rank(run, rank, [
            Header(**c, step=None, local_rank=rank, world_size=num_ranks, node_rank=0, local_world_size=num_ranks,
                   gpu_uuid=None, versions={}, launch={}, argv=["train.py"]),
            PhaseBegin(**c, step=0, phase="rollout", path="rollout"),
            PhaseEnd(**c, step=0, phase="rollout", path="rollout", duration_s=0.1, synced=False),
            Step(**c, step=0, metrics={"loss": 0.5}),
            End(**c, step=0, reason=EndReason.EXIT),
        ])
    return run


# -- help ------------------------------------------------------------------------------------------

def test_every_option_of_every_command_has_help_that_shows_its_default():
    for name, parser in subcommands().items():
        formatter = parser._get_formatter()
        for action in options(parser):
            flag = f"{name} {action.option_strings[-1]}"
            assert action.help, f"{flag} has no help"
            text = formatter._get_help_string(action) % {"default": action.default}
            if shows_default(action):
                default = action.default
                shown = {str(default)} | ({f"{default:g}"} if isinstance(default, float) else set())
                assert "default" in text and any(s in text for s in shown), f"{flag}: {text!r} hides {default!r}"
    assert "(default: 600.0)" in grpo_doctor("watch", "--help").stdout  # --uninstrumented-timeout, rendered


def test_every_timeout_is_spelled_dash_timeout_in_seconds_and_old_spellings_still_work():
    for name, parser in subcommands().items():
        for action in options(parser):
            for flag in (f for f in action.option_strings if "timeout" in f):
                assert flag.endswith("-timeout"), f"{name} {flag}"
                assert action.metavar == "SECONDS" or "seconds" in action.help, f"{name} {flag}: unit not said"
    demo = subcommands()["demo"]
    old = demo.parse_args(["--timeout-s", "30", "--dist-timeout-s", "20"])
    assert (old.run_timeout, old.dist_timeout) == (30.0, 20.0)
    assert "--timeout-s" not in demo.format_help()  # hidden: accepted, not advertised
    new = demo.parse_args([])
    assert (new.run_timeout, new.dist_timeout) == (900.0, 60.0)


def test_debug_is_accepted_after_the_command_too(tmp_path):
    missing = str(tmp_path / "missing")
    quiet = grpo_doctor("summary", missing)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    for argv in (["--debug", "summary", missing], ["summary", missing, "--debug"]):
        loud = grpo_doctor(*argv)
        assert "Traceback" in loud.stderr and "RunDirError" in loud.stderr, argv


# -- errors ----------------------------------------------------------------------------------------

def test_an_error_of_any_part_is_one_line_and_a_hint_with_status_2(tmp_path):
    # RuleSettingsError (analysis), RunDirError (runlog): main() prints them alike, no command translates.
    settings = grpo_doctor("report", str(LOGS / "host_oom.log"), "--rules-config", str(tmp_path / "no.toml"),
                           "--out", str(tmp_path / "out"))
    assert settings.returncode == 2, settings.stderr
    assert settings.stderr.splitlines()[0] == f"grpo-doctor: error: --rules-config {tmp_path / 'no.toml'} does not exist"
    assert settings.stderr.splitlines()[1].startswith("  hint: ") and "Traceback" not in settings.stderr
    assert not (tmp_path / "out").exists()


def test_every_user_facing_error_is_a_doctor_error():
    from grpo_doctor.cli.errors import UserError
    from grpo_doctor.logs.flight_recorder import FlightDumpError
    from grpo_doctor.probe.settings import SettingsError
    from grpo_doctor.report.rule_settings import RuleSettingsError
    from grpo_doctor.runlog.eventlog import RunDirError
    from grpo_doctor.schema.errors import DoctorError
    from grpo_doctor.supervisor.launch import LaunchError
    from grpo_doctor.supervisor.run_files import RunDirBusy

    for cls in (RuleSettingsError, UserError, FlightDumpError, SettingsError, RunDirError, LaunchError, RunDirBusy):
        assert issubclass(cls, DoctorError), cls
    assert LaunchError.exit_status == 127 and SettingsError("x").hint  # a class-wide hint


# -- --out ---------------------------------------------------------------------------------------

def test_report_out_is_the_directory_for_both_files(tmp_path):
    out = grpo_doctor("report", str(LOGS / "host_oom.log"), "--out", str(tmp_path / "verdict"), cwd=tmp_path)
    assert out.returncode in (0, 1), out.stderr
    assert sorted(p.name for p in (tmp_path / "verdict").iterdir()) == ["findings.json", "report.html"]
    assert not (tmp_path / "findings.json").exists()
    page = grpo_doctor("report", str(LOGS / "host_oom.log"), "--out", str(tmp_path / "verdict"),
                       "--html", str(tmp_path / "page.html"), cwd=tmp_path)
    assert page.returncode in (0, 1) and (tmp_path / "page.html").is_file()


def test_report_never_overwrites_a_findings_json_it_was_not_told_to_write(tmp_path):
    theirs = tmp_path / "findings.json"
    theirs.write_text(json.dumps({"schema": 1, "run": ["another-run"], "findings": []}))
    before = theirs.read_text()
    for extra in ([], ["--out", str(tmp_path / "report.html")]):  # the default, and the old --out FILE spelling
        out = grpo_doctor("report", str(LOGS / "host_oom.log"), *extra, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert f"{'findings.json' if not extra else theirs} exists and is not a report of" in out.stderr
        assert "--out DIR" in out.stderr and theirs.read_text() == before
    again = grpo_doctor("report", str(LOGS / "host_oom.log"), "--out", str(tmp_path), cwd=tmp_path)  # told: written
    assert again.returncode in (0, 1) and json.loads(theirs.read_text())["run"] == [str(LOGS / "host_oom.log")]


def test_report_out_given_a_page_name_still_works_and_says_what_it_means(tmp_path):
    out = grpo_doctor("report", str(LOGS / "host_oom.log"), "--out", str(tmp_path / "r.html"))
    assert out.returncode in (0, 1), out.stderr
    assert (tmp_path / "r.html").is_file() and (tmp_path / "findings.json").is_file()
    assert "--out now names a directory" in out.stderr


# -- pipes, environment --------------------------------------------------------------------------

def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    run = two_rank_run(tmp_path, num_ranks=64)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line, as `| head -1` is after its first
    try:
        proc = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "summary", "--json", str(run)],
                              env=clean_env(), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.stderr == "" and proc.returncode == 141  # 128 + SIGPIPE, as the shell reports `yes | head -1`
    shell = subprocess.run(f"{sys.executable} -m grpo_doctor.cli.main summary --json {run} | head -1",
                           shell=True, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert shell.stdout == "{\n" and shell.stderr == ""


def test_rank_side_messages_go_through_logging_and_are_shown_by_default(tmp_path):
    source = """
        import logging, sys
        import grpo_doctor as gd
        if sys.argv[1:] == ["configured"]:
            logging.basicConfig(format="app %(name)s %(levelname)s %(message)s")
        gd.step("x")
        gd.step("x")
    """
    prog = write_program(tmp_path, source)
    plain = subprocess.run([sys.executable, str(prog)], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert plain.stderr.splitlines() == ["grpo-doctor: step('x') ignored: a step must be a whole number"]
    configured = subprocess.run([sys.executable, str(prog), "configured"], env=clean_env(), capture_output=True,
                                text=True, timeout=60)
    # The program's own logging shows it, once: the default handler stood aside.
    assert configured.stderr.splitlines() == [
        "app grpo_doctor WARNING grpo-doctor: step('x') ignored: a step must be a whole number"]


# -- watch -----------------------------------------------------------------------------------------

def test_watch_of_a_missing_command_leaves_no_run_directory(tmp_path):
    out = grpo_doctor("watch", "--run-dir", str(tmp_path / "run"), "--", "no-such-launcher", cwd=tmp_path)
    assert out.returncode == 127
    assert out.stderr.splitlines()[0] == "grpo-doctor: error: command not found: 'no-such-launcher'"
    assert not (tmp_path / "run").exists() and list(tmp_path.iterdir()) == []


def test_watch_says_its_exit_status_last(tmp_path):
    own = grpo_doctor("watch", "--run-dir", str(tmp_path / "a"), "--no-report", "--",
                      sys.executable, "-c", "raise SystemExit(7)")
    assert own.returncode == 7 and own.stderr.splitlines()[-1] == "grpo-doctor: exit status 7: the command's own"
    job = write_program(tmp_path, """
        import time, grpo_doctor as gd
        gd.init()
        gd.step(0)
        with gd.phase("rollout"):
            time.sleep(600)
    """)
    hung = grpo_doctor("watch", "--run-dir", str(tmp_path / "b"), "--hang-timeout", "2", "--second-look", "0.5",
                       "--on-hang", "kill", "--no-report", "--", sys.executable, str(job), timeout_s=180)
    assert hung.returncode == 124, hung.stderr[-2000:]
    assert hung.stderr.splitlines()[-1] == "grpo-doctor: exit status 124: the job hung and watch ended it (--on-hang kill)"


@pytest.mark.parametrize("flag", ["--hang-timeout", "--uninstrumented-timeout", "--second-look"])
def test_watch_flags_in_seconds_reject_a_negative_value_in_one_line(tmp_path, flag):
    out = grpo_doctor("watch", "--run-dir", str(tmp_path / "run"), flag, "-1", "--", "true")
    assert out.returncode == 2 and out.stderr.startswith(f"grpo-doctor: error: {flag} -1 must be positive")
    assert not (tmp_path / "run").exists()
