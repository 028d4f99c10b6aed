"""Repeated signatures become a few rows with counts; the findings read from them are unchanged."""
from pathlib import Path

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.analysis.signature_rows import SAMPLES_PER_KEY

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
WARNS = [line for line in (LOGS / "nccl_errors.log").read_text().splitlines() if " NCCL WARN " in line]


def _findings(path: Path) -> list[dict]:
    findings, _ = run_rules(load_evidence([path]))
    return [f.to_dict() for f in findings]


def test_a_warn_repeated_thousands_of_times_is_a_few_rows_that_count_every_one(tmp_path):
    log = tmp_path / "flapping.log"
    log.write_text("\n".join(WARNS * 1000) + "\n")
    ev = load_evidence([log])
    assert len(ev.signature_rows) <= SAMPLES_PER_KEY * len(WARNS)
    assert sum(row.get("count", 1) for row in ev.signature_rows) == 1000 * len(WARNS)
    repeated = [row for row in ev.signature_rows if "count" in row]
    assert repeated and all(row["last_line_number"] > 900 * len(WARNS) for row in repeated)
    lines = [row["line_number"] for row in ev.signature_rows]
    assert lines == sorted(lines)


def test_findings_from_repeats_are_those_of_the_messages_once_but_for_the_count(tmp_path):
    once, many = tmp_path / "once.log", tmp_path / "many.log"
    once.write_text("\n".join(WARNS) + "\n")
    many.write_text("\n".join(WARNS * 300) + "\n")

    def without_counts(findings):
        for f in findings:
            f["evidence"] = {k: v for k, v in f["evidence"].items() if k not in ("num_reports", "sources")}
        return findings

    found_once, found_many = _findings(once), _findings(many)
    assert [f["evidence"]["num_reports"] * 300 for f in found_once] == [f["evidence"]["num_reports"] for f in found_many]
    assert without_counts(found_once) == without_counts(found_many)
