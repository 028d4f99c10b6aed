"""The shell's "Killed": its command died of SIGKILL with no traceback, most often the kernel's OOM killer.
Real lines: a training run killed after loading embeddings (the corpus's other/progress-bar-then-killed-no-traceback)
and bash's job line."""
import pytest

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.logs.exit_lines import parse_shell_killed


@pytest.mark.parametrize("line", ["Killed", "./run_grpo.sh: line 12: 48211 Killed                  python train.py --bs 64"])
def test_the_shells_killed_line_is_a_sigkill_with_a_host_oom_suspected(line):
    found = parse_shell_killed(line)
    assert found is not None and (found["exc_type"], found["suspected"]) == ("SIGKILL", "host-oom")


@pytest.mark.parametrize("line", ["Killed 3 stale workers before the next epoch", "INFO: Killed: 0", "Not Killed"])
def test_killed_inside_a_sentence_is_nobodys_death(line):
    assert parse_shell_killed(line) is None


def test_a_log_that_ends_in_killed_leads_with_a_crash_whose_first_hint_is_the_oom_killer(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("100%|██████████| 3000001/3000001 [03:33<00:00, 14061.26it/s]\nKilled\n")
    [crash] = run_rules(load_evidence([log]))[0]
    assert (crash.id, crash.severity) == ("rank-crash", "critical")
    assert "OOM killer" in crash.hints[0]
