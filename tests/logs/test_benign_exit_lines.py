"""Exit lines that say nothing failed (found in review): a tool's CalledProcessError, kubectl exec's status,
a PID's exit, Ray's notice of an actor's normal end. None is a crash; the real failures stay read."""
from __future__ import annotations

from pathlib import Path

import pytest

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules

BENIGN = {
    "git": "fatal: not a git repository\nWARNING: subprocess.CalledProcessError: Command '['git', 'rev-parse', "
           "'HEAD']' returned non-zero exit status 128.\n",
    "which": "Command '['which', 'nvcc']' returned non-zero exit status 1.\n",
    "pid": "Process 23814 terminated with exit code 1\n",
    "ray-end": "[2024-05-01 10:11:19,866 I 2122527 2122927] actor_manager.cc:139: received notification on actor, "
               "state: DEAD, actor_id: 633c65fbc45b072368cc3bfd01000000, ip address: 10.0.0.2, port: 44673, "
               "num_restarts: 0, death context type=ActorDiedErrorContext\n",
    "kubectl-exec": "command terminated with exit code 1\n",
}

ACCELERATE = ('Traceback (most recent call last):\n'
              '  File "/usr/local/bin/accelerate", line 8, in <module>\n    sys.exit(main())\n'
              '  File "/usr/local/lib/python3.10/site-packages/accelerate/commands/launch.py", line 1106, in '
              'launch_command\n    simple_launcher(args)\n'
              "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned non-zero exit "
              "status 1.\n")


def _findings(text: str, tmp_path: Path):
    log = tmp_path / "x.log"
    log.write_text(text, encoding="utf-8")
    return run_rules(load_evidence([log]))[0]


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_a_benign_exit_line_is_no_crash(name, tmp_path):
    assert [f.id for f in _findings(BENIGN[name], tmp_path)] == []


def test_a_launchers_called_process_error_is_a_crash_said_in_words(tmp_path):
    crashes = [f for f in _findings(ACCELERATE, tmp_path) if f.id == "rank-crash"]
    assert crashes and all("died on the launched" not in f.title for f in crashes)
    assert any("CalledProcessError (exit status 1)" in f.title for f in crashes)
