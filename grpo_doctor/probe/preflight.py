"""Checks one node makes on its own before any rendezvous: can MASTER_ADDR be resolved and its
port reached (or, on the master, bound), do NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME name
interfaces this node has, and are there as many GPUs as ranks to start.

Every network call has a timeout; a resolver that hangs is abandoned in its thread.

Typical use:
    pre = run_preflight(master_addr, 29500, is_master=False, nproc_per_node=8,
                        environ=os.environ, deadline_mono=time.monotonic() + 60)
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping

import psutil

from grpo_doctor.host.nvml import Nvml
from grpo_doctor.probe.results import (
    PORT_FREE,
    PORT_IN_USE,
    REACHABLE,
    REFUSED,
    TIMED_OUT,
    UNREACHABLE,
    UNRESOLVABLE,
    Preflight,
    Problem,
)

RESOLVE_TIMEOUT_S = 10.0
CONNECT_ATTEMPT_S = 3.0  # one connect; the whole check retries until the deadline
RETRY_PAUSE_S = 0.5
IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def run_preflight(master_addr: str, master_port: int, *, is_master: bool, nproc_per_node: int,
                  environ: Mapping[str, str], deadline_mono: float, nvml: Nvml | None = None) -> Preflight:
    problems: list[Problem] = []
    resolved, resolve_error = resolve(master_addr)
    if resolve_error:
        connect, detail = UNRESOLVABLE, resolve_error
    elif is_master:
        connect, detail = check_port_free(master_port)
    else:
        connect, detail = check_connect(resolved[0], master_port, deadline_mono)
    problems += _connect_problems(master_addr, master_port, connect, detail)
    route = route_address(resolved[0]) if resolved else None
    # Several "nodes" on one host may rendezvous on loopback; from another host it reaches nothing.
    if not is_master and connect != REACHABLE and resolved and all(_is_loopback(a) for a in resolved):
        problems.append(Problem(
            id="rendezvous-failure", severity="critical",
            message=f"MASTER_ADDR={master_addr} is a loopback address: it names this node, not node 0",
            hint="Set MASTER_ADDR to node 0's address as the other nodes see it (e.g. its hostname or "
                 "`hostname -I` on node 0), the same on every node."))
    ifaces = interfaces()
    for variable in IFNAME_VARIABLES:
        if environ.get(variable):
            problems += check_ifname(variable, environ[variable], ifaces)
    gpus = gpus_visible(nvml or Nvml(), environ.get("CUDA_VISIBLE_DEVICES"))
    if gpus is not None and 0 < gpus < nproc_per_node:
        problems.append(Problem(
            id="config-mismatch", severity="critical",
            message=f"{nproc_per_node} ranks per node but {gpus} GPU(s) visible here "
                    f"(CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', 'unset')})",
            hint=f"Start at most {gpus} ranks on this node (--nproc-per-node {gpus}) or make more GPUs visible "
                 "(CUDA_VISIBLE_DEVICES)."))
    return Preflight(master_addr=master_addr, master_port=master_port, resolved=resolved, connect=connect,
                     connect_detail=detail, route_address=route, interfaces=ifaces, gpus_visible=gpus,
                     problems=problems)


def resolve(name: str, timeout_s: float = RESOLVE_TIMEOUT_S) -> tuple[list[str], str]:
    """(addresses, "") or ([], why not). getaddrinfo has no timeout of its own, so it runs in a
    daemon thread that is left behind if the resolver hangs."""
    result: dict[str, object] = {}

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            result["addresses"] = list(dict.fromkeys(info[4][0] for info in infos))
        except OSError as exc:
            result["error"] = f"{exc.strerror or exc}"

    thread = threading.Thread(target=lookup, daemon=True, name="grpo-doctor-resolve")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return [], f"the resolver did not answer within {timeout_s:g} s"
    if "error" in result:
        return [], str(result["error"])
    # IPv4 first: torch's store and gloo connect to the first address they are given.
    addresses = sorted(result["addresses"], key=lambda a: ":" in a)  # type: ignore[arg-type]
    return addresses, ""


def check_connect(address: str, port: int, deadline_mono: float) -> tuple[str, str]:
    """Connect until it works or the deadline passes (the master may not have started yet);
    the verdict is the last attempt's."""
    started = time.monotonic()
    while True:
        attempt_s = max(0.1, min(CONNECT_ATTEMPT_S, deadline_mono - time.monotonic()))
        try:
            with socket.create_connection((address, port), timeout=attempt_s):
                return REACHABLE, f"connected after {time.monotonic() - started:.1f} s"
        except TimeoutError:
            verdict, detail = TIMED_OUT, f"no answer within {attempt_s:.1f} s (packets dropped?)"
        except ConnectionRefusedError:
            verdict, detail = REFUSED, "connection refused (nothing listens on the port yet)"
        except OSError as exc:  # no route (EHOSTUNREACH, ENETUNREACH), or stranger: keep trying
            verdict, detail = UNREACHABLE, exc.strerror or str(exc)
        if time.monotonic() + RETRY_PAUSE_S >= deadline_mono:
            return verdict, f"{detail}; kept trying for {time.monotonic() - started:.0f} s"
        time.sleep(RETRY_PAUSE_S)


