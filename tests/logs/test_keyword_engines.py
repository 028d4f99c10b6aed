"""The keyword pass has two engines (chunk_keywords: hyperscan when installed, else the stdlib `re`):
both must find the same hits, so that a raw log gives the same signatures and the same findings
whichever one runs, and logs/ must keep working where hyperscan cannot be imported."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import clean_env

from grpo_doctor.logs import chunk_keywords
from grpo_doctor.logs.chunk_keywords import SEARCHES, KeywordHits
from grpo_doctor.logs.detectors import KEYWORDS, is_hot
from grpo_doctor.logs.lines import iter_chunks

DATA = Path(__file__).resolve().parents[1] / "data"
RAW_LOGS = sorted((DATA / "logs").glob("*")) + sorted((DATA / "corpus").glob("*/*.log"))

# hyperscan is a dependency of the package; without it only the stdlib engine is left to test.
needs_hyperscan = pytest.mark.skipif(chunk_keywords.HYPERSCAN is None, reason="hyperscan is not installed")


def _hit_lines(chunk: bytes, hits: KeywordHits) -> list[int]:
    """Where the lines holding a hit start, walking as `LineScanner.feed_chunk` does (from line starts)."""
    starts, pos, end = [], 0, len(chunk)
    while (hit := hits.next_from(pos)) < end:
        start = chunk.rfind(b"\n", 0, hit) + 1
        starts.append(start)
        pos = chunk.find(b"\n", hit) + 1 or end
    return starts


@needs_hyperscan
def test_hyperscan_is_the_engine_where_it_is_installed():
    assert chunk_keywords.ENGINE == "hyperscan"


@needs_hyperscan
@pytest.mark.parametrize("chunk_bytes", [97, 4096, 2**18])
def test_both_engines_hit_exactly_the_lines_is_hot_flags_in_every_fixture_and_corpus_log(chunk_bytes):
    assert len(RAW_LOGS) > 100
    for log in RAW_LOGS:
        for chunk in iter_chunks(log, chunk_bytes=chunk_bytes):
            fast, stdlib = _hit_lines(chunk, KeywordHits(chunk)), _hit_lines(chunk, KeywordHits(chunk, SEARCHES))
            assert fast == stdlib, log.name
            lines = chunk.split(b"\n")
            starts = [0]
            for line in lines[:-1]:
                starts.append(starts[-1] + len(line) + 1)
            hot = [s for s, line in zip(starts, lines, strict=True) if is_hot(line.decode("utf-8", "replace"))]
            assert fast == hot, log.name


@needs_hyperscan
def test_both_engines_agree_on_lines_dense_with_keywords_and_their_fragments():
    # Every line a mix of whole keywords, keywords cut short and overlapping pieces: many hits a chunk.
    rng = random.Random(12)
    pieces = [*KEYWORDS, *(k[:-1] for k in KEYWORDS), *(k[1:] for k in KEYWORDS), "NCCL WARNCCL WARN", "\xe2", "x"]
    chunk = "".join("".join(rng.choice(pieces) for _ in range(rng.randrange(0, 4))) + "\n"
                    for _ in range(5000)).encode()
    fast, stdlib = _hit_lines(chunk, KeywordHits(chunk)), _hit_lines(chunk, KeywordHits(chunk, SEARCHES))
    assert fast == stdlib and 1000 < len(fast) < 5000


@needs_hyperscan
def test_threads_scanning_at_once_each_get_every_hit():
    # watch scans each stream in a thread of its own; a hyperscan scan releases the GIL, and two
    # scans sharing one scratch space fail ("scratch in use").
    chunk = b"".join(log.read_bytes() for log in RAW_LOGS) * 4
    expected = _hit_lines(chunk, KeywordHits(chunk, SEARCHES))
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def scan() -> None:
        try:
            for _ in range(5):
                results.append(_hit_lines(chunk, KeywordHits(chunk)))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=scan) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 20 and all(found == expected for found in results)


_SIGNATURES_AND_FINDINGS = """
import json, sys
from pathlib import Path
from grpo_doctor.logs import chunk_keywords
from grpo_doctor.logs.signatures import scan_file
out = {"engine": chunk_keywords.ENGINE, "signatures": {}, "findings": {}}
for name in sys.argv[2:]:
    out["signatures"][name] = [s.to_dict() for s in scan_file(name)]
if sys.argv[1] == "findings":
    from grpo_doctor.analysis.load import load_evidence
    from grpo_doctor.analysis.rules import run_rules
    for name in sys.argv[2:]:
        findings, _ = run_rules(load_evidence([Path(name)]))
        out["findings"][name] = [(f.id, f.severity, f.title, sorted(f.ranks)) for f in findings]
print(json.dumps(out, default=str))
"""


def _start(env: dict[str, str], logs: list[Path], what: str = "signatures", prelude: str = "") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", prelude + _SIGNATURES_AND_FINDINGS, what, *map(str, logs)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


@needs_hyperscan
def test_a_raw_log_gives_the_same_signatures_and_findings_with_either_engine():
    # Both engines at once, each in a process of its own (the engine is chosen at import).
    # Signatures of every raw log; findings (which follow from them) of the fixtures, the corpus's
    # findings being scored with the default engine by tests.corpus_score.
    fast = _start(clean_env(), RAW_LOGS, "signatures")
    stdlib = _start(clean_env(GRPO_DOCTOR_KEYWORD_ENGINE="re"), RAW_LOGS, "signatures")
    fast, stdlib = _result(fast), _result(stdlib)
    assert (fast["engine"], stdlib["engine"]) == ("hyperscan", "re")
    assert fast["signatures"] == stdlib["signatures"]
    assert sum(map(len, fast["signatures"].values())) > 300
    fixtures = sorted((DATA / "logs").glob("*.log"))
    fast = _start(clean_env(), fixtures, "findings")
    stdlib = _start(clean_env(GRPO_DOCTOR_KEYWORD_ENGINE="re"), fixtures, "findings")
    fast, stdlib = _result(fast), _result(stdlib)
    assert fast["findings"] == stdlib["findings"]
    assert sum(map(len, fast["findings"].values())) > 10


def test_logs_work_with_the_stdlib_alone_when_hyperscan_cannot_be_imported():
    blocked = "import sys\nsys.modules['hyperscan'] = None  # import hyperscan now raises ImportError\n"
    without = _start(clean_env(), RAW_LOGS, prelude=blocked)
    default = _start(clean_env(), RAW_LOGS)
    without, default = _result(without), _result(default)
    assert without["engine"] == "re"
    assert without["signatures"] == default["signatures"]
    assert sum(map(len, without["signatures"].values())) > 300
