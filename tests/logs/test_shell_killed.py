"""The shell's "Killed": its command died of SIGKILL with no traceback, most often the kernel's OOM killer.
Real lines: a training run killed after loading embeddings (the corpus's other/progress-bar-then-killed-no-traceback)
and bash's job line; the zh_CN shell's "已杀死" (danijar/dreamerv3#203, tests/data/logs/localized_shell.log)."""
from pathlib import Path

import pytest

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.logs import chunk_keywords
from grpo_doctor.logs.chunk_keywords import KeywordHits
from grpo_doctor.logs.detectors import is_hot
from grpo_doctor.logs.exit_lines import parse_shell_killed
from grpo_doctor.logs.signatures import scan_file


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


LOCALIZED = Path(__file__).resolve().parents[1] / "data" / "logs" / "localized_shell.log"  # danijar/dreamerv3#203


@pytest.mark.parametrize("line", ["已杀死", "./train.sh: 行 12: 48211 已杀死                  python train.py"])
def test_the_zh_cn_shells_killed_line_is_a_sigkill_too(line):
    found = parse_shell_killed(line)
    assert found is not None and (found["exc_type"], found["suspected"]) == ("SIGKILL", "host-oom")


def test_a_real_log_ending_in_the_zh_cn_killed_line_is_a_crash_in_chunks_of_any_size():
    # The pre-check's keyword is UTF-8 ("已杀死", anchored on 杀's middle byte): a chunk may end
    # inside the character, and each engine must still find the line.
    expected = [(sig.kind, sig.line_number) for sig in scan_file(LOCALIZED)]
    assert expected == [("worker-died", 3)]
    for chunk_bytes in (1, 2, 5, 7, 64, 1 << 18):
        assert [(sig.kind, sig.line_number) for sig in scan_file(LOCALIZED, chunk_bytes=chunk_bytes)] == expected
    [crash] = run_rules(load_evidence([LOCALIZED]))[0]
    assert (crash.id, crash.severity) == ("rank-crash", "critical")


def test_the_pre_check_finds_the_characters_only_together_and_after_an_invalid_byte_too():
    data = "已 杀死\n杀死\n".encode() + b"\xe6" + "已杀死\n".encode()
    third = data.rindex(b"\n", 0, len(data) - 1) + 1
    for engine in (chunk_keywords.HYPERSCAN, None):  # None: the stdlib engine
        assert KeywordHits(data, engine=engine).next_from(0) >= third
    lines = data.decode("utf-8", "replace").splitlines()
    assert [is_hot(line) for line in lines] == [False, False, True]
