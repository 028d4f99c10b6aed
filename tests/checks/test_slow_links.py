"""checks/slow_links.py: the host common to the slow pairs of hosts, from each host's view of its own links."""
from __future__ import annotations

from grpo_doctor.checks.slow_links import describe_links, slow_link_hosts
from grpo_doctor.schema.slow_rounds import LinkRtts

A, B, C, D = "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"


def test_three_hosts_one_throttled_names_it_from_all_views_together():
    verdict = slow_link_hosts([("node0", LinkRtts((A,), {B: 0.05, C: 180.0})),
                               ("node1", LinkRtts((B,), {A: 0.06, C: 140.0})),
                               ("node2", LinkRtts((C,), {A: 90.0, B: 200.0}))])
    assert verdict.pairs == {("node0", "node1"): 0.055, ("node0", "node2"): 135.0, ("node1", "node2"): 170.0}
    assert (verdict.hosts, verdict.which_end) == (("node2",), True)
    assert describe_links(verdict).startswith("the job's TCP round trips name node2: slow to every other host")


def test_one_hosts_own_view_names_the_slow_peer_when_it_also_has_a_fast_one():
    assert slow_link_hosts([("node0", LinkRtts((A,), {B: 0.05, C: 180.0}))], job_addrs=(B, C)).hosts == (C,)
    # Without knowing the job's other hosts (no fleet beats, no master address), no host is named.
    assert slow_link_hosts([("node0", LinkRtts((A,), {B: 0.05, C: 180.0}))]).hosts == ()
    # The slow host's own view: every pair slow, none to compare with: nothing named, no ratio to speak of.
    mine = slow_link_hosts([("node2", LinkRtts((C,), {A: 90.0, B: 200.0}))])
    assert (mine.slow, mine.hosts) == ((), ())


def test_two_hosts_name_the_link_and_both_ends_without_telling_which():
    verdict = slow_link_hosts([("node0", LinkRtts((A,), {B: 150.0})), ("node1", LinkRtts((B,), {A: 170.0}))])
    assert (verdict.hosts, verdict.which_end) == (("node0", "node1"), False)
    assert "with two hosts which end cannot be told" in describe_links(verdict)


def test_two_slow_hosts_of_four_are_both_named_and_healthy_links_name_nobody():
    fast, slow = 0.1, 100.0
    addr = {"node0": A, "node1": B, "node2": C, "node3": D}
    bad = {"node2", "node3"}
    views = [(h, LinkRtts((a,), {addr[p]: slow if {h, p} & bad else fast for p in addr if p != h}))
             for h, a in addr.items()]
    assert slow_link_hosts(views).hosts == ("node2", "node3")
    healthy = [(h, LinkRtts((a,), {addr[p]: 0.1 + 0.3 * (p == "node3") for p in addr if p != h}))
               for h, a in addr.items()]
    assert slow_link_hosts(healthy).slow == ()  # 0.4 ms against 0.1: under the 20 ms floor


def test_a_service_outside_the_job_is_never_a_slow_host():
    """The reviewer's case: a healthy job whose ranks also talk to a remote reward / LLM-judge API or a dataset
    stream (20+ ms over the internet against 0.3 ms on the LAN)."""
    api = "104.18.6.192"
    mine = slow_link_hosts([("node0", LinkRtts((A,), {B: 0.3, api: 38.0}))] * 3, job_addrs=(A, B))
    assert (mine.slow, mine.hosts, mine.which_end) == ((), (), False) and describe_links(mine) == ""
    assert list(mine.pairs) == [(B, "node0")]
    both = slow_link_hosts([("node0", LinkRtts((A,), {B: 0.3, api: 38.0})),
                            ("node1", LinkRtts((B,), {A: 0.3, api: 41.0}))] * 3)
    assert (both.slow, both.hosts, both.which_end) == ((), (), False)
    assert list(both.pairs) == [("node0", "node1")]
    # The job's own slow host is still named beside the service.
    three = slow_link_hosts([("node0", LinkRtts((A,), {B: 0.05, C: 180.0, api: 38.0}))], job_addrs=(B, C))
    assert (three.hosts, three.which_end) == ((C,), True)
