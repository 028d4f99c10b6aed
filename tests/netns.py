"""Several "nodes" on one machine, made from Linux network namespaces, for multi-node tests.

Each node is a network namespace whose one cable, `eth0`, plugs into a bridge. The bridge and the
switch-side veth ends live in one more namespace, the switch, so the host's own network is never
touched and deleting the namespaces deletes every interface with them. A process started in a node
also gets a UTS namespace of its own with hostname `node<N>`, and every node's /etc/hosts names all
nodes, so to torchrun and gloo each node looks like a separate host.

Typical use:

    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with NetnsCluster(num_nodes=3) as cluster:
        cluster.block_port(0, 29500)           # connects to node0:29500 now time out
        cluster.throttle(2, rate="20mbit")     # node 2 is the slow one, both ways
        env = {**os.environ, "MASTER_ADDR": cluster.addr(0), "GLOO_SOCKET_IFNAME": "eth0"}
        procs = [cluster.popen(i, ["torchrun", ...], env=env) for i in range(3)]

Needs root, iproute2 (`ip`, `tc`) and util-linux `unshare`; no iptables. A blocked port is a classic
BPF program in direct-action mode on the node's tc ingress hook: it drops, so a connect times out
instead of being refused, and it needs neither cls_u32 nor act_gact (this CI VM's kernel lacks gact).
A throttled link is an htb qdisc; netem only when a delay is asked for (this VM's kernel lacks netem).
"""
from __future__ import annotations

import functools
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

NAME_PREFIX = "gdtest-"
NODE_IFNAME = "eth0"
# ip/tc calls take milliseconds; the timeout only keeps a wedged tool from hanging a test.
COMMAND_TIMEOUT_S = 15.0
# Killed processes are reaped within milliseconds unless stuck in the kernel; then we give up on them.
REAP_TIMEOUT_S = 5.0
NETNS_CONFIG_DIR = Path("/etc/netns")  # `ip netns exec NS` bind-mounts /etc/netns/NS/hosts over /etc/hosts

_cluster_ids = itertools.count()


class NetnsError(RuntimeError):
    """An ip/tc command failed, or the kernel lacks what a request needs."""


