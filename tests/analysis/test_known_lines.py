"""Read means read: a log of lines grpo-doctor knows that state no failure and no step metric (NCCL's INFO
lines, warnings, progress bars, launchers' start-up lines) is recognised as such ("known lines: ...") with
no finding; text that holds nothing known is still "nothing recognised". Lines are real (sources below)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_doctor.logs.known_lines import KnownLines
from grpo_doctor.report.build import build_report

# Verbatim lines: NVIDIA/nccl#1232 (NCCL INFO lines of a healthy start), OEvortex/unsloth#10 (torchrun's agent
# stopping its workers, a glog WARNING line of the launcher).
KNOWN = {
    "nccl_info.log": "[0] node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
                     "[1] node2:22555:22555 [0] NCCL INFO Connected all rings\n",
    "launcher.log": "W0801 13:23:17.366000 32974 torch/distributed/elastic/multiprocessing/api.py:900] Sending "
                    "process 33051 closing signal SIGTERM\n",
}


def _report(path: Path, tmp_path: Path) -> dict:
    return json.loads(build_report([path], out_dir=tmp_path / "out").findings_path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("name", "family"), [("nccl_info.log", "NCCL / UCX lines"), ("launcher.log", "launcher lines")])
def test_a_log_of_known_lines_is_recognised_as_such_with_no_finding(name, family, tmp_path):
    log = tmp_path / name
    log.write_text(KNOWN[name], encoding="utf-8")
    data = _report(log, tmp_path)
    [read] = data["inputs"]
    assert any(what.startswith("known lines: ") and family in what for what in read["recognised"])
    assert data["findings"] == []


def test_text_that_holds_nothing_known_is_still_nothing_recognised(tmp_path):
    log = tmp_path / "prose.log"
    log.write_text("The run finished and the model was saved to the output directory.\n", encoding="utf-8")
    assert _report(log, tmp_path)["inputs"][0]["recognised"] == []


def test_families_are_counted_by_marker():  # the counter itself, on fragments of each family's shape
    known = KnownLines()
    known.add(b" 75%|####### | 6/8 [00:11<00:03]\nFutureWarning: x is deprecated\nINFO 06-24 02:48:48 llm_engine.py:100] hi\n")
    assert known.families == {"progress bars": 1, "Python warnings": 1, "inference engine lines": 1}
    assert KnownLines().describe() == ""
