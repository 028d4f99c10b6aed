"""Run data is inert: escape sequences in phase, host and exception names never reach the terminal
raw (report, summary, watch's notes and panel), and bidi overrides never reach the HTML raw."""
import re
import subprocess
import sys

from helpers import clean_env
from hostile import common, write_rank

from grpo_doctor.logs.terminal_text import terminal_safe, without_bidi_controls
from grpo_doctor.schema import End, EndReason, Error, Header, PhaseBegin, PhaseEnd, Step
from grpo_doctor.supervisor.console import Console

# OSC 52 (write the clipboard), then clear the screen; a window title; a right-to-left override.
OSC52_CLEAR = "\x1b]52;c;ZXZpbA==\x07\x1b[2J"
TITLE = "\x1b]0;pwned\x07"
RLO = "\u202e"
EVIL = f"{OSC52_CLEAR}{RLO}gnp.exe{TITLE}\x9b31m"


def write_evil_run(root):
    run = root / "run"
    for rank in (0, 1):
        host = f"node-{rank}{EVIL}"
        c = lambda step, t, rank=rank, host=host: common(rank, step=step, t=t, host=host)  # noqa: E731
        records = [Header(**c(None, 1.0), local_rank=rank, world_size=2, node_rank=rank, local_world_size=1,
                          gpu_uuid=None, versions={"torch": f"2.6{EVIL}"}, launch={"NCCL_DEBUG": EVIL},
                          argv=["train.py", EVIL])]
        for step in range(3):
            t = 10.0 + step
            records += [PhaseBegin(**c(step, t), phase=f"rollout{EVIL}", path=f"rollout{EVIL}"),
                        PhaseEnd(**c(step, t + 0.5), phase=f"rollout{EVIL}", path=f"rollout{EVIL}",
                                 duration_s=0.5, synced=False),
                        Step(**c(step, t + 0.9), metrics={"loss": 0.1, f"reward{EVIL}": 1.0})]
        if rank == 1:
            records += [PhaseBegin(**c(3, 13.0), phase=f"reward{EVIL}", path=f"reward{EVIL}"),
                        Error(**c(3, 13.5), exc_type=f"Boom{EVIL}Error", message=f"bad {EVIL}",
                              traceback=f"Traceback ...\nBoom{EVIL}Error: bad", phase=f"reward{EVIL}",
                              path=f"reward{EVIL}"),
                        End(**c(3, 13.6), reason=EndReason.EXCEPTION, open_path=f"reward{EVIL}")]
        else:
            records.append(End(**c(3, 13.6), reason=EndReason.EXIT))
        write_rank(run, rank, records)
    return run


def grpo_doctor(*args):
    return subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", *args], env=clean_env(),
                          capture_output=True, timeout=300)


def test_escape_sequences_in_phase_host_and_exception_are_printed_as_text_by_report(tmp_path):
    run = write_evil_run(tmp_path)
    out = grpo_doctor("report", str(run), "--out", str(tmp_path))
    shown = out.stdout + out.stderr
    assert out.returncode == 1, shown.decode(errors="replace")
    assert b"\x1b" not in shown and "\x9b".encode() not in shown and RLO.encode() not in shown
    # Still there to be read: the crash is named, with its exception and phase as escaped text.
    assert b"rank-crash" in out.stdout and b"Boom\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\u202egnp.exe" in out.stdout


def test_escape_sequences_in_run_data_are_printed_as_text_by_summary(tmp_path):
    run = write_evil_run(tmp_path)
    out = grpo_doctor("summary", str(run))
    assert out.returncode == 1, out.stderr.decode(errors="replace")
    assert b"\x1b" not in out.stdout + out.stderr and RLO.encode() not in out.stdout
    assert b"reward\\x1b]52" in out.stdout  # the open phase, readable
    # --json escapes by JSON's own rules, and reads back to the very value recorded.
    as_json = grpo_doctor("summary", str(run), "--json").stdout
    assert b"\x1b" not in as_json and b"\\u001b]52" in as_json


def test_bidi_overrides_from_the_run_never_reach_the_html_raw(tmp_path):
    run = write_evil_run(tmp_path)
    html_path = tmp_path / "report.html"
    grpo_doctor("report", str(run), "--html", str(html_path))
    html = html_path.read_text(encoding="utf-8")
    assert "rank-crash" in html
    for control in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069":
        assert control not in html
    assert "\\u202egnp.exe" in html  # shown, not acted upon


def test_watch_notes_and_panel_show_run_data_as_text(capfd):
    console = Console(tty=True)
    console.note(f"rank 1 in {EVIL} at step 3")
    console.panel([(0, 3, f"rollout{EVIL}", 1.0, None)])
    console.write_child("stdout", f"job's own {TITLE}\n".encode())
    console.close()
    out, err = capfd.readouterr()
    assert out == f"job's own {TITLE}\n"  # the job's output is forwarded byte-exact
    own = re.sub(r"\r\x1b\[\d+A\x1b\[J|\x1b\[[\d;]*m", "", err)  # the console's own: erasing its panel, styles
    assert "\x1b" not in own and "\x07" not in own and RLO not in own, repr(err)
    assert "grpo-doctor: rank 1 in \\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\u202egnp.exe" in own


def test_terminal_safe_writes_every_control_visibly_and_keeps_tabs_and_text():
    assert terminal_safe("loss\t0.1 über 日本") == "loss\t0.1 über 日本"
    assert terminal_safe("a\nb\rc\x00\x7f\x85\u2028\ud800") == "a\\nb\\rc\\x00\\x7f\\x85\\u2028\\ud800"
    assert terminal_safe(OSC52_CLEAR) == "\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J"
    assert without_bidi_controls(f"a{RLO}b\u2067c\u200fد") == "a\\u202eb\\u2067c\u200fد"


def test_an_error_naming_a_path_with_escape_sequences_is_printed_as_text(tmp_path):
    out = grpo_doctor("summary", str(tmp_path / f"run{OSC52_CLEAR}"))
    assert out.returncode == 2
    assert b"\x1b" not in out.stderr and b"run\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J does not exist" in out.stderr
