"""How the watches of one job's nodes reach each other: one small interface, two ways.

A message is one JSON object a node publishes under a kind ("beat", "stacks", "verdict"); each node
has at most one message of each kind, which the next one replaces, and every message carries the
node's `node` id and a `seq` that grows with each message it publishes. `read(kind, nodes)` returns
the latest message of that kind of each of those nodes that has one.

- `DirChannel`: the shared run directory. A node writes only its own files, `supervisor/<host>/
  fleet-<kind>.json`, each replaced atomically through a temporary file of a unique name
  (schema/safe_write.py), so a reader never sees half a message; it finds the other nodes by their beat files. Leftovers of an
  earlier job in a reused directory (a beat written long before this watch started) are ignored.
- `StoreChannel`: PyTorch's c10d TCPStore, hosted by node 0's watch next to the job's master
  (MASTER_ADDR, port MASTER_PORT + 11 or --fleet-port), for nodes that each have their own run
  directory. Used only where torch can be imported in watch's environment; torch is imported on
  first use, on the fleet's own thread.
- `Channels`: several at once (`--fleet auto` uses both): a message goes to each, and of the copies
  read back the one with the highest `seq` wins.

Every call may block for at most `timeout_s` and raises `ChannelError` (an OSError) when the other
side cannot be reached; only the fleet's background thread calls them, never the job's path or
watch's main loop.

Typical use:
    channel = DirChannel(RunPaths(run_dir), host="node1", start_t=time.time())
    channel.publish("beat", 1, b'{"node": 1, "seq": 7, ...}')
    channel.read("beat", [0, 2])          # {0: {"node": 0, "seq": 12, ...}}  (node 2 not heard of)
"""
from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.run_paths import FLEET_FILES
from grpo_doctor.schema.safe_read import read_bytes
from grpo_doctor.schema.safe_write import write_file

KINDS = tuple(FLEET_FILES)
STORE_PORT_OFFSET = 11  # the store's default port is the job's MASTER_PORT + this
STORE_PREFIX = "grpo-doctor/fleet"
LEFTOVER_S = 300.0  # a beat file written this long before this watch started is an earlier job's
MAX_MESSAGE_BYTES = 64 * 2**20  # far above a verdict of 1,000 ranks; a larger file is no message of ours
REMAP_EVERY_S = 2.0  # how often a directory channel lists supervisor/ for nodes it has not found yet


class ChannelError(OSError):
    """The channel cannot be used now (the store is not up yet, or gone; the directory cannot be written)."""


