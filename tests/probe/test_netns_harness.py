"""The network-namespace harness that multi-node probe tests stand on: nodes, faults, cleanup."""
from __future__ import annotations

import json
import select
import subprocess
import sys
import time

import pytest
from netns import (
    NAME_PREFIX,
    NETNS_CONFIG_DIR,
    NetnsCluster,
    list_namespaces,
    netem_unavailable_reason,
    netns_unavailable_reason,
)

pytestmark = pytest.mark.skipif(netns_unavailable_reason() is not None,
                                reason=str(netns_unavailable_reason()))

# Listens on the ports in argv; per connection reads to EOF, then answers with the byte count.
SERVER = """
import select, socket, sys
listeners = []
for port in sys.argv[1:]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", int(port)))
    sock.listen(8)
    listeners.append(sock)
print("listening", flush=True)
while True:
    for sock in select.select(listeners, [], [])[0]:
        conn, _ = sock.accept()
        with conn:
            num_bytes = 0
            while chunk := conn.recv(1 << 16):
                num_bytes += len(chunk)
            conn.sendall(str(num_bytes).encode())
"""

# Connects to argv host:port, sends argv bytes, prints how it went and how long the transfer took.
CLIENT = """
import json, socket, sys, time
host, port, num_bytes, connect_timeout_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
start = time.monotonic()
try:
    with socket.create_connection((host, port), timeout=connect_timeout_s) as sock:
        sock.settimeout(20)
        sock.sendall(b"x" * num_bytes)
        sock.shutdown(socket.SHUT_WR)
        outcome, reply = "connected", sock.recv(64).decode()
except socket.timeout:
    outcome, reply = "timeout", ""
except ConnectionRefusedError:
    outcome, reply = "refused", ""
print(json.dumps({"outcome": outcome, "reply": reply, "elapsed_s": time.monotonic() - start}))
"""

TRANSFER_BYTES = 2_000_000


