"""The probe's terminal output: plain text tables a person reads at the end of a launch.

Typical use:
    print("\\n".join(sweep_lines(rows)))
    print("\\n".join(problem_lines(problems)))
"""
from __future__ import annotations

from typing import Any

from grpo_doctor.probe.results import Problem
from grpo_doctor.schema.human_text import format_bytes


def check_line(checks: dict[int, list[dict[str, Any]]]) -> str:
    """One line: each op ok on every rank, or where it failed."""
    by_op: dict[str, list[int]] = {}
    for rank, results in checks.items():
        for check in results:
            by_op.setdefault(check["op"], [])
            if not check["ok"]:
                by_op[check["op"]].append(rank)
    parts = [f"{op} ok" if not bad else f"{op} FAILED on {len(bad)} rank(s)" for op, bad in by_op.items()]
    return "  correctness: " + (", ".join(parts) if parts else "not run")


def sweep_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [f"  {'collective':<15}{'size':>11}{'time us':>12}{'algbw GB/s':>12}{'busbw GB/s':>12}"]
    for row in rows:
        lines.append(f"  {row['op']:<15}{format_bytes(row['size_bytes']):>11}{row['time_us']:>12.1f}"
                     f"{row['algbw_gbps']:>12.3f}{row['busbw_gbps']:>12.3f}")
    return lines


def link_lines(summary: dict[str, Any], max_shown: int = 8) -> list[str]:
    links = summary.get("links") or []
    if not links:
        return []
    slow = summary.get("slow_links") or []
    lines = [f"  send/recv: {len(links)} links, upper quartile {summary.get('reference_gbps', 0.0):.3f} GB/s, "
             f"{len(slow)} slow"]
    for lk in sorted(slow, key=lambda lk: lk["gbps"])[:max_shown]:
        lines.append(f"    slow: rank {lk['src']} ({lk.get('src_host')}) -> rank {lk['dst']} ({lk.get('dst_host')}) "
                     f"{lk['gbps']:.3f} GB/s")
    return lines


def problem_lines(problems: list[Problem]) -> list[str]:
    if not problems:
        return ["  no problems found"]
    order = {"critical": 0, "warning": 1, "info": 2}
    lines = []
    for p in sorted(problems, key=lambda p: order.get(p.severity, 3)):
        lines.append(f"  {p.severity.upper()} {p.id}: {p.message}")
        if p.hint:
            lines.append(f"    fix: {p.hint}")
    return lines


def verdict_line(status: int, where: str) -> str:
    if status == 0:
        return f"grpo-doctor probe: OK - nothing found that would stop the job (results: {where})"
    return f"grpo-doctor probe: FAILED - the job would fail as launched (results: {where})"
