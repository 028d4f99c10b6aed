"""supervisor/nccl_ras_client.py: `ncclras` on PATH (a fake printing a real report) or NCCL's RAS port (a
fake server speaking NCCL's protocol, src/ras/client.cc), bounded in time and bytes, never raising."""
from __future__ import annotations

import socket
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import free_port

from grpo_doctor.supervisor.nccl_ras_client import query_nccl_ras, ras_address

RAS = Path(__file__).resolve().parents[1] / "data" / "nccl_ras"


def _fake_ncclras(bin_dir: Path, body: str) -> Path:
    """An executable `ncclras` in `bin_dir`: a Python script that records its arguments, then runs `body`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "ncclras"
    script.write_text(f"#!{sys.executable}\nimport sys, time, pathlib\n"
                      f"pathlib.Path({str(bin_dir / 'argv')!r}).write_text(' '.join(sys.argv[1:]))\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def closed_port(monkeypatch):
    port = free_port()  # nobody listens there: a socket fallback is refused at once
    monkeypatch.setenv("NCCL_RAS_ADDR", f"127.0.0.1:{port}")
    return port


def test_ncclras_on_path_is_run_and_its_real_report_parsed(tmp_path, monkeypatch, closed_port):
    report = RAS / "example_incomplete.txt"
    _fake_ncclras(tmp_path / "bin", f"sys.stdout.write(open({str(report)!r}).read())")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    result = query_nccl_ras(timeout_s=10)
    assert result is not None and result.via == "ncclras" and result.complete and not result.truncated
    assert result.report.verdict == "incomplete"
    [(comm, rank)] = result.report.missing_ranks
    assert (comm.label, rank.rank, rank.node, rank.pid, rank.gpu) == ("#0-0", 7, "node1", 3748990, 3)
    args = (tmp_path / "bin" / "argv").read_text().split()
    assert args[0] == "-t" and 1 <= int(args[1]) <= 6 and "-v" in args  # RAS gets a share of the 10 s
    assert result.to_dict()["report"]["verdict"] == "incomplete"


def test_json_format_passes_f_json_and_reads_the_json(tmp_path, monkeypatch, closed_port):
    _fake_ncclras(tmp_path / "bin", f"sys.stdout.write(open({str(RAS / 'guide_status.json')!r}).read())")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    result = query_nccl_ras(timeout_s=10, json_format=True, verbose=False)
    assert result.report.form == "json" and result.report.communicators[0].missing[0].pid == 1524345
    args = (tmp_path / "bin" / "argv").read_text().split()
    assert args[-2:] == ["-f", "json"] and "-v" not in args


def test_no_ncclras_on_path_and_nothing_on_the_port_returns_none_quickly(tmp_path, monkeypatch, closed_port):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory
    start = time.monotonic()
    assert query_nccl_ras(timeout_s=10) is None
    assert time.monotonic() - start < 1.0


def test_a_hung_ncclras_is_killed_at_the_timeout_and_what_it_printed_is_kept(tmp_path, monkeypatch, closed_port):
    head = (RAS / "example_dead.txt").read_text()
    _fake_ncclras(tmp_path / "bin", f"sys.stdout.write({head!r}); sys.stdout.flush(); time.sleep(60)")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    start = time.monotonic()
    result = query_nccl_ras(timeout_s=1.5)
    assert time.monotonic() - start < 4.0
    assert result is not None and not result.complete and result.report.verdict == "dead"


def test_endless_output_is_cut_at_max_bytes(tmp_path, monkeypatch, closed_port):
    report = (RAS / "issue_1911_mismatch.txt").read_text()
    _fake_ncclras(tmp_path / "bin", f"sys.stdout.write({report!r})\nwhile True: sys.stdout.write('x' * 65536)")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    result = query_nccl_ras(timeout_s=10, max_bytes=200_000)
    assert result.truncated and not result.complete and len(result.raw) <= 200_000
    assert result.report.verdict == "mismatch"


def test_an_ncclras_that_prints_no_report_gives_none(tmp_path, monkeypatch, closed_port):
    _fake_ncclras(tmp_path / "bin", "sys.stderr.write('Connecting to localhost:28028: Connection refused\\n'); "
                                    "sys.exit(1)")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert query_nccl_ras(timeout_s=5) is None


class FakeRas:
    """A RAS client port as NCCL serves it (src/ras/client_support.cc): one command per line, one
    answer per command, the report after STATUS and then the connection closed."""

    def __init__(self, reply: str, json_reply: str | None = None, silent: bool = False) -> None:
        self.reply, self.json_reply, self.silent = reply, json_reply, silent
        self.commands: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            if self.silent:
                time.sleep(5)
                return
            reader, fmt = conn.makefile("r"), "text"
            for line in reader:
                command = line.strip()
                self.commands.append(command)
                upper = command.upper()
                if upper.startswith("CLIENT PROTOCOL"):
                    conn.sendall(b"SERVER PROTOCOL 2\n")
                elif upper.startswith("TIMEOUT") or upper == "SET FORMAT JSON":
                    fmt = "json" if upper == "SET FORMAT JSON" else fmt
                    conn.sendall(b"OK\n")
                elif upper in ("STATUS", "VERBOSE STATUS"):
                    conn.sendall((self.json_reply if fmt == "json" and self.json_reply else self.reply).encode())
                    return

    def close(self) -> None:
        self.server.close()


def test_without_ncclras_the_ras_port_is_asked_in_nccls_protocol(tmp_path, monkeypatch):
    server = FakeRas((RAS / "issue_1762_incomplete.log").read_text())
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("NCCL_RAS_ADDR", f"127.0.0.1:{server.port}")
    try:
        result = query_nccl_ras(timeout_s=10)
    finally:
        server.close()
    assert result.via == f"socket 127.0.0.1:{server.port}" and result.complete
    assert result.report.verdict == "incomplete" and result.report.missing_ranks[0][1].node == "10.4.109.13"
    assert server.commands[0] == "CLIENT PROTOCOL 2" and server.commands[-1] == "VERBOSE STATUS"
    assert server.commands[1].startswith("TIMEOUT ") and 1 <= int(server.commands[1].split()[1]) <= 6


def test_the_port_in_json_format(tmp_path, monkeypatch):
    server = FakeRas("", json_reply=(RAS / "guide_status.json").read_text())
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        result = query_nccl_ras(timeout_s=10, json_format=True, address=f"127.0.0.1:{server.port}")
    finally:
        server.close()
    assert "SET FORMAT json" in server.commands and result.report.form == "json"


def test_a_port_that_accepts_and_never_answers_costs_the_timeout_and_gives_none(tmp_path, monkeypatch):
    server = FakeRas("", silent=True)
    monkeypatch.setenv("PATH", str(tmp_path))
    start = time.monotonic()
    try:
        assert query_nccl_ras(timeout_s=1.0, address=f"127.0.0.1:{server.port}") is None
    finally:
        server.close()
    assert time.monotonic() - start < 2.5


def test_bad_arguments_and_addresses_never_raise(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    for kwargs in ({"timeout_s": -1}, {"timeout_s": float("nan")}, {"address": "[::1"}, {"address": "host:port:x"},
                   {"timeout_s": "soon"}, {"max_bytes": -5}, {"binary": ""}):
        assert query_nccl_ras(**{"timeout_s": 0.5, **kwargs}) is None
    assert ras_address("") == ("localhost", 28028)
    assert ras_address("10.0.0.5:29000") == ("10.0.0.5", 29000)
    assert ras_address("[::1]:29001") == ("::1", 29001)
    assert ras_address(":99999") == ("localhost", 28028)
