"""Every regex-driven reader of logs/ stays linear on hostile lines (a guard of the class, not of one regex).

A pattern that backtracks (a lazy or nested repeat retried at every start, `\\s*` before an alternative
over a run of tabs) turned one long line into seconds or minutes: in watch's live scan that holds the GIL,
so every other watch thread (the output tees among them) stops and the job blocks on its pipe. Each reader
here gets adversarial lines at the line cap (logs/lines.MAX_LINE_BYTES, 64 KB): repeated pieces that start
a match at every position and never finish one, keywords that send a line past the pre-check. A reader
that is linear reads one in milliseconds; the bound is generous so that a loaded machine does not flake it.
"""
from __future__ import annotations

import time

import pytest

from grpo_doctor.logs.known_lines import KnownLines
from grpo_doctor.logs.lines import MAX_LINE_BYTES
from grpo_doctor.logs.metric_lines import MetricLineReader
from grpo_doctor.logs.metric_text import MetricTextReader
from grpo_doctor.logs.signatures import LineScanner

BOUND_S = 2.0  # CPU seconds for one 64 KB line; a linear reader needs a few milliseconds

# (head, piece, tail): the line is head + piece repeated to the cap + tail.
PIECES = {
    # gloo's lost peer (logs/peer_loss.py): many "[...gloo" brackets never closed
    "gloo-open-brackets": ("RuntimeError: Connection closed by peer ", "[gloo ", ""),
    "gloo-brackets-a": ("by peer gloo ", "[a", ""),
    "gloo-pair-cc": ("Connection reset by peer gloo ", "[gloo/pair.cc:", ""),
    "gloo-long-word": ("Connection closed by peer [gloo pair.cc:1] ", "a", "Error"),
    # the general metric reader (logs/metric_syntax.py, metric_text.py)
    "url-encoded": ("loss ", "%E2%80%99ab", ""),
    "url-encoded-equals": ("loss=1 ", "%E2%80%99ab", ""),
    "url-encoded-colon": ("loss: 1 ", "%E2%80%99ab", ""),
    "percent-names": ("loss ", "a%", ""),
    "percent-equals": ("loss=1 ", "a%", ""),
    "percent-colon": ("loss: 1 ", "a%", " x"),
    "tabs-colon": ("loss: 1", "\t", "x"),
    "tabs": ("loss", "\t", "x"),
    "spaces": ("loss", " ", "x"),
    "spaces-colon": ("loss", " ", ":"),
    "tabs-bars": ("| loss ", "\t |", "x"),
    "words-colon": ("loss ", "word ", ": 1x"),
    "word-pairs": ("loss 1, ", "a b c d e f g, ", ""),
    "equals": ("loss ", "a=", ""),
    "colons": ("reward ", "a: ", ""),
    "pipes": ("| loss ", "| a ", ""),
    "dots": ("loss ", "a.", ""),
    "digits": ("loss ", "1", "x"),
    "parens": ("loss ", "a(", ""),
    "step-spaces": ("step", " ", "x"),
    "section-bars": ("| rollout", " |", "x"),
    "nested-dict": ("{'loss': ", "[", ""),
    "quotes": ("{'loss': 0.1, ", "'a': ", ""),
    "bullets": ("• ", "é", " loss 1"),
    # exit lines, NCCL, prefixes (logs/exit_lines.py, nccl.py, prefixes.py)
    "mp-exits": ("terminated with ", "process 1 ", ""),
    "subprocess": ("non-zero exit status ", "Command '", ""),
    "ray-dead": ("state: DEAD ", "state: DEAD, actor_id: a", ""),
    "nccl-chain": ("", "NCCL INFO a.cc:1 -> ", ""),
    "k8s": ("Exit Code:", " ", "x"),
    "nccl-failed": ("Some NCCL operations have failed or timed out", " x", ""),
    "syslog-times": ("", "Jul 13 21:22:34 ", "loss 1"),
    "rank-tags": ("", "[rank1]:", "loss 1"),
    "traceback-frames": ("Traceback (most recent call last): ", 'File "a.py", line 1, in f ', ""),
    "memory": ("CUDA out of memory. ", "Tried to allocate 1 ", ""),
}


def _line(head: str, piece: str, tail: str) -> bytes:
    room = MAX_LINE_BYTES - len(head.encode()) - len(tail.encode()) - 1
    body = piece * (room // len(piece.encode()))
    return (head + body + tail).encode() + b"\n"


BLOCK = b"Step 3\nloss: 0.5\nreward: 0.25\n"


def _scan(chunk: bytes) -> None:
    scanner = LineScanner()
    out: list = []
    scanner.feed_chunk(chunk, out)
    scanner.close()


def _metric_text(chunk: bytes) -> None:
    MetricTextReader().feed_chunk(chunk)


def _metric_lines(chunk: bytes) -> None:
    MetricLineReader().feed_chunk(chunk)


def _known(chunk: bytes) -> None:
    KnownLines().add(chunk)


READERS = {"line-scanner": _scan, "metric-text": _metric_text, "metric-lines": _metric_lines, "known-lines": _known}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_reads_adversarial_64kb_lines_in_well_under_a_second(reader):
    read = READERS[reader]
    slow = {}
    for name, parts in PIECES.items():
        line = _line(*parts)
        assert len(line) <= MAX_LINE_BYTES
        # alone, and inside a block of one-pair lines (a block's header, section and step lines are read
        # by patterns of their own, above and below the pair that starts the block)
        for where, chunk in (("alone", line), ("in a block", BLOCK + line + BLOCK)):
            start = time.process_time()
            read(chunk)
            spent = time.process_time() - start
            if spent > BOUND_S:
                slow[f"{name} ({where})"] = round(spent, 2)
    assert not slow, f"{reader}: {slow} CPU seconds for one {MAX_LINE_BYTES // 1024} KB line"
