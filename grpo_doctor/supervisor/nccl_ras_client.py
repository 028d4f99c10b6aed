"""Ask NCCL's RAS for the job's state (NCCL >= 2.24): `ncclras` when it is on PATH, else NCCL's RAS port.

Every NCCL process of a job runs a RAS thread; the one on this node answers clients on localhost:28028
(`NCCL_RAS_ADDR`, "host:port", changes it) with the whole job's state: which processes are dead or gave
no data, and for each communicator the missing ranks with their node, GPU and pid. watch calls
`query_nccl_ras` when a job hangs; the answer is read by logs/nccl_ras.py (docs/findings.md, `nccl-ras`).

The protocol is NCCL's src/ras/client.cc: lines of text; "CLIENT PROTOCOL 2" is answered by "SERVER
PROTOCOL <n>", "TIMEOUT <s>" (how long RAS waits for the other processes) and "SET FORMAT json" (NCCL >=
2.28.7) by "OK", and "STATUS" / "VERBOSE STATUS" by the report, after which NCCL closes the connection.

Typical use:
    result = query_nccl_ras(timeout_s=10)
    if result is not None and result.report.verdict != "ok":
        print(result.report.describe())
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from grpo_doctor.logs.nccl_ras import RasReport, parse

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 28028  # NCCL_RAS_CLIENT_PORT
ADDR_VARIABLE = "NCCL_RAS_ADDR"
CLIENT_PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL
MAX_BYTES = 4 << 20
_READ_BYTES = 65536
_RAS_SHARE = 0.6  # of the time left, what RAS itself may spend gathering the other processes' data


@dataclass(frozen=True)
class RasQuery:
    """What RAS answered: `report` (parsed), `raw` (the text as received, at most `max_bytes` bytes,
    `truncated` when cut there), `via` ("ncclras" or "socket <host>:<port>"), `elapsed_s`, and
    `complete` (False when the time ran out before RAS finished: `report` holds what came)."""

    report: RasReport
    raw: str
    via: str
    elapsed_s: float
    truncated: bool = False
    complete: bool = True

    def to_dict(self, raw_chars: int = 16_000) -> dict[str, Any]:
        """JSON-ready; `raw` cut to its first `raw_chars` characters."""
        return {"via": self.via, "elapsed_s": round(self.elapsed_s, 3), "truncated": self.truncated,
                "complete": self.complete, "report": self.report.to_dict(), "raw": self.raw[:raw_chars]}


def query_nccl_ras(timeout_s: float = 10.0, *, json_format: bool = False, verbose: bool = True,
                   address: str | None = None, max_bytes: int = MAX_BYTES,
                   binary: str = "ncclras") -> RasQuery | None:
    """NCCL RAS's report on the job, parsed, or None when nobody answered with one.

    Runs `binary` (`ncclras`) when it is on PATH, else (or when it printed no report: an ncclras without
    `-f`, NCCL < 2.28.7, refuses `json_format`) speaks NCCL's
    RAS protocol to `address` ("host:port"; default `$NCCL_RAS_ADDR`, else localhost:28028).
    `json_format` asks for `ncclras -f json` (NCCL >= 2.28.7; an older NCCL answers in text, also
    read); `verbose` for `-v` (outliers listed in full).

    Bounded: returns within about `timeout_s` seconds in all (a hung `ncclras` is killed with its
    process group; RAS is told to spend at most 60 % of the time left gathering data), and keeps at most
    `max_bytes` bytes of output. Never raises: a missing binary, a refused or silent port, a RAS that
    answers garbage, or any other error gives None. Nothing is ever written to the RAS port but the
    status query."""
    try:
        deadline = time.monotonic() + max(0.0, float(timeout_s))
        path = shutil.which(binary) if binary else None
        if path is not None:
            result = _run_client(path, deadline, json_format, verbose, address, max_bytes)
            if result is not None:
                return result
        return _ask_socket(deadline, json_format, verbose, address, max_bytes)
    except Exception:  # noqa: BLE001 - a diagnostic aid must never break watch
        return None


def ras_address(address: str | None = None) -> tuple[str, int]:
    """(host, port) of `address` or `$NCCL_RAS_ADDR` ("host:port", "[v6addr]:port", "host" or ":port"),
    with NCCL's defaults for what it leaves out."""
    text = (address if address is not None else os.environ.get(ADDR_VARIABLE, "")).strip()
    host, port = DEFAULT_HOST, DEFAULT_PORT
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        host = inside or host
        text = rest
        if text.startswith(":") and text[1:].isdigit():
            port = int(text[1:])
    elif text.count(":") == 1:
        name, _, number = text.partition(":")
        host = name or host
        port = int(number) if number.isdigit() else port
    elif text and ":" not in text:
        host = text
    return host, port if 0 < port < 65536 else DEFAULT_PORT


