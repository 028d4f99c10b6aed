"""From every rank's measurements to problems: failed or wrong collectives (nccl-error), a
collective that stopped the probe (nccl-error), slow links, ranks and nodes (straggler).

Stdlib only (the links arithmetic is in links.py's pure functions, imported lazily there).

Typical use:
    problems = collective_problems(per_rank, host_of, slow_ratio=0.5)
"""
from __future__ import annotations

from typing import Any

from grpo_doctor.probe.results import Problem
from grpo_doctor.schema.ranks import format_ranks

NCCL_HINT = ("A collective failed or returned wrong values: check the network between the named ranks "
             "(NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME on the right interface, the same NCCL version everywhere), "
             "and rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see which transport each rank chose.")
TIMEOUT_HINT = ("A collective never finished: a rank or link is down or blocked (a firewall between the nodes on "
                "the ports NCCL / gloo open after the rendezvous), or the ranks disagree on the order of "
                "collectives. Check connectivity between all nodes on all ports, not only MASTER_PORT.")
SLOW_HINT = ("One node's network is much slower than the others': check its link speed and errors "
             "(`ethtool IFACE`, `ip -s link`), that NCCL uses the fast interface there (NCCL_SOCKET_IFNAME, "
             "NCCL_IB_HCA), and that no traffic shaping or a busy neighbour is on it. Training runs at the pace "
             "of the slowest link.")


def collective_problems(per_rank: dict[int, dict[str, Any]], host_of: dict[int, str],
                        slow_ratio: float) -> tuple[list[Problem], dict[str, Any]]:
    """per_rank: rank -> {"checks", "links", "error"} as each rank measured them. Returns the
    problems and the summary of links (slow links, ranks, hosts) for the results file."""
    from grpo_doctor.probe.links import reference_gbps, slow_hosts, slow_links, slow_ranks

    problems: list[Problem] = []
    failed: dict[tuple[str, str], list[int]] = {}
    for rank, result in sorted(per_rank.items()):
        for check in result.get("checks", []):
            if not check["ok"]:
                failed.setdefault((check["op"], check.get("error") or "failed"), []).append(rank)
    for (op, error), ranks in failed.items():
        problems.append(Problem(
            id="nccl-error", severity="critical", message=f"{op} failed on rank(s) {format_ranks(ranks)}: {error}",
            hint=NCCL_HINT, ranks=ranks, hosts=_hosts(ranks, host_of)))
    stopped = {rank: r["error"] for rank, r in per_rank.items() if r.get("error")}
    if stopped:
        first = next(iter(stopped.values()))
        problems.append(Problem(
            id="nccl-error", severity="critical",
            message=f"the probe stopped on rank(s) {format_ranks(sorted(stopped))}: {first}",
            hint=TIMEOUT_HINT, ranks=sorted(stopped), hosts=_hosts(sorted(stopped), host_of)))
    links = [lk for r in per_rank.values() for lk in r.get("links", [])]
    for lk in links:
        lk["src_host"], lk["dst_host"] = host_of.get(lk["src"]), host_of.get(lk["dst"])
    slow = slow_links(links, slow_ratio)
    hosts, ranks = slow_hosts(links, slow, host_of), slow_ranks(links, slow)
    reference = reference_gbps([lk for lk in links if lk.get("gbps")])
    if slow:
        named = (f"node(s) {', '.join(hosts)}" if hosts else
                 f"rank(s) {format_ranks(ranks)}" if ranks else
                 "link(s) " + ", ".join(f"{lk['src']}->{lk['dst']}" for lk in slow))
        worst = min(slow, key=lambda lk: lk["gbps"])
        problems.append(Problem(
            id="straggler", severity="warning",
            message=f"slow network at {named}: {len(slow)} of {len(links)} links under {slow_ratio:g} x what the "
                    f"fast ones reach (upper quartile {reference:.3f} GB/s); slowest: rank {worst['src']} "
                    f"({worst['src_host']}) -> rank {worst['dst']} ({worst['dst_host']}) {worst['gbps']:.3f} GB/s",
            hint=SLOW_HINT, ranks=ranks or sorted({r for lk in slow for r in (lk["src"], lk["dst"])}),
            hosts=hosts or sorted({h for lk in slow for h in (lk["src_host"], lk["dst_host"]) if h})))
    summary = {"links": links, "slow_links": slow, "slow_hosts": hosts, "slow_ranks": ranks, "reference_gbps": reference}
    return problems, summary


def exit_status(problems: list[Problem] | list[dict[str, Any]]) -> int:
    """1 when the job would fail (any critical problem), else 0; warnings alone do not fail."""
    severities = [p.severity if isinstance(p, Problem) else p.get("severity") for p in problems]
    return 1 if "critical" in severities else 0


def _hosts(ranks: list[int], host_of: dict[int, str]) -> list[str]:
    return list(dict.fromkeys(host_of[r] for r in ranks if r in host_of))
