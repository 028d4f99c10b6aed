"""`grpo-doctor summary --follow`: ends by itself once the run has ended, prints a new table only
when the run changed (not a terminal) or redraws in place (a terminal), and gives up on a run
that went quiet; every wait is bounded."""
import io
import json
import os
import threading
import time
from pathlib import Path

from helpers import write_rank

from grpo_doctor.cli.main import main
from grpo_doctor.cli.summary import follow
from grpo_doctor.schema import End, EndReason, Header, PhaseBegin, PhaseEnd, RunPaths, Step

DATA = Path(__file__).parents[1] / "data"


def common(rank, step, t):
    return dict(rank=rank, host="node-0", pid=100 + rank, step=step, t=t, mono=t)


def start_run(root: Path) -> Path:
    """Two ranks that have begun rollout at step 0 (a live run: no end record)."""
    run = root / "run"
    for rank in (0, 1):
        write_rank(run, rank, [Header(**common(rank, None, time.time()), local_rank=rank, world_size=2, node_rank=0,
                                      local_world_size=2, gpu_uuid=None, versions={}, launch={}, argv=["train.py"]),
                               PhaseBegin(**common(rank, 0, time.time()), phase="rollout", path="rollout")])
    return run


def append(run: Path, make) -> None:
    for rank in (0, 1):
        with RunPaths(run).rank_file(rank).open("a") as f:
            f.write("".join(json.dumps(r.to_dict()) + "\n" for r in make(rank)))  # whole lines: no torn read


def grow_then_end(run: Path, pause_s: float) -> None:
    time.sleep(pause_s)
    append(run, lambda r: [PhaseEnd(**common(r, 0, time.time()), phase="rollout", path="rollout", duration_s=0.1,
                                    synced=False), Step(**common(r, 0, time.time()), metrics={})])
    time.sleep(pause_s)
    append(run, lambda r: [End(**common(r, 0, time.time()), reason=EndReason.EXIT)])


def test_follow_on_a_finished_run_prints_once_and_ends_by_itself(capsys):
    start = time.monotonic()
    status = main(["summary", str(DATA / "inject" / "watch_hang"), "--follow", "--interval", "0.05"])
    out = capsys.readouterr().out
    assert status == 1 and out.startswith("-- ") and out.count("\n-- ") == 0 and "signal SIGTERM" in out
    assert time.monotonic() - start < 5


def test_follow_prints_a_new_table_each_time_the_run_changes_until_every_rank_ended(tmp_path):
    run = start_run(tmp_path)
    writer = threading.Thread(target=grow_then_end, args=(run, 0.4))
    writer.start()
    out = io.StringIO()  # not a terminal
    status = follow([str(run)], interval_s=0.05, quiet_timeout_s=10, out=out)
    writer.join(timeout=10)
    blocks = out.getvalue().split("-- ")[1:]
    assert status == 0 and 2 <= len(blocks) <= 3  # started, (a step done,) ended: not one per read
    assert "rollout" in blocks[0] and "no end record" in blocks[0]
    assert [" exit " in line for line in blocks[-1].splitlines()[3:]] == [True, True]


def test_follow_gives_up_on_a_run_that_went_quiet(tmp_path, capsys):
    run = start_run(tmp_path)  # no end record ever comes
    status = main(["summary", str(run), "--follow", "--interval", "0.05", "--quiet-timeout", "0.3"])
    captured = capsys.readouterr()
    assert status == 1 and "nothing new in the run for 0.3 s" in captured.err  # 1: no rank ended
    assert captured.out.count("-- ") == 1


def test_follow_on_a_terminal_redraws_in_place(tmp_path):
    run = start_run(tmp_path)
    writer = threading.Thread(target=grow_then_end, args=(run, 0.3))
    writer.start()
    primary, secondary = os.openpty()
    with os.fdopen(secondary, "w") as terminal:
        status = follow([str(run)], interval_s=0.05, quiet_timeout_s=10, out=terminal)
    writer.join(timeout=10)
    os.set_blocking(primary, False)
    shown = b""
    try:
        while chunk := os.read(primary, 65536):
            shown += chunk
    except (BlockingIOError, OSError):
        pass
    os.close(primary)
    text = shown.decode()
    assert status == 0 and text.count("\x1b[J") >= 3 and "\x1b[5F" in text  # cursor back over the 5 lines drawn
    assert text.rstrip().endswith("the run has ended")
