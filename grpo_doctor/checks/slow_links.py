"""Which host a slow link belongs to, from the round trips of the job's own TCP connections.

A throttled or degraded link slows every collective that crosses it; every rank then waits in the same
place and the stacks name nobody. Each host's watch samples the round trip of its ranks' busy connections
by peer (host/tcp_links.py); put together they give a round trip per pair of hosts. A pair is slow when its
median round trip is at least `SLOW_MS` and `RATIO` times the fastest pair's (where there are two pairs to
compare). The slow host is the one common to the slow pairs, while its other end has a fast pair:

- three hosts, node2's link throttled: node0-node2 and node1-node2 slow, node0-node1 fast -> node2;
- several slow hosts (node2, node3 of four): each has only slow pairs, more than one of them -> both;
- two hosts: one pair, slow -> both named, and `which_end` False: from the traffic between two hosts alone,
  which end is slow cannot be told (a third host, or `grpo-doctor probe` across three nodes, can);
- one host's own view (its watch sees only its own links): node0 sees node0-node1 fast, node0-node2 slow
  -> node2 (node0's NIC carries a fast pair, so it is not node0's).

Only pairs whose both ends are hosts of the job are judged: the samples' own hosts, and `job_addrs` (the
addresses of the job's hosts known otherwise: the fleet beats', the master address). A rank's connection to an
address outside the job (a remote reward or LLM-judge API, dataset streaming, a model hub) crosses the
internet at 20 ms and more while the job's links answer in a fraction of one: it is no link of the job and
never names a host. Without any other host of the job known, nothing is judged.

Typical use:
    verdict = slow_link_hosts([("node0", LinkRtts(("10.0.0.1",), {"10.0.0.2": 0.3, "10.0.0.3": 150.0})), ...],
                              job_addrs=("10.0.0.2", "10.0.0.3"))
    verdict.hosts, verdict.which_end, describe_links(verdict)
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from grpo_doctor.schema.slow_rounds import LinkRtts

SLOW_MS = 20.0  # a round trip within one data centre is well under a millisecond; 20 ms is a queue in front of a link
RATIO = 10.0  # and this many times the fastest pair's, where there is one to compare


@dataclass(frozen=True)
class LinkVerdict:
    pairs: dict[tuple[str, str], float] = field(default_factory=dict)  # (host, host or address) -> median rtt ms
    slow: tuple[tuple[str, str], ...] = ()
    hosts: tuple[str, ...] = ()  # the slow hosts, or the two ends of the one slow pair
    which_end: bool = False  # True where the hosts are told apart from the ends of their links

    @property
    def fastest_ms(self) -> float | None:
        return min(self.pairs.values(), default=None)

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": {f"{a}-{b}": ms for (a, b), ms in sorted(self.pairs.items())},
                "slow": [f"{a}-{b}" for a, b in self.slow], "hosts": list(self.hosts), "which_end": self.which_end}


def slow_link_hosts(samples: Iterable[tuple[str, LinkRtts]], job_addrs: Iterable[str] = ()) -> LinkVerdict:
    """`samples`: (host, its ranks' round trips by peer address), any number per host (one a round);
    `job_addrs`: addresses of the job's hosts besides the samples' own. Peers outside the job are left out."""
    samples = list(samples)
    host_of = {addr: host for host, links in samples for addr in links.addrs}
    job = set(host_of) | set(job_addrs)
    rtts: dict[tuple[str, str], list[float]] = {}
    for host, links in samples:
        for addr, ms in links.rtt_ms.items():
            if addr not in job:
                continue  # outside the job: a remote API, a dataset or model hub; not one of the job's links
            peer = host_of.get(addr, addr)
            if peer != host:
                rtts.setdefault(tuple(sorted((host, peer))), []).append(ms)
    pairs = {pair: round(statistics.median(v), 3) for pair, v in sorted(rtts.items())}
    if not pairs:
        return LinkVerdict()
    floor = max(SLOW_MS, RATIO * min(pairs.values())) if len(pairs) > 1 else SLOW_MS
    slow = tuple(pair for pair, ms in pairs.items() if ms >= floor)
    fast = {end for pair, ms in pairs.items() if ms < floor for end in pair}
    slow_count: dict[str, int] = {}
    for pair in slow:
        for end in pair:
            slow_count[end] = slow_count.get(end, 0) + 1
    # In every slow pair, or in several: and never at the end of a fast one (its NIC moves data fine).
    hosts = tuple(sorted(h for h, n in slow_count.items() if h not in fast and (n == len(slow) or n >= 2)))
    which_end = bool(hosts) and bool(fast)
    return LinkVerdict(pairs, slow, hosts, which_end)


def describe_links(verdict: LinkVerdict) -> str:
    """One clause for a finding or watch's line; "" where no link is slow."""
    if not verdict.slow:
        return ""
    fastest = verdict.fastest_ms
    slow = ", ".join(f"{a}-{b} {verdict.pairs[(a, b)]:g} ms" for a, b in verdict.slow[:4])
    more = f" and {len(verdict.slow) - 4} more" if len(verdict.slow) > 4 else ""
    if verdict.which_end:
        return (f"the job's TCP round trips name {', '.join(verdict.hosts)}: slow to every other host ({slow}{more}; "
                f"the fastest pair {fastest:g} ms)")
    if verdict.hosts and len(verdict.pairs) == 1:
        return (f"the job's TCP round trip between {' and '.join(verdict.hosts)} is {slow.split(' ', 1)[1]}: "
                "the link between them is slow; with two hosts which end cannot be told")
    return f"the job's TCP round trips are slow on {slow}{more}" + (f" (the fastest pair {fastest:g} ms)" if
                                                                     len(verdict.pairs) > len(verdict.slow) else "")