def start_server(cluster: NetnsCluster, node: int, *ports: int) -> subprocess.Popen:
    server = cluster.popen(node, [sys.executable, "-c", SERVER, *map(str, ports)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([server.stdout], [], [], 10)
    assert ready and server.stdout.readline().strip() == "listening", server.stderr.read()
    return server


def connect(cluster: NetnsCluster, node: int, host: str, port: int, num_bytes: int = 1,
            connect_timeout_s: float = 5.0) -> dict:
    done = cluster.run(node, [sys.executable, "-c", CLIENT, host, str(port), str(num_bytes), str(connect_timeout_s)],
                       timeout=30, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_nodes_reach_each_other_over_tcp_by_address_and_hostname():
    with NetnsCluster(num_nodes=3) as cluster:
        start_server(cluster, 0, 29500)
        assert cluster.addr(0) != cluster.addr(2)
        assert connect(cluster, 2, cluster.addr(0), 29500, num_bytes=1000)["reply"] == "1000"
        assert connect(cluster, 1, "node0", 29500, num_bytes=10)["reply"] == "10"


def test_each_node_has_its_own_hostname_loopback_and_eth0():
    with NetnsCluster(num_nodes=2) as cluster:
        for node in range(2):
            assert cluster.hostname(node) == f"node{node}"
            assert cluster.run(node, ["hostname"], capture_output=True, text=True).stdout.strip() == f"node{node}"
            assert cluster.interfaces(node) == ["lo", "eth0"]
        start_server(cluster, 1, 29400)
        assert connect(cluster, 1, "127.0.0.1", 29400)["outcome"] == "connected"


def test_blocked_port_times_out_while_another_port_connects():
    with NetnsCluster(num_nodes=2) as cluster:
        start_server(cluster, 0, 29500, 29501)
        cluster.block_port(0, 29500)
        blocked = connect(cluster, 1, cluster.addr(0), 29500, connect_timeout_s=1.0)
        assert blocked["outcome"] == "timeout", blocked
        assert connect(cluster, 1, cluster.addr(0), 29501)["outcome"] == "connected"
        # Without the filter a port nobody listens on is refused at once: the drop is what makes it a timeout.
        assert connect(cluster, 1, cluster.addr(0), 29502)["outcome"] == "refused"
        cluster.unblock_ports(0)
        assert connect(cluster, 1, cluster.addr(0), 29500)["outcome"] == "connected"


def test_throttled_node_is_slower_to_and_from_than_an_unthrottled_pair():
    with NetnsCluster(num_nodes=3) as cluster:
        start_server(cluster, 0, 29500)
        start_server(cluster, 2, 29500)
        cluster.throttle(2, rate="20mbit")

        def transfer_s(src: int, dst: int) -> float:
            result = connect(cluster, src, cluster.addr(dst), 29500, num_bytes=TRANSFER_BYTES)
            assert result["reply"] == str(TRANSFER_BYTES), result
            return result["elapsed_s"]

        unthrottled_s = min(transfer_s(1, 0) for _ in range(2))
        to_throttled_s = transfer_s(0, 2)
        from_throttled_s = transfer_s(2, 0)
        # 2 MB at 20 Mbit/s takes 0.8 s however busy the machine; the unthrottled pair, milliseconds.
        assert to_throttled_s > max(0.4, 3 * unthrottled_s), (unthrottled_s, to_throttled_s)
        assert from_throttled_s > max(0.4, 3 * unthrottled_s), (unthrottled_s, from_throttled_s)


@pytest.mark.skipif(netem_unavailable_reason() is not None, reason=str(netem_unavailable_reason()))
def test_throttle_delay_adds_latency_each_way():
    with NetnsCluster(num_nodes=2) as cluster:
        start_server(cluster, 0, 29500)
        cluster.throttle(1, rate=None, delay="100ms")
        # A connect is one round trip: 100 ms out and 100 ms back.
        assert connect(cluster, 1, cluster.addr(0), 29500)["elapsed_s"] > 0.15


def test_throttle_with_a_delay_says_netem_is_missing_where_it_is():
    if netem_unavailable_reason() is None:
        pytest.skip("this kernel has netem")
    with NetnsCluster(num_nodes=1) as cluster, pytest.raises(RuntimeError, match="netem"):
        cluster.throttle(0, delay="10ms")


def process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def host_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10, check=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


def test_nothing_of_the_cluster_remains_after_the_block_even_with_processes_running():
    links_before = host_links()
    with NetnsCluster(num_nodes=2) as cluster:
        # The bridge and the switch-side veths live in a namespace of their own, never on the host.
        assert host_links() == links_before
        # One sleeper in the popen's process group, one that escaped it with setsid.
        proc = cluster.popen(1, ["sh", "-c", "setsid sleep 60 & echo $!; exec sleep 60"],
                             stdout=subprocess.PIPE, text=True)
        escaped_pid = int(proc.stdout.readline())
        cluster.throttle(0)
        cluster.block_port(1, 29500)
        namespaces = [cluster.namespace(node) for node in range(2)]
        assert set(namespaces) <= set(list_namespaces())
    assert proc.returncode is not None
    deadline = time.monotonic() + 5
    while not process_gone(escaped_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(escaped_pid)
    assert not any(name.startswith(f"{cluster.name}-") for name in list_namespaces())
    assert not any(path.name.startswith(f"{cluster.name}-") for path in NETNS_CONFIG_DIR.glob(f"{NAME_PREFIX}*"))
    assert host_links() == links_before


def test_cluster_is_removed_when_the_block_raises():
    with pytest.raises(KeyboardInterrupt), NetnsCluster(num_nodes=2) as cluster:
        raise KeyboardInterrupt
    assert not any(name.startswith(f"{cluster.name}-") for name in list_namespaces())


def test_namespaces_left_by_a_dead_test_process_are_removed_on_start():
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    stale = f"gdtest-{dead.pid}-0-node0"
    subprocess.run(["ip", "netns", "add", stale], check=True, timeout=10)
    with NetnsCluster(num_nodes=1) as cluster:
        assert stale not in list_namespaces()
        assert cluster.namespace(0) in list_namespaces()
