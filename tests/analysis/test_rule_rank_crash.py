import json

from rundata import LOGS, common, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import rank_crash
from grpo_doctor.schema import End, EndReason, Error, PhaseBegin, Step


def _check(*paths):
    return list(rank_crash.check(load_evidence(list(paths)), rank_crash.Config()))


def test_an_exception_is_critical_and_the_sigterm_it_caused_is_collateral(tmp_path):
    write_rank(tmp_path, 0, [header(0, 2), End(**common(0, step=1, t=9.0), reason=EndReason.SIGNAL, signal="SIGTERM")])
    write_rank(tmp_path, 1, [
        header(1, 2), PhaseBegin(**common(1, step=1, t=5.0), phase="backward", path="backward"),
        Error(**common(1, step=1, t=6.0), exc_type="RuntimeError", message="injected crash", traceback="...",
              phase="backward", path="backward"),
        End(**common(1, step=1, t=6.1), reason=EndReason.EXCEPTION),
    ])
    crit, collateral = _check(tmp_path)
    assert (crit.id, crit.severity, crit.ranks, crit.phase, crit.step) == ("rank-crash", "critical", (1,), "backward", 1)
    assert crit.evidence["exc_type"] == "RuntimeError" and crit.hosts == ("node-0",)
    assert (collateral.severity, collateral.ranks, collateral.evidence["signal"]) == ("warning", (0,), "SIGTERM")


def test_a_rank_whose_log_stops_without_an_end_record_is_a_crash_once_the_run_is_over(tmp_path):
    write_rank(tmp_path, 0, [header(0, 2), End(**common(0, step=2, t=9.0), reason=EndReason.EXIT)])
    write_rank(tmp_path, 1, [header(1, 2), Step(**common(1, step=0, t=2.0), metrics={}),
                             PhaseBegin(**common(1, step=1, t=3.0), phase="forward", path="forward")])
    [f] = _check(tmp_path)
    assert (f.ranks, f.phase, f.step, f.severity) == ((1,), "forward", 1, "critical")


def test_torchrun_child_failed_lines_give_signal_and_exitcode():
    findings = _check(LOGS / "torchrun_nccl_timeout.log")
    by_rank = {r: f for f in findings for r in f.ranks}
    assert by_rank[7].evidence["signal"] == "SIGKILL" and by_rank[7].evidence["exitcode"] == -9
    assert by_rank[3].evidence["signal"] == "SIGABRT" and by_rank[3].hosts == ("node-1",)
    assert any("OOM killer" in h for h in by_rank[7].hints) and not any("OOM killer" in h for h in by_rank[3].hints)
    assert any("nccl-timeout" in h for h in by_rank[3].hints)


def test_a_peer_lost_exception_on_the_survivor_is_collateral_of_the_first_crash(tmp_path):
    write_rank(tmp_path, 0, [header(0, 2), Error(**common(0, step=1, t=7.0), exc_type="RuntimeError",
                                                 message="[gloo/pair.cc:553] Connection closed by peer [127.0.0.1]:1",
                                                 traceback="", phase="forward", path="forward"),
                             End(**common(0, step=1, t=7.1), reason=EndReason.EXCEPTION)])
    write_rank(tmp_path, 1, [header(1, 2), Error(**common(1, step=1, t=6.0), exc_type="RuntimeError",
                                                 message="injected crash", traceback="", phase="forward",
                                                 path="forward"),
                             End(**common(1, step=1, t=6.1), reason=EndReason.EXCEPTION)])
    crit, collateral = _check(tmp_path)
    assert (crit.severity, crit.ranks) == ("critical", (1,))
    assert (collateral.severity, collateral.ranks) == ("warning", (0,))


def test_ranks_stopped_by_sigterm_are_not_crashes_after_watch_ended_a_hang(tmp_path):
    run_dir = tmp_path / "run"
    for rank in (0, 1):
        write_rank(run_dir, rank, [header(rank, 2), PhaseBegin(**common(rank, step=3), phase="reward", path="reward"),
                                   End(**common(rank, step=3), reason=EndReason.SIGNAL, signal="SIGTERM",
                                       open_path="reward")])
    stopped = list(rank_crash.check(load_evidence([run_dir]), rank_crash.Config()))
    assert [f.severity for f in stopped] == ["warning"] and "stopped from outside" in stopped[0].title
    host_dir = run_dir / "supervisor" / "node-0"
    host_dir.mkdir(parents=True)
    (host_dir / "summary.json").write_text(json.dumps({"host": "node-0", "hang_ended_by_watch": True, "ranks": {}}))
    assert list(rank_crash.check(load_evidence([run_dir]), rank_crash.Config())) == []