class Channel:
    """The interface: `publish` this node's message of a kind, `read` the other nodes' latest ones."""

    name = "channel"

    def publish(self, kind: str, node: int, data: bytes) -> None:
        raise NotImplementedError

    def read(self, kind: str, nodes: Iterable[int]) -> dict[int, dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def decode(data: bytes | str) -> dict[str, Any] | None:
    """A message read back, or None when it is not one (damaged, cut, another tool's file)."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if type(message) is not dict or type(message.get("node")) is not int or type(message.get("seq")) is not int:
        return None
    return message


class DirChannel(Channel):
    """Messages as files under the shared run directory's supervisor/<host>/."""

    name = "shared run directory"

    def __init__(self, paths: RunPaths, host: str, start_t: float, *, readable: bool = True) -> None:
        self.paths = paths
        self.own = paths.watch_files(host)
        self.start_t = start_t
        self.readable = readable  # False: publish only (the beat, so that the report writer can be chosen)
        self._dirs: dict[int, Path] = {}  # node -> its watch's directory
        self._mapped_mono = float("-inf")

    def publish(self, kind: str, node: int, data: bytes) -> None:
        write_file(self.own.fleet_file(kind), data)  # atomic, through a temporary file of a unique name

    def read(self, kind: str, nodes: Iterable[int]) -> dict[int, dict[str, Any]]:
        if not self.readable:
            return {}
        nodes = list(nodes)
        if any(n not in self._dirs for n in nodes) and time.monotonic() - self._mapped_mono >= REMAP_EVERY_S:
            self.map_nodes()
        out = {}
        for node in nodes:
            directory = self._dirs.get(node)
            message = _read_file(directory / FLEET_FILES[kind]) if directory is not None else None
            if message is not None and message["node"] == node:
                out[node] = message
        return out

    def hosts_seen(self) -> dict[int, str]:
        """node -> the directory name of every other node's watch found in this run directory."""
        return {node: d.name for node, d in self._dirs.items()}

    def map_nodes(self) -> None:
        """Finds the other nodes' directories by their beat files (node id inside), the newest per node."""
        self._mapped_mono = time.monotonic()
        newest: dict[int, tuple[float, Path]] = {}
        try:
            candidates = [p for p in self.paths.supervisor.iterdir() if p.name != self.own.root.name]
        except OSError:
            return
        for directory in candidates:
            beat = _read_file(directory / FLEET_FILES["beat"])
            t = beat.get("t") if beat is not None else None
            if type(t) not in (int, float) or t < self.start_t - LEFTOVER_S:
                continue
            if beat["node"] not in newest or t > newest[beat["node"]][0]:
                newest[beat["node"]] = (t, directory)
        self._dirs.update({node: directory for node, (_, directory) in newest.items()})


def _read_file(path: Path) -> dict[str, Any] | None:
    try:  # a FIFO there is never opened, a device never read, a larger file refused (schema/safe_read.py)
        return decode(read_bytes(path, cap=MAX_MESSAGE_BYTES))
    except OSError:  # UnreadableFile is one
        return None


class StoreChannel(Channel):
    """Messages as keys of a c10d TCPStore that node 0's watch hosts at (addr, port)."""

    name = "TCPStore"

    def __init__(self, addr: str, port: int, *, host_it: bool, timeout_s: float = 5.0) -> None:
        self.addr, self.port, self.host_it, self.timeout_s = addr, port, host_it, timeout_s
        self._store = None
        self._known: set[str] = set()  # keys seen to exist: a get of a missing key would wait its timeout

    @property
    def where(self) -> str:
        return f"{self.addr}:{self.port}"

    def open(self) -> None:
        """Hosts the store (node 0) or connects to it; ChannelError while it cannot (not up yet, refused)."""
        if self._store is not None:
            return
        if not self.host_it:
            _probe(self.addr, self.port, self.timeout_s)  # a client to a store not up would retry and log for long
        TCPStore = _import_store()
        try:
            self._store = TCPStore(self.addr, self.port, is_master=self.host_it, wait_for_workers=False,
                                   timeout=timedelta(seconds=self.timeout_s))
        except (RuntimeError, ValueError, OSError) as exc:  # DistNetworkError is a RuntimeError
            raise ChannelError(f"TCPStore at {self.where}: {_first_line(exc)}") from None

    def publish(self, kind: str, node: int, data: bytes) -> None:
        self._call(lambda store: store.set(_key(kind, node), data))

    def read(self, kind: str, nodes: Iterable[int]) -> dict[int, dict[str, Any]]:
        keys = {_key(kind, n): n for n in nodes}
        unknown = [k for k in keys if k not in self._known]
        for key in unknown:
            if self._call(lambda store, key=key: store.check([key])):
                self._known.add(key)
        present = [k for k in keys if k in self._known]
        if not present:
            return {}
        values = self._call(lambda store: store.multi_get(present))
        out = {}
        for key, value in zip(present, values, strict=True):
            message = decode(value)
            if message is not None and message["node"] == keys[key]:
                out[keys[key]] = message
        return out

    def close(self) -> None:
        self._store = None

    def _call(self, op):
        if self._store is None:
            self.open()
        try:
            return op(self._store)
        except (RuntimeError, ValueError, OSError) as exc:
            self._store = None  # reconnect on the next call
            raise ChannelError(f"TCPStore at {self.where}: {_first_line(exc)}") from None


def _key(kind: str, node: int) -> str:
    return f"{STORE_PREFIX}/{kind}/{node}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _probe(addr: str, port: int, timeout_s: float) -> None:
    try:
        with socket.create_connection((addr, port), timeout=min(timeout_s, 2.0)):
            pass
    except OSError as exc:
        raise ChannelError(f"TCPStore at {addr}:{port} not reachable: {exc.strerror or exc}") from None


def _import_store():
    """torch's TCPStore, its C++ warnings (a timed-out poll, a retried connect) kept off watch's stderr."""
    quiet = "TORCH_CPP_LOG_LEVEL" not in os.environ
    if quiet:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"  # read once, when torch's C++ library loads
    try:
        from torch.distributed import TCPStore
    except Exception as exc:  # noqa: BLE001 - torch absent or broken: the channel is, nothing else
        raise ChannelError(f"torch cannot be imported here ({type(exc).__name__}): no TCPStore") from None
    finally:
        if quiet:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
    return TCPStore


def torch_importable() -> bool:
    """Whether torch is installed in watch's environment (found, not imported)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


class Channels(Channel):
    """Several channels as one: published to each, read from each, the highest `seq` of a node wins.
    A channel that fails is skipped for that call; `errors` keeps the latest failure of each."""

    def __init__(self, channels: Sequence[Channel]) -> None:
        self.channels = list(channels)
        self.errors: dict[str, str] = {}
        self.name = " and ".join(c.name for c in self.channels)

    def publish(self, kind: str, node: int, data: bytes) -> None:
        failures = 0
        for channel in self.channels:
            try:
                channel.publish(kind, node, data)
                self.errors.pop(channel.name, None)
            except OSError as exc:
                failures += 1
                self.errors[channel.name] = str(exc)
        if failures == len(self.channels):
            raise ChannelError("; ".join(self.errors.values()))

    def read(self, kind: str, nodes: Iterable[int]) -> dict[int, dict[str, Any]]:
        nodes = list(nodes)
        out: dict[int, dict[str, Any]] = {}
        for channel in self.channels:
            try:
                found = channel.read(kind, nodes)
            except OSError as exc:
                self.errors[channel.name] = str(exc)
                continue
            for node, message in found.items():
                if node not in out or message["seq"] > out[node]["seq"]:
                    out[node] = message
        return out

    def close(self) -> None:
        for channel in self.channels:
            channel.close()


def store_address(master_addr: str | None, master_port: int | None, command: Sequence[str],
                  port: int | None = None) -> tuple[str, int] | None:
    """Where node 0's watch hosts the store: the job's master address and MASTER_PORT + 11 (or `port`),
    from the environment or else the launch command's own flags (torchrun --master-addr/--master-port,
    --rdzv-endpoint); None where no master address is known."""
    flags = _launch_flags(command)
    addr = master_addr or flags.get("master_addr")
    master = master_port or _int(flags.get("master_port"))
    endpoint = flags.get("rdzv_endpoint")
    if endpoint and (addr is None or master is None):
        host, _, port_text = endpoint.rpartition(":")
        addr, master = addr or host or endpoint, master or _int(port_text)
    if not addr:
        return None
    chosen = port or (master or 29500) + STORE_PORT_OFFSET
    return addr, chosen if chosen <= 65535 else chosen - 65535 + 1024


def _launch_flags(command: Sequence[str]) -> dict[str, str]:
    out = {}
    names = {"--master-addr": "master_addr", "--master_addr": "master_addr", "--master-port": "master_port",
             "--master_port": "master_port", "--rdzv-endpoint": "rdzv_endpoint", "--rdzv_endpoint": "rdzv_endpoint"}
    args = list(command)
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in names and names[name] not in out:
            if eq:
                out[names[name]] = value
            elif i + 1 < len(args):
                out[names[name]] = args[i + 1]
    return out


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdecimal() and 0 < int(text) < 65536 else None