def check_port_free(port: int) -> tuple[str, str]:
    """On the master: can its store listen on the port? (As c10d does: SO_REUSEADDR, any address.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
            sock.listen(1)
        except OSError as exc:
            return PORT_IN_USE, exc.strerror or str(exc)
    return PORT_FREE, "the port can be bound"


def route_address(address: str) -> str | None:
    """This node's source address toward `address` (a UDP connect sends nothing)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            return sock.getsockname()[0]
    except OSError:
        return None


def interfaces() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        out[name] = [a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
    return out


def check_ifname(variable: str, value: str, ifaces: dict[str, list[str]]) -> list[Problem]:
    """NCCL's syntax: a comma list of name prefixes; `=` before the list means exact names, `^`
    means every interface but these. Gloo takes exact names. A list that selects no interface
    with an address here fails the job at its first connect."""
    spec = value.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=") or variable.startswith("GLOO")
    names = [n.strip() for n in spec.lstrip("=").split(",") if n.strip()]

    def listed(iface: str) -> bool:
        return any(iface == n if exact else iface.startswith(n) for n in names)

    selected = [i for i, addrs in ifaces.items() if addrs and (not listed(i) if exclude else listed(i))]
    here = ", ".join(f"{i} ({', '.join(a) or 'no address'})" for i, a in ifaces.items()) or "none"
    if not selected:
        return [Problem(id="nccl-error", severity="critical",
                        message=f"{variable}={value} selects no interface with an address on this node "
                                f"(interfaces here: {here})",
                        hint=f"Set {variable} to this node's interface toward the other nodes (one of: "
                             f"{', '.join(ifaces)}), or unset it and let the library choose.")]
    if all(i == "lo" or all(_is_loopback(a) for a in ifaces[i]) for i in selected):
        return [Problem(id="nccl-error", severity="warning",
                        message=f"{variable}={value} selects only the loopback interface: other nodes cannot "
                                "reach this one through it",
                        hint=f"Set {variable} to the interface toward the other nodes (interfaces here: {here}).")]
    return []


def gpus_visible(nvml: Nvml, visible: str | None) -> int | None:
    """GPUs a rank here can use: the driver's count, narrowed by CUDA_VISIBLE_DEVICES. None
    without a driver."""
    if not nvml.available:
        return None
    try:
        count = nvml.device_count()
    except Exception:  # noqa: BLE001 - a broken driver reads as none
        return None
    if visible is None:
        return count
    return min(count, len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")]))


def _is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def _connect_problems(addr: str, port: int, verdict: str, detail: str) -> list[Problem]:
    where = f"MASTER_ADDR:MASTER_PORT={addr}:{port}"
    hints = {
        UNRESOLVABLE: f"MASTER_ADDR={addr} does not resolve on this node: use node 0's IP address, or fix "
                      "/etc/hosts or DNS so every node resolves the name to the same address.",
        REFUSED: "Nothing listens there: start node 0 (NODE_RANK=0) within the rendezvous timeout and use the "
                 "same MASTER_ADDR and MASTER_PORT on every node; a firewall REJECT rule reads the same.",
        TIMED_OUT: f"No answer from {addr}: a firewall or security group drops port {port} (open it between the "
                   "nodes), or MASTER_ADDR is not node 0's address as this node sees it.",
        UNREACHABLE: f"No route to {addr} from this node: MASTER_ADDR is wrong, or the nodes are on "
                     "different networks (check `ip route get ADDR`).",
        PORT_IN_USE: f"Another process listens on port {port} on node 0 (a leftover of an earlier job?): free it "
                     "(`ss -ltnp | grep PORT`) or choose another MASTER_PORT on every node.",
    }
    if verdict not in hints:
        return []
    return [Problem(id="rendezvous-failure", severity="critical",
                    message=f"{where}: {verdict} ({detail})", hint=hints[verdict])]