def test_ranks_watch_saw_leave_after_a_clean_end_are_not_crashes(tmp_path):
    run_dir = tmp_path / "run"
    for rank in (0, 1):
        write_rank(run_dir, rank, [header(rank, 2), End(**common(rank, step=5), reason=EndReason.SHUTDOWN)])
    host_dir = run_dir / "supervisor" / "node-0"
    host_dir.mkdir(parents=True)
    ranks = {str(r): {"ended": "shutdown", "error": None, "gone": "ended (shutdown)", "step": 5} for r in (0, 1)}
    (host_dir / "summary.json").write_text(json.dumps({"host": "node-0", "hang_ended_by_watch": False,
                                                       "ranks": ranks}))
    assert list(rank_crash.check(load_evidence([run_dir]), rank_crash.Config())) == []


def test_a_hung_rank_watch_stopped_before_it_wrote_its_end_is_the_hang_not_a_crash(tmp_path):
    """The rank stuck in rollout wrote no end record before watch ended the job (it was killed after the
    grace period, or too stuck to run its handler): the hang explains it; a crash would lead instead."""
    run_dir = tmp_path / "run"
    write_rank(run_dir, 0, [header(0, 2), PhaseBegin(**common(0, step=3), phase="reward", path="reward"),
                            End(**common(0, step=3), reason=EndReason.SIGNAL, signal="SIGTERM", open_path="reward")])
    write_rank(run_dir, 1, [header(1, 2), PhaseBegin(**common(1, step=3), phase="rollout", path="rollout")])
    host_dir = run_dir / "supervisor" / "node-0"
    host_dir.mkdir(parents=True)
    summary = {"host": "node-0", "hang_ended_by_watch": False, "ranks": {}}
    (host_dir / "summary.json").write_text(json.dumps(summary))
    assert [f.ranks for f in _check(run_dir) if f.severity == "critical"] == [(1,)]  # no hang: a crash
    (host_dir / "summary.json").write_text(json.dumps(summary | {"hang_ended_by_watch": True}))
    assert _check(run_dir) == []


def test_a_broken_pipe_printed_at_exit_does_not_make_a_ranks_own_crash_collateral(tmp_path):
    # Found in review: rank 1 failed on its own ValueError, then a logging flush at exit printed
    # "BrokenPipeError: [Errno 32] Broken pipe", the last traceback of its torchrun lines. Read as a lost
    # peer, it made the real crash "stopped from outside" and left the run with no root cause.
    write_rank(tmp_path, 0, [header(0, 2), End(**common(0, step=2, t=9.0), reason=EndReason.SIGNAL, signal="SIGTERM")])
    write_rank(tmp_path, 1, [
        header(1, 2), PhaseBegin(**common(1, step=2, t=5.0), phase="reward", path="reward"),
        Error(**common(1, step=2, t=6.0), exc_type="ValueError", message="reward tensor has shape (8,) but 16 "
              "completions were generated", traceback="...", phase="reward", path="reward"),
        End(**common(1, step=2, t=6.1), reason=EndReason.EXCEPTION)])
    log = tmp_path / "torchrun.log"
    log.write_text(
        '[rank1]: Traceback (most recent call last):\n[rank1]:   File "/work/train.py", line 8, in main\n'
        "[rank1]:     compute_rewards(batch)\n"
        "[rank1]: ValueError: reward tensor has shape (8,) but 16 completions were generated\n"
        "[rank1]: Exception ignored in: <_io.TextIOWrapper name='<stdout>' mode='w' encoding='utf-8'>\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/usr/lib/python3.10/logging/__init__.py", line 1104, in emit\n'
        "[rank1]:     self.flush()\n[rank1]: BrokenPipeError: [Errno 32] Broken pipe\n"
        "E1128 10:00:02.000000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 1 (pid: 1001) of binary: /usr/bin/python3\n")
    findings = _check(tmp_path, log)
    crit = [f for f in findings if f.severity == "critical"]
    assert [(f.ranks, f.evidence["exc_type"]) for f in crit] == [((1,), "ValueError")], findings