@functools.cache
def _tool(name: str) -> str | None:
    # Root's tools live in sbin, which a non-login PATH can lack.
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def _call(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and proc.returncode != 0:
        raise NetnsError(f"`{' '.join(args)}` failed with status {proc.returncode}: {proc.stderr.strip()}")
    return proc


@functools.cache
def netns_unavailable_reason() -> str | None:
    """None where NetnsCluster works here, else why not (for pytest.skip): tried for real, once."""
    if os.geteuid() != 0:
        return f"network namespaces need root; running as uid {os.geteuid()}"
    missing = [name for name in ("ip", "tc", "unshare", "hostname") if _tool(name) is None]
    if missing:
        return f"network-namespace nodes need {', '.join(missing)} (iproute2, util-linux, hostname)"
    try:
        with NetnsCluster(num_nodes=1) as cluster:
            cluster.run(0, ["true"], timeout=COMMAND_TIMEOUT_S, check=True)
    except (NetnsError, OSError, subprocess.SubprocessError) as exc:
        return f"cannot build a network-namespace node here: {exc}"
    return None


@functools.cache
def netem_unavailable_reason() -> str | None:
    """None where `throttle(..., delay=...)` works, else why not: some kernels are built without netem."""
    reason = netns_unavailable_reason()
    if reason:
        return reason
    proc = _call(_tool("unshare"), "--net", _tool("tc"), "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
                 check=False)
    return None if proc.returncode == 0 else f"the kernel has no netem qdisc (tc: {proc.stderr.strip()})"


def list_namespaces() -> list[str]:
    # Lines read "name (id: 3)" once the namespace has a peer id, else just "name".
    return [line.split()[0] for line in _call(_tool("ip"), "netns", "list").stdout.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but someone else's
        pass
    return True


def _kill_namespace_processes(namespace: str) -> None:
    """SIGKILLs every process in the namespace, including those that left the process group (setsid)."""
    deadline = time.monotonic() + REAP_TIMEOUT_S
    while time.monotonic() < deadline:
        pids = [int(p) for p in _call(_tool("ip"), "netns", "pids", namespace, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)  # a process still forking can add pids between listing and killing


def _delete_namespace(namespace: str) -> None:
    _kill_namespace_processes(namespace)
    _call(_tool("ip"), "netns", "del", namespace)
    shutil.rmtree(NETNS_CONFIG_DIR / namespace, ignore_errors=True)


def remove_stale_namespaces() -> list[str]:
    """Deletes namespaces that a crashed or killed test process left behind; best effort.

    A namespace is stale when the pid in its name is no longer running: comparing pids by age would
    delete the clusters of a parallel test worker that happened to start earlier.
    """
    removed = []
    for namespace in list_namespaces():
        match = re.match(rf"{NAME_PREFIX}(\d+)-", namespace)
        if match and not _pid_alive(int(match[1])):
            try:
                _delete_namespace(namespace)
            except (NetnsError, subprocess.SubprocessError):
                continue
            removed.append(namespace)
    return removed


def _drop_tcp_port_bytecode(port: int) -> str:
    """Classic BPF for tc's direct-action mode: drop IPv4 TCP segments to `port`, leave the rest alone.

    The returns are tc verdicts: 2 is TC_ACT_SHOT (drop), 0xFFFFFFFF is TC_ACT_UNSPEC (go on to the
    next filter, so several blocked ports combine). Offsets count from the Ethernet header, which
    cls_bpf puts back in front of the packet on ingress.
    """
    program = [
        (0x28, 0, 0, 12),          # A = EtherType
        (0x15, 0, 8, 0x0800),      # not IPv4: pass
        (0x30, 0, 0, 23),          # A = IP protocol
        (0x15, 0, 6, 6),           # not TCP: pass
        (0x28, 0, 0, 20),          # A = IP flags and fragment offset
        (0x45, 4, 0, 0x1FFF),      # a non-first fragment carries no TCP header: pass
        (0xB1, 0, 0, 14),          # X = IP header length
        (0x48, 0, 0, 16),          # A = TCP destination port
        (0x15, 0, 1, port),        # not our port: pass
        (0x06, 0, 0, 2),           # drop
        (0x06, 0, 0, 0xFFFFFFFF),  # pass
    ]
    return f"{len(program)}," + ",".join(" ".join(str(field) for field in insn) for insn in program)


class NetnsCluster:
    """`num_nodes` network namespaces on one bridge; see the module docstring. Use it as a context manager."""

    def __init__(self, num_nodes: int):
        if not 1 <= num_nodes <= 250:
            raise ValueError(f"num_nodes must be 1..250 (one /24 subnet), got {num_nodes}")
        self.num_nodes = num_nodes
        self.name = f"{NAME_PREFIX}{os.getpid()}-{next(_cluster_ids)}"
        # Each cluster's bridge is isolated, so equal subnets could not collide; distinct ones only
        # keep addresses in logs from two clusters apart.
        subnet_id = zlib.crc32(self.name.encode()) & 0xFFFF
        self._subnet = f"10.{subnet_id >> 8}.{subnet_id & 0xFF}"
        self._switch = f"{self.name}-switch"
        self._nodes = [f"{self.name}-node{node}" for node in range(num_nodes)]
        self._procs: list[subprocess.Popen] = []
        self._ports_blocked_on: set[int] = set()

    def __enter__(self) -> NetnsCluster:
        remove_stale_namespaces()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- what a test asks about a node -------------------------------------------------------
    def namespace(self, node: int) -> str:
        """The node's network namespace, for `ip -n`, `tc -n` or `ip netns exec`."""
        if not 0 <= node < self.num_nodes:
            raise IndexError(f"node {node} is not in this cluster; nodes are 0..{self.num_nodes - 1}")
        return self._nodes[node]

    def addr(self, node: int) -> str:
        self.namespace(node)
        return f"{self._subnet}.{node + 1}"

    def hostname(self, node: int) -> str:
        self.namespace(node)
        return f"node{node}"

    def interfaces(self, node: int) -> list[str]:
        out = _call(_tool("ip"), "-n", self.namespace(node), "-o", "link", "show").stdout
        # Lines read "2: eth0@if5: <BROADCAST,...>"; the peer suffix is not part of the name.
        return [re.match(r"\d+:\s*([^:@\s]+)", line)[1] for line in out.splitlines()]

    # --- running processes in a node ---------------------------------------------------------
    def command(self, node: int, cmd: Sequence[str]) -> list[str]:
        """`cmd` wrapped to run in the node's network namespace and a fresh UTS namespace named for it."""
        # ip netns exec, unshare and sh all exec rather than fork, so the Popen pid is cmd's own.
        return [_tool("ip"), "netns", "exec", self.namespace(node), _tool("unshare"), "--uts",
                "/bin/sh", "-c", 'hostname "$1" && shift && exec "$@"', "sh", self.hostname(node), *cmd]

    def popen(self, node: int, cmd: Sequence[str], **popen_kwargs) -> subprocess.Popen:
        """subprocess.Popen in the node. It leads a new session, so close() can kill its process group.

        An `env` replaces the environment as in Popen; `cmd[0]` is looked up on that env's PATH.
        """
        proc = subprocess.Popen(self.command(node, cmd), start_new_session=True, **popen_kwargs)
        self._procs.append(proc)
        return proc

    def run(self, node: int, cmd: Sequence[str], *, timeout: float = 30.0, check: bool = False,
            capture_output: bool = False, input=None, **popen_kwargs) -> subprocess.CompletedProcess:
        """subprocess.run in the node; on timeout the whole process group is killed, not just cmd."""
        if capture_output:
            popen_kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if input is not None:
            popen_kwargs["stdin"] = subprocess.PIPE
        proc = self.popen(node, cmd, **popen_kwargs)
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_process_group(proc)
            proc.communicate(timeout=REAP_TIMEOUT_S)
            raise
        completed = subprocess.CompletedProcess(list(cmd), proc.returncode, stdout, stderr)
        if check:
            completed.check_returncode()
        return completed

    # --- faults --------------------------------------------------------------------------------
    def throttle(self, node: int, rate: str | None = "20mbit", delay: str | None = None) -> None:
        """Slows traffic to and from the node: shaped on the egress of both ends of its veth pair.

        `rate` and `delay` take tc's units ("20mbit", "10ms"); a delay is added each way and needs
        netem (see netem_unavailable_reason). A second call replaces the first.
        """
        if rate is None and delay is None:
            raise ValueError("throttle needs a rate, a delay or both")
        if delay is not None and netem_unavailable_reason():
            raise NetnsError(f"throttle(delay={delay!r}) needs netem: {netem_unavailable_reason()}")
        for namespace, dev in self._link_ends(node):
            self._unshape(namespace, dev)
            tc = [_tool("tc"), "-n", namespace]
            if delay is not None:
                _call(*tc, "qdisc", "add", "dev", dev, "root", "netem", "delay", delay,
                      *(["rate", rate] if rate else []))
            else:
                # htb sizes its own bursts from the rate; tbf would need them computed here.
                _call(*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
                _call(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate)

    def unthrottle(self, node: int) -> None:
        for namespace, dev in self._link_ends(node):
            self._unshape(namespace, dev)

    def block_port(self, node: int, port: int) -> None:
        """Drops TCP packets arriving for `port` on the node: connects to it time out, as behind a firewall.

        Connections already open to that port are cut too. Several ports can be blocked.
        """
        if not 0 < port < 65536:
            raise ValueError(f"port must be 1..65535, got {port}")
        tc = [_tool("tc"), "-n", self.namespace(node)]
        if node not in self._ports_blocked_on:
            _call(*tc, "qdisc", "add", "dev", NODE_IFNAME, "clsact")
            self._ports_blocked_on.add(node)
        _call(*tc, "filter", "add", "dev", NODE_IFNAME, "ingress", "bpf", "da",
              "bytecode", _drop_tcp_port_bytecode(port))

    def unblock_ports(self, node: int) -> None:
        if node in self._ports_blocked_on:
            _call(_tool("tc"), "-n", self.namespace(node), "qdisc", "del", "dev", NODE_IFNAME, "clsact")
            self._ports_blocked_on.discard(node)

    # --- building and removing -----------------------------------------------------------------
    def _build(self) -> None:
        ip = _tool("ip")
        hosts = "127.0.0.1 localhost\n::1 localhost\n" + "".join(
            f"{self.addr(node)} {self.hostname(node)}\n" for node in range(self.num_nodes))
        for namespace in [self._switch, *self._nodes]:
            _call(ip, "netns", "add", namespace)
            _call(ip, "-n", namespace, "link", "set", "lo", "up")
        _call(ip, "-n", self._switch, "link", "add", "br0", "type", "bridge")
        _call(ip, "-n", self._switch, "link", "set", "br0", "up")
        for node, namespace in enumerate(self._nodes):
            config_dir = NETNS_CONFIG_DIR / namespace
            config_dir.mkdir(parents=True, exist_ok=True)
            (config_dir / "hosts").write_text(hosts)
            _call(ip, "-n", self._switch, "link", "add", f"veth{node}", "type", "veth",
                  "peer", "name", NODE_IFNAME, "netns", namespace)
            _call(ip, "-n", self._switch, "link", "set", f"veth{node}", "master", "br0", "up")
            _call(ip, "-n", namespace, "addr", "add", f"{self.addr(node)}/24", "dev", NODE_IFNAME)
            _call(ip, "-n", namespace, "link", "set", NODE_IFNAME, "up")

    def close(self) -> None:
        """Kills what ran in the nodes, then deletes the namespaces (and with them every interface)."""
        for proc in self._procs:
            _kill_process_group(proc)
        existing = set(list_namespaces())
        # Processes must go first: a namespace lives on, unlisted, while any process is inside it.
        for namespace in self._nodes:
            if namespace in existing:
                _kill_namespace_processes(namespace)
        for proc in self._procs:
            try:
                proc.wait(timeout=REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        for namespace in [*self._nodes, self._switch]:
            if namespace in existing:
                _delete_namespace(namespace)
            shutil.rmtree(NETNS_CONFIG_DIR / namespace, ignore_errors=True)

    def _link_ends(self, node: int) -> list[tuple[str, str]]:
        return [(self.namespace(node), NODE_IFNAME), (self._switch, f"veth{node}")]

    @staticmethod
    def _unshape(namespace: str, dev: str) -> None:
        # Deleting a root qdisc that was never added fails harmlessly; the device falls back to noqueue.
        _call(_tool("tc"), "-n", namespace, "qdisc", "del", "dev", dev, "root", check=False)


def _kill_process_group(proc: subprocess.Popen) -> None:
    # Only while proc is unreaped: its pid, and so its group id, cannot have been reused yet.
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
