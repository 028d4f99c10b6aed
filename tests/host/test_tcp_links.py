"""host/tcp_links.py: `ss -tinHe` read back (lines captured from a 3-namespace-node gloo job, node 2 throttled),
the ranks' busy connections kept by socket inode, and a live sample of a real connection on loopback."""
from __future__ import annotations

import os
import shutil
import socket

import pytest

from grpo_doctor.host.tcp_links import links_of, parse_ss, sample_links

# node 0 of three: a busy link to node 2 (throttled), a busy one to node 1, an idle store connection, loopback.
SS = """\
48     353304          10.145.137.1:40377          10.145.137.3:58798 ino:91 sk:1 cgroup:/ <->
\t bbr wscale:10,10 rto:688 rtt:179.662/94.85 ato:40 mss:1448 cwnd:88 bytes_sent:20126576 send 5673943bps pacing_rate 19255760bps delivery_rate 3062464bps busy:24892ms unacked:88 notsent:225880 minrtt:0.007 snd_wnd:1200128
0      0               10.145.137.1:40377          10.145.137.2:58440 ino:92 sk:2 cgroup:/ <->
\t bbr wscale:10,10 rto:208 rtt:6.658/12.141 ato:40 mss:1448 lastsnd:224 lastrcv:152 lastack:152 delivery_rate 3861333328bps app_limited rcv_rtt:0.311 rcv_space:444048 minrtt:0.003
0      0      [::ffff:10.145.137.1]:52864 [::ffff:10.145.137.1]:29500 ino:93 sk:3 cgroup:/ <->
\t bbr rto:204 rtt:0.036/0.036 lastsnd:27840 lastrcv:27840 lastack:27840 app_limited minrtt:0.005
0      0      [::ffff:10.145.137.1]:29500 [::ffff:10.145.137.3]:46762 ino:94 sk:4 cgroup:/ <->
\t bbr rto:208 rtt:6.146/12.162 lastsnd:27836 lastrcv:27836 lastack:27788 app_limited minrtt:0.009
"""


def test_ss_lines_are_read_into_connections_with_the_lower_of_the_two_round_trip_estimates():
    conns = {c.inode: c for c in parse_ss(SS)}
    assert sorted(conns) == [91, 92, 93, 94]
    assert (conns[91].local, conns[91].peer, conns[91].rtt_ms, conns[91].idle_ms) == \
        ("10.145.137.1", "10.145.137.3", 179.662, 0.0)  # no lastsnd: sending now
    assert conns[92].rtt_ms == 0.311  # mostly receiving: its receive-side estimate is the link's
    assert (conns[93].local, conns[93].peer) == ("10.145.137.1", "10.145.137.1")  # IPv4-mapped, unwrapped


def test_only_the_ranks_busy_connections_to_other_hosts_count():
    sample = links_of(parse_ss(SS), {91, 92, 93, 94})
    # 93 is within the node, 94 idle for 28 s (its round trip is from before any slowdown).
    assert sample.addrs == ("10.145.137.1",)
    assert sample.rtt_ms == {"10.145.137.2": 0.311, "10.145.137.3": 179.662}
    assert links_of(parse_ss(SS), {92}).rtt_ms == {"10.145.137.2": 0.311}  # another process's sockets: not ours


def test_damaged_lines_are_skipped():
    assert parse_ss("garbage\n\tno fields\n0 0 a:1 b:2\n\trtt:1/1\n") == []


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs iproute2's ss")
def test_a_real_connection_of_this_process_is_sampled():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    with server, client, peer:
        client.sendall(b"x" * 100_000)
        peer.recv(100_000)
        sample = sample_links([os.getpid()])
    assert sample is not None and sample.rtt_ms == {}  # loopback: within the node, no link
