"""`report` on a log whose every line is a failure signature stays in bounded memory.

NCCL_DEBUG=INFO on a flapping link prints an NCCL WARN per second per rank for hours: every line
is a signature. Kept one row each, a 300 MB such log took 4.5 GB; rows are now aggregated per
message (analysis/signature_rows.py), so memory follows the distinct messages, not the lines. The
report runs as its own process under an address-space limit; the log is generated from the real
WARN lines of tests/data/logs/nccl_errors.log. Figures for larger logs: docs/benchmarks.md.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
# The address space a 2 GB log must fit in; the interpreter, numpy, pandas and matplotlib take about
# 1.4 GB of it before the first line is read (mapped, mostly never touched).
ADDRESS_SPACE_BYTES = 2 * 2**30
LOG_BYTES = int(os.environ.get("GRPO_DOCTOR_TEST_DENSE_LOG_MB", "64")) * 2**20


def _signature_dense_log(path: Path, size_bytes: int) -> int:
    """Writes the real NCCL WARN lines over and over to `size_bytes`; returns the number of lines."""
    warns = [line for line in (LOGS / "nccl_errors.log").read_text().splitlines() if " NCCL WARN " in line]
    block = ("\n".join(warns) + "\n").encode() * 1000
    lines = 0
    with path.open("wb") as f:
        while f.tell() < size_bytes:
            f.write(block)
            lines += len(warns) * 1000
    return lines


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


@pytest.mark.slow
def test_report_on_a_signature_dense_log_fits_in_two_gigabytes(tmp_path):
    log = tmp_path / "nccl-warn-every-line.log"
    num_lines = _signature_dense_log(log, LOG_BYTES)
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "report", str(log), "--json",
                          "--out", str(tmp_path / "report.html")], env=clean_env(OPENBLAS_NUM_THREADS="1"),
                         capture_output=True, text=True, timeout=1800, preexec_fn=_limit_address_space)
    assert out.returncode == 1 and "MemoryError" not in out.stderr, out.stderr[-3000:]
    findings = json.loads(out.stdout)["findings"]
    assert {f["id"] for f in findings} == {"nccl-error"}
    # every WARN line is still counted, though only a few per message are kept as rows
    assert sum(f["evidence"]["num_reports"] for f in findings) == num_lines
