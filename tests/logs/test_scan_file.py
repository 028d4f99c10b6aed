"""Whole log files: long lines, byte budgets, and a 200 MB log scanned in bounded memory."""
from __future__ import annotations

import json

import pytest
from helpers import run_program

from grpo_doctor.logs.lines import MAX_LINE_BYTES, iter_lines
from grpo_doctor.logs.signatures import scan_file

OOM = ("[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.42 GiB. GPU {r} has a total capacity"
       " of 79.35 GiB of which 950.19 MiB is free. Of the allocated memory 27.01 GiB is allocated by PyTorch, and 1.02"
       " GiB is reserved by PyTorch but unallocated.\n")
TIMEOUT = ("[rank{r}]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective operation"
           " timeout: WorkNCCL(SeqNum={n}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081"
           " milliseconds before timing out.\n")


LINES_PER_BLOCK = 11_000


def _block(n: int) -> bytes:
    """About 1 MB of an ordinary GRPO log, then one OOM and one NCCL timeout."""
    lines = []
    for i in range(LINES_PER_BLOCK):
        r = i % 16
        lines.append(f"[rank{r}]: {{'loss': 0.{i:04d}, 'grad_norm': 0.41, 'reward': 0.5, 'reward_std': 0.2, 'kl': 0.001}}\n"
                     if i % 3 else f" {r * 6}%|█▏   | {i}/547 [10:02<1:14:33,  9.28s/it]\r{r * 6 + 1}%|██ | {i + 1}/547\n")
    lines += [OOM.format(r=n % 16), TIMEOUT.format(r=n % 16, n=n)]
    return "".join(lines).encode()


def test_lines_longer_than_the_cap_are_cut_and_line_numbers_stay_true(tmp_path):
    path = tmp_path / "long.log"
    path.write_bytes(b"a" * (3 * MAX_LINE_BYTES + 5) + b"\n" + OOM.format(r=1).encode() + b"tail without newline")
    lines = list(iter_lines(path))
    assert [len(line) for line in lines[:1]] == [MAX_LINE_BYTES] and len(lines) == 3
    [oom] = scan_file(path)
    assert (oom.line_number, oom.rank) == (2, 1)


def test_max_bytes_reads_only_the_head_of_the_file(tmp_path):
    path = tmp_path / "two.log"
    first, second = OOM.format(r=1).encode(), OOM.format(r=2).encode()
    path.write_bytes(first + second)
    assert [s.rank for s in scan_file(path, max_bytes=len(first))] == [1]
    assert [s.rank for s in scan_file(path, max_bytes=len(first) + 1)] == [1, 2]  # the line that starts inside
    assert scan_file(path, max_bytes=0) == []


@pytest.mark.slow
def test_a_200_mb_log_is_scanned_in_bounded_memory(tmp_path):
    path = tmp_path / "big.log"
    with open(path, "wb") as f:
        for n in range(200):
            f.write(_block(n))
            if n == 100:  # a 20 MiB line (a tensor printed whole), written in pieces to keep this process small
                for _ in range(20):
                    f.write(b"x" * 2**20)
                f.write(b"\n")
    assert path.stat().st_size > 200 * 10**6
    # A fresh process, so that its peak RSS is the scan's alone and not this test session's.
    result = run_program(tmp_path, f"""
        import json, resource, time
        from grpo_doctor.logs.signatures import scan_file
        before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        sigs = scan_file({str(path)!r})
        print(json.dumps({{"growth_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib,
                          "seconds": time.perf_counter() - t0,
                          "found": [[s.kind, s.rank, s.line_number] for s in sigs]}}))
    """, timeout_s=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    print(f"200 MB scanned in {report['seconds']:.1f} s, peak RSS growth {report['growth_kib'] / 1024:.1f} MiB")
    assert report["growth_kib"] < 50 * 1024
    found = report["found"]
    assert len(found) == 400
    assert [kind for kind, _, _ in found[:2]] == ["cuda-oom", "nccl-timeout"]
    assert found[-1] == ["nccl-timeout", 199 % 16, 200 * (LINES_PER_BLOCK + 2) + 1]  # the 20 MiB line is one line


def test_batched_scanning_finds_exactly_what_line_by_line_scanning_finds():
    from pathlib import Path

    from grpo_doctor.logs.lines import iter_lines
    from grpo_doctor.logs.signatures import LineScanner, scan_file

    logs = sorted((Path(__file__).resolve().parents[1] / "data" / "logs").glob("*"))
    assert logs
    for log in logs:
        scanner = LineScanner()
        one_by_one = [s for line in iter_lines(log) for s in scanner.feed(line)] + scanner.close()
        key = lambda s: (s.line_number, s.kind, s.rank, s.text)  # noqa: E731
        assert sorted(map(key, scan_file(log))) == sorted(map(key, one_by_one)), log.name