def _run_client(path: str, deadline: float, json_format: bool, verbose: bool, address: str | None,
                max_bytes: int) -> RasQuery | None:
    start = time.monotonic()
    args = [path, "-t", str(_ras_timeout(deadline))]
    if verbose:
        args.append("-v")
    if json_format:
        args += ["-f", "json"]
    if address is not None:
        host, port = ras_address(address)
        args += ["-h", host, "-p", str(port)]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    chunks: list[bytes] = []
    size, truncated, complete = 0, False, False
    try:
        fd = proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            chunk = os.read(fd, _READ_BYTES)
            if not chunk:
                complete = True
                break
            chunks.append(chunk[:max_bytes - size])
            size += len(chunk)
            if size >= max_bytes:
                truncated = True
                break
    finally:
        _stop(proc)
    return _result(b"".join(chunks), "ncclras", start, truncated, complete)


def _ask_socket(deadline: float, json_format: bool, verbose: bool, address: str | None,
                max_bytes: int) -> RasQuery | None:
    start = time.monotonic()
    host, port = ras_address(address)
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    with socket.create_connection((host, port), timeout=left) as sock:
        reply = _exchange(sock, f"CLIENT PROTOCOL {CLIENT_PROTOCOL}\n", deadline)
        if not reply.upper().startswith("SERVER PROTOCOL"):
            return None
        if not _exchange(sock, f"TIMEOUT {_ras_timeout(deadline)}\n", deadline).upper().startswith("OK"):
            return None
        if json_format:
            _exchange(sock, "SET FORMAT json\n", deadline)  # "ERROR: Unknown command" before 2.28.7: text comes
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(b"VERBOSE STATUS\n" if verbose else b"STATUS\n")
        chunks: list[bytes] = []
        size, truncated, complete = 0, False, False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                chunk = sock.recv(_READ_BYTES)
            except TimeoutError:
                break
            if not chunk:
                complete = True
                break
            chunks.append(chunk[:max_bytes - size])
            size += len(chunk)
            if size >= max_bytes:
                truncated = True
                break
    return _result(b"".join(chunks), f"socket {host}:{port}", start, truncated, complete)


def _exchange(sock: socket.socket, command: str, deadline: float) -> str:
    """Send one command line, return the one-line answer ("" when none came in time)."""
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    sock.sendall(command.encode("ascii"))
    answer = b""
    while b"\n" not in answer and len(answer) < 4096:
        left = deadline - time.monotonic()
        if left <= 0:
            return ""
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096 - len(answer))
        except TimeoutError:
            return ""
        if not chunk:
            break
        answer += chunk
    return answer.decode("utf-8", "replace").strip()


def _result(data: bytes, via: str, start: float, truncated: bool, complete: bool) -> RasQuery | None:
    text = data.decode("utf-8", "replace")
    report = parse(text)
    if report is None:
        return None
    return RasQuery(report=report, raw=text, via=via, elapsed_s=time.monotonic() - start, truncated=truncated,
                    complete=complete and not truncated)


def _ras_timeout(deadline: float) -> int:
    """Whole seconds RAS may wait for the other processes: a share of the time left, at least 1."""
    return max(1, int((deadline - time.monotonic()) * _RAS_SHARE))


def _stop(proc: subprocess.Popen) -> None:
    """End `proc` and its process group if still running, and reap it (bounded)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    if proc.stdout is not None:
        proc.stdout.close()


__all__ = ["ADDR_VARIABLE", "DEFAULT_PORT", "RasQuery", "query_nccl_ras", "ras_address"]
