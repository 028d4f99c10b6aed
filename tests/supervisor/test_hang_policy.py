"""The hang policy, the headline of watch, on a fake clock: learned timeouts, the floor, a phase never
seen to finish, the gap between phases, ended ranks, and how often one stall is investigated."""
import json
import subprocess
import sys
import textwrap

from analysis.rundata import common, header, write_rank
from helpers import clean_env

from grpo_doctor.schema import End, EndReason, PhaseBegin, PhaseEnd, RunPaths, Step
from grpo_doctor.supervisor.progress import HangPolicy, ProgressTracker
from grpo_doctor.supervisor.stall import StallSchedule


def _phase(rank, name, begin_mono, end_mono, step=0):
    return [PhaseBegin(**common(rank, step=step, t=begin_mono), phase=name, path=name),
            PhaseEnd(**common(rank, step=step, t=end_mono), phase=name, path=name,
                     duration_s=end_mono - begin_mono, synced=False)]


def _tracker(tmp_path, policy: HangPolicy | None = None):
    tracker = ProgressTracker(RunPaths(tmp_path), policy or HangPolicy())
    tracker.poll(now_mono=1000.0)  # every record seen at supervisor time 1000
    return tracker


def test_the_default_policy_has_a_30_s_floor_a_factor_of_5_and_300_s_for_an_unseen_phase():
    policy = HangPolicy()
    assert policy.timeout_s(None) == 300.0
    assert policy.timeout_s(2.0) == 30.0  # 5 x 2 s is below the floor
    assert policy.timeout_s(10.0) == 50.0
    assert HangPolicy(fixed_s=7.0).timeout_s(100.0) == 7.0


def test_a_rank_stalls_after_factor_times_the_longest_interval_seen_in_its_open_phase(tmp_path):
    # Rollouts took 2 s and 12 s; rank 0 is in its third rollout now.
    records = [header(0), *_phase(0, "rollout", 100.0, 102.0), *_phase(0, "rollout", 103.0, 115.0),
               PhaseBegin(**common(0, step=2, t=116.0), phase="rollout", path="rollout")]
    write_rank(tmp_path, 0, records)
    tracker = _tracker(tmp_path)
    assert tracker.timeout_s(tracker.ranks[0]) == 60.0  # 5 x the longest interval (12 s)
    assert tracker.stalled(1000.0 + 59.0) == {}
    assert tracker.stalled(1000.0 + 61.0) == {0: 61.0}


def test_a_phase_never_seen_to_finish_waits_300_s(tmp_path):
    write_rank(tmp_path, 0, [header(0), PhaseBegin(**common(0, t=101.0), phase="load_model", path="load_model")])
    tracker = _tracker(tmp_path)
    assert 0 not in tracker.stalled(1000.0 + 299.0) and tracker.stalled(1000.0 + 301.0) == {0: 301.0}


def test_between_phases_before_a_whole_step_short_gaps_do_not_shorten_the_wait(tmp_path):
    # Outside any phase only 1 s gaps were seen, and one step: an unmarked checkpoint save or the
    # first evaluation may take minutes, and nothing yet says how long a step takes.
    records = [header(0), *_phase(0, "rollout", 100.0, 101.0), Step(**common(0, t=102.0), metrics={}),
               *_phase(0, "rollout", 103.0, 104.0)]
    write_rank(tmp_path, 0, records)
    tracker = _tracker(tmp_path)
    assert tracker.ranks[0].open_path is None
    assert tracker.timeout_s(tracker.ranks[0]) == 300.0
    assert tracker.stalled(1000.0 + 200.0) == {}


def test_between_phases_after_whole_steps_the_wait_is_learned_from_the_longest_step(tmp_path):
    # Steps of 4 s and 9 s (a reward function --instrument does not wrap runs between collectives):
    # a rank stuck after its last collective stalls after 5 x 9 s, not after 300 s, and says which
    # phase it left.
    records = [header(0)]
    for step, (begin, end) in enumerate([(100.0, 104.0), (104.0, 113.0), (113.0, 115.0)]):
        records += [*_phase(0, "all_gather", begin, begin + 0.5, step=step), Step(**common(0, step=step, t=end), metrics={})]
    records += _phase(0, "all_gather", 115.5, 116.0, step=3)
    write_rank(tmp_path, 0, records)
    tracker = _tracker(tmp_path)
    progress = tracker.ranks[0]
    assert progress.open_path is None and progress.last_left == "all_gather"
    assert tracker.timeout_s(progress) == 45.0
    assert tracker.stalled(1000.0 + 44.0) == {} and tracker.stalled(1000.0 + 46.0) == {0: 46.0}


def test_a_rank_that_ended_never_stalls(tmp_path):
    write_rank(tmp_path, 0, [header(0), *_phase(0, "rollout", 100.0, 101.0),
                             End(**common(0, t=102.0), reason=EndReason.EXIT)])
    tracker = _tracker(tmp_path, HangPolicy(fixed_s=1.0))
    assert tracker.running() == [] and tracker.stalled(1000.0 + 10_000.0) == {}


def test_one_stall_is_investigated_once_then_only_as_it_grows_fourfold_at_most_three_times():
    schedule = StallSchedule()
    key = ((0, 12), (1, 9))
    looks = [t for t in range(30, 10_000) if schedule.due(key, float(t))]
    assert looks == [30, 120, 480]
    assert schedule.due(((0, 13), (1, 9)), 31.0)  # progress, then a new stall: looked at at once


def test_a_stalled_rank_that_keeps_printing_is_investigated_once_not_every_loop(tmp_path):
    # Rank 0 stays in `reward` and prints twice a second for 4 s: its output is not progress.
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        import time
        import grpo_doctor as gd
        gd.init()
        with gd.phase("rollout"):
            pass
        with gd.phase("reward"):
            for i in range(8):
                print("still scoring", i, flush=True)
                time.sleep(0.5)
    """))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), "--hang-timeout", "1",
           "--second-look", "0", "--no-report", "--", sys.executable, str(job)]
    out = subprocess.run(cmd, env=clean_env(RANK="0", WORLD_SIZE="1"), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    hangs = sorted((run_dir / "supervisor").glob("*/hang-*.json"))
    # Looks at about 1 s of idle time, then at 4 s: never one per loop (the old key changed with output).
    assert 1 <= len(hangs) <= 2, [json.loads(p.read_text()).get("max_idle_s") for p in hangs]
    assert out.stderr.count("taking the stacks") == len(hangs)
