"""scan_file reads chunks of raw bytes and feeds only the lines around keyword hits: it must find
exactly what feeding every line finds, wherever the chunks end, whatever bytes the file holds."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from grpo_doctor.logs.chunk_keywords import KeywordHits, build_searches
from grpo_doctor.logs.detectors import KEYWORDS, is_hot
from grpo_doctor.logs.lines import iter_chunks, iter_lines, line_at
from grpo_doctor.logs.signatures import LineScanner, Signature, scan_file

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"
FILLER = [
    b"[rank3]: {'loss': 0.0123, 'grad_norm': 0.41, 'reward': 0.5, 'kl': 0.001, 'global_step/max_steps': '9/547'}\n",
    " 12%|█▏        | 66/547 [10:02<1:14:33,  9.28s/it]\r 13%|██        | 67/547\n".encode(),
    b"node-0:40410:40500 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n",
    b"\n",
]


def _line_by_line(path: Path) -> list[Signature]:
    scanner = LineScanner()
    found = [sig for line in iter_lines(path) for sig in scanner.feed(line)] + scanner.close()
    return sorted(found, key=lambda sig: sig.line_number)


def _assert_chunk_sizes_agree(path: Path, chunk_sizes: list[int]) -> list[Signature]:
    expected = _line_by_line(path)
    for chunk_bytes in chunk_sizes:
        assert scan_file(path, chunk_bytes=chunk_bytes) == expected, chunk_bytes
    return expected


def test_chunks_ending_anywhere_near_a_hit_find_exactly_what_line_by_line_feeding_finds(tmp_path):
    # Every fixture (tracebacks, torchrun blocks, wrapped and collapsed messages, binary garbage)
    # between ordinary lines; chunk sizes from below a line's length to several lines, so that
    # chunk ends fall before, inside and after every hit and every open construct.
    rng = random.Random(4)
    parts = []
    for log in sorted(DATA.glob("*")):
        parts += [rng.choice(FILLER) for _ in range(rng.randrange(0, 6))]
        parts.append(log.read_bytes().rstrip(b"\n") + b"\n")
    path = tmp_path / "all_fixtures.log"
    path.write_bytes(b"".join(parts))
    found = _assert_chunk_sizes_agree(path, [*range(1, 90, 11), *range(90, 700, 37), 4096, 2**18])
    assert len(found) > 50


def test_a_truncated_file_with_invalid_utf8_reads_the_same_in_chunks(tmp_path):
    oom = (b"[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.42 GiB. GPU 1 has a total "
           b"capacity of 79.35 GiB of which 950.19 MiB is free. Of the allocated memory 27.01 GiB is allocated by "
           b"PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated.\n")
    path = tmp_path / "cut.log"
    path.write_bytes(
        FILLER[0] + b"\xff\xfe\x00garbage \xe2\x96\n"  # invalid bytes, then a character cut by its newline
        + b"\xc3(" + oom  # an invalid byte right before a prefix and a keyword
        + b"[rank2]: Traceback (most recent call last):\n[rank2]:   File \"/w/train.py\", line 8, in <module>\n"
        + FILLER[1] * 3
        + b"[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a tot\xe2\x96")
    found = _assert_chunk_sizes_agree(path, [*range(1, 64, 3), *range(64, 900, 29), 2**18])
    assert {(sig.kind, sig.rank) for sig in found} >= {("cuda-oom", 1), ("python-traceback", 2)}


@pytest.mark.parametrize("max_line_bytes", [1, 5, 16, 64])
def test_chunks_hold_the_lines_iter_lines_gives_cut_and_decoded_the_same(tmp_path, max_line_bytes):
    rng = random.Random(max_line_bytes)
    path = tmp_path / "lines.log"
    pieces = [b"x" * rng.choice([0, 1, 4, 15, 16, 17, 63, 64, 65, 200]) + rng.choice([b"", b"\xe2\x96\x88", b"\xff"])
              for _ in range(300)]
    path.write_bytes(b"\n".join(pieces) + rng.choice([b"", b"\n"]))
    size = path.stat().st_size
    for max_bytes in (None, 0, 1, size // 3, size - 1, size, size + 5):
        expected = list(iter_lines(path, max_bytes, max_line_bytes))
        for chunk_bytes in (1, 7, 16, 100, 4096):
            got = []
            for chunk in iter_chunks(path, max_bytes, max_line_bytes, chunk_bytes):
                start = 0
                while start < len(chunk):
                    line, start = line_at(chunk, start, max_line_bytes)
                    got.append(line)
            assert got == expected, (max_bytes, chunk_bytes)


def test_keyword_hits_fall_exactly_on_the_lines_is_hot_flags():
    # Lines made of keywords' pieces: whole keywords, keywords cut short, their rarest byte alone.
    rng = random.Random(7)
    pieces = [*KEYWORDS, *(k[:-1] for k in KEYWORDS), *(k[1:] for k in KEYWORDS), "j", "z", "k", "C", " ", "x:"]
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 3))) + "\n" for _ in range(3000)]
    chunk = "".join(lines).encode()
    hits, flagged, start = KeywordHits(chunk), [], 0
    for line in lines:  # as LineScanner.feed_chunk asks: from each line's start on
        end = start + len(line.encode())
        flagged.append(hits.next_from(start) < end)
        start = end
    assert flagged == [is_hot(line) for line in lines]
    assert any(flagged) and not all(flagged)


def test_every_keyword_is_searched_even_one_without_a_rare_byte():
    searches = build_searches(["      : ", "joined", "atchdog"])
    for word in ("      : ", "joined", "atchdog", "Watchdog"):
        chunk = b"filler\n" * 3 + word.encode() + b"\n"
        assert KeywordHits(chunk, searches).next_from(0) < len(chunk), word
    assert KeywordHits(b"join ed atch dog    : \n", searches).next_from(0) == len(b"join ed atch dog    : \n")


def test_every_keyword_has_a_chunk_anchor_and_a_line_anchor_so_none_costs_a_pass_of_its_own():
    from grpo_doctor.logs.chunk_keywords import RARE_BYTES
    from grpo_doctor.logs.detectors import LINE_ANCHORS
    for word in KEYWORDS:
        assert any(byte in word.encode() for byte in RARE_BYTES), word
        assert any(c in word for c in LINE_ANCHORS), word
    assert len(build_searches(KEYWORDS)) == len({next(b for b in RARE_BYTES if b in w.encode()) for w in KEYWORDS})


def test_the_anchored_pre_check_says_exactly_what_testing_every_keyword_says():
    lines = [line.decode("utf-8", "replace") for line in FILLER]
    for log in sorted(DATA.glob("*.log")):
        lines += log.read_text(encoding="utf-8", errors="replace").split("\n")
    lines += [f"x{word}y" for word in KEYWORDS] + [word[1:] for word in KEYWORDS]
    for line in lines:
        assert is_hot(line) == any(word in line for word in KEYWORDS), line
