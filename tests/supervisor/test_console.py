"""watch's live panel as a user's terminal, a CI log and a `| tee` see it: colour, width, plain lines."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import clean_env
from rich.cells import cell_len

from grpo_doctor.supervisor.console import Console

ERASE = re.compile(r"\r\x1b\[\d+A\x1b\[J")  # the panel's own erasing before it is drawn again
STYLE = re.compile(r"\x1b\[[\d;]*m")
ROWS = [
    (0, 1200, "rollout/generate", 3.0, 21 * 2**30),
    (1, 1199, "train/backward/all_reduce_gradients/bucket_17/wait", 95.0, None),
    (2, None, "exited with status 1", None, None),
    (3, 1200, "奖励/计算 reward model scoring", 61.0, 512 * 2**20),
]


def _panel_text(capfd, rows=ROWS) -> str:
    console = Console(tty=True)
    console.panel(rows)
    console.panel(rows)  # a redraw: erase, then draw
    console.close()
    return capfd.readouterr().err


def test_no_color_leaves_no_style_code_on_a_terminal(capfd, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    err = _panel_text(capfd)
    assert "grpo-doctor watch: 4 rank(s)" in err and "rollout/generate" in err
    assert "\x1b" not in ERASE.sub("", err), repr(err)


def test_without_no_color_the_stalled_ranks_are_marked_in_colour(capfd, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    err = _panel_text(capfd)
    assert "\x1b[33m" in err  # yellow: idle 95 s and 61 s, past STALLED_S
    assert "95" in STYLE.sub("", err)


@pytest.mark.parametrize("columns", [60, 40, 120])
def test_no_panel_line_is_wider_than_the_terminal(capfd, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    lines = STYLE.sub("", ERASE.sub("", _panel_text(capfd))).splitlines()
    assert len(lines) == 2 * 6  # title, header, 4 ranks; drawn twice
    assert max(cell_len(line) for line in lines) <= columns, lines
    if columns >= 60:
        # The figures stay whole; the long phase is the one cut, with an ellipsis.
        assert any(line.split()[:2] == ["1", "1199"] and line.rstrip().endswith("-") for line in lines), lines
        assert any("…" in line for line in lines)


def test_a_short_terminal_gets_fewer_rows_and_a_count_of_the_rest(capfd, monkeypatch):
    monkeypatch.setenv("LINES", "8")
    monkeypatch.setenv("NO_COLOR", "1")
    rows = [(r, 10, "rollout", 1.0, None) for r in range(40)]
    lines = ERASE.sub("", _panel_text(capfd, rows)).splitlines()
    assert lines[:2] == ["grpo-doctor watch: 40 rank(s)", lines[1]] and lines[1].split()[:2] == ["rank", "step"]
    assert lines[-1] == "... 36 more" and len(lines) == 2 * 7  # 7 lines fit above the cursor's in 8


def test_phase_names_are_shown_as_text_not_as_markup(capfd, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    err = _panel_text(capfd, [(0, 1, "[bold red]x[/] \x1b[2J", 1.0, None)])
    assert "[bold red]x[/] \\x1b[2J" in err


def test_without_a_terminal_there_is_no_panel_only_plain_status_lines(capfd):
    console = Console()  # stdout and stderr are pytest's captures here, not terminals
    assert console.tty is False
    console = Console(plain_every_s=0.0)
    console.note("watching pid 42")
    console.panel(ROWS)
    console.close()
    out, err = capfd.readouterr()
    assert out == "" and "\x1b" not in err
    assert err.splitlines() == [
        "grpo-doctor: watching pid 42",
        "grpo-doctor: 4 rank(s), step 1199-1200, longest without progress: rank 1 95 s",
    ]


def test_a_closed_stderr_loses_the_note_but_raises_nothing(monkeypatch, tmp_path):
    closed = open(tmp_path / "stderr", "w")  # noqa: SIM115
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)
    console = Console(tty=True)
    console.note("rank 3 is gone")
    console.panel(ROWS)
    console.close()


def test_without_rich_the_panel_falls_back_to_plain_fixed_width_lines():
    code = ("import sys; sys.modules['rich'] = None\n"  # as if rich were not installed
            "from grpo_doctor.supervisor.panel import panel_lines\n"
            "print('\\n'.join(panel_lines([(0, 7, 'rollout', 2.0, None)])))")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(COLUMNS="60", NO_COLOR="1"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "grpo-doctor watch: 1 rank(s)"
    assert out.stdout.splitlines()[2].split() == ["0", "7", "rollout", "2", "-"]


JOB = """
import time, grpo_doctor as gd
gd.init()
for n in range(3):
    with gd.phase("rollout/generate_a_long_phase_name_that_cannot_fit_in_sixty_columns"):
        print(f"step {n}", flush=True)
        time.sleep(1.0)
    gd.step(n, loss=0.1)
gd.shutdown()
"""


def _watch_on_a_pty(tmp_path: Path, **env: str) -> str:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    primary, secondary = pty.openpty()
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(tmp_path / "run"), "--",
           sys.executable, str(job)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary, cwd=tmp_path,
                            env=clean_env(OMP_NUM_THREADS="1", TERM="xterm-256color", **env))
    os.close(secondary)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if select.select([primary], [], [], 0.5)[0]:
            try:
                data = os.read(primary, 65536)
            except OSError:  # EIO: every writer of the terminal has gone
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(primary)
    return b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def test_watch_on_a_narrow_colourless_terminal_draws_a_panel_within_its_width(tmp_path):
    text = _watch_on_a_pty(tmp_path, COLUMNS="60", NO_COLOR="1")
    assert "grpo-doctor watch: 1 rank(s)" in text, text
    assert ERASE.search(text)  # the panel was drawn and erased again over the job's output
    assert "\x1b" not in ERASE.sub("", text), repr(text)
    panel = [line for line in ERASE.sub("\n", text).splitlines() if "rollout/generate" in line]
    assert panel and max(cell_len(line) for line in panel) <= 60, panel
    assert "step 2" in text


def test_watch_piped_into_tee_writes_plain_lines(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(tmp_path / "run"), "--",
           sys.executable, str(job)]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=clean_env(OMP_NUM_THREADS="1", TERM="xterm-256color"))
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout + out.stderr
    assert out.stdout.splitlines() == ["step 0", "step 1", "step 2"]
    assert all(line.startswith("grpo-doctor: ") for line in out.stderr.splitlines()), out.stderr
