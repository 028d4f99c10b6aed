"""Alerts that reach people: a webhook POST (`--notify URL`) and a command (`--on-hang-exec`,
`--on-finding-exec`), sent at a hang, at a critical finding at the end, and live (`--alert-live`).

Delivery never blocks or harms the job. Each webhook is posted on its own background thread, each
attempt with a timeout, a bounded number of attempts with backoff; a command runs with a timeout,
the finding as JSON on its stdin and GRPO_DOCTOR_* variables in its environment (alert_payload.py);
of its output watch holds its first and last 64 KiB and counts the rest (`BoundedOutput`), so a
command that floods (`yes`) costs neither memory nor a core. A URL is checked when watch starts
(`url_problem`); a failure at send time, whatever raised it, costs one line naming the target by
`scheme://host/…` only (a webhook URL holds its token in the path), never a thread's traceback. At
watch's exit `close` waits a bounded time for what is pending, then records it as left behind and
ends any command still running. Every outcome is a line of supervisor/<host>/alerts.jsonl.

The command is started on the caller's thread (watch's loop) and reported through `on_spawn`, so
watch keeps it out of the job's process tree before it could end the tree (--on-hang kill).

Typical use:
    alerter = Alerter(AlertSettings(notify_urls=("https://hooks.slack.com/services/T/B/x",)),
                      host="node-1", run_dir=run_dir, out_path=sup_dir / "alerts.jsonl", note=console.note)
    alerter.send("hang", finding_from_hang(report, hang_file))
    alerter.close()   # at most settings.end_wait_s
"""
from __future__ import annotations

import http.client
import ipaddress
import itertools
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from grpo_doctor._version import __version__
from grpo_doctor.supervisor.alert_payload import alert_payload, alert_text, exec_environment, webhook_body

MAX_OUTPUT_CHARS = 2000  # of the command's output kept in alerts.jsonl (its tail, and its head when cut)
HEAD_BYTES = 64 * 1024  # of the command's output held in memory, first and last; the rest is counted
TAIL_BYTES = 64 * 1024
READ_BYTES = 64 * 1024
PACE_S = 0.002  # between reads once the output is past both bounds: at most 32 MB/s drained
OUTPUT_END_WAIT_S = 2.0  # for the output's end once the command is gone
MAX_NOTIFIED_AT_END = 5  # chat messages at the end of one job; the report holds the rest


@dataclass(frozen=True)
class AlertSettings:
    notify_urls: tuple[str, ...] = ()
    on_hang_exec: str | None = None  # a shell command line
    on_finding_exec: str | None = None
    live: bool = False  # also alert on the first critical finding seen while the job runs
    attempt_timeout_s: float = 5.0  # each POST
    num_attempts: int = 3
    backoff_s: float = 1.0  # before the second attempt; doubled before each later one
    exec_timeout_s: float = 30.0
    end_wait_s: float = 10.0  # the longest watch's exit waits for pending alerts

    @property
    def enabled(self) -> bool:
        return bool(self.notify_urls or self.on_hang_exec or self.on_finding_exec)


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a webhook (None when it can): http:// or https://, a host that can be looked
    up (a name, an IPv4 address or a bracketed IPv6 one), a port from 1 to 65535, and no space or
    control character anywhere. Checked before the job starts, so that no alert is lost at a hang."""
    shown = shown_url(url)
    if _UNSENDABLE.search(url):
        return f"--notify {shown}: the URL holds a space or a control character"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", a non-numeric port
        return f"--notify {shown}: not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return f"--notify {shown}: only http:// and https:// URLs are accepted"
    if not parts.hostname:
        return f"--notify {shown}: the URL names no host"
    if port == 0:
        return f"--notify {shown}: port 0 cannot be connected to"
    host = parts.hostname
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return f"--notify {shown}: {host!r} is not an IPv6 address"
    elif not _HOST.fullmatch(host) or len(host) > 253:
        return f"--notify {shown}: {host[:60]!r} is not a host name (letters, digits, '-' and '.', at most 63 a label)"
    return None


_UNSENDABLE = re.compile(r"[\x00-\x20\x7f]")
_HOST = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")


def shown_url(url: str) -> str:
    """`scheme://host[:port]/…`: what may be printed of a webhook URL, whose path and query hold its token.
    Never raises: a URL that does not parse is cut at its first slash after the scheme."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        if parts.scheme and parts.hostname:
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            return f"{parts.scheme}://{host}{port}/…"[:200]
    except ValueError:
        pass
    scheme, sep, rest = url.partition("://")
    if sep:
        return f"{scheme[:10]}://{rest.split('/', 1)[0].rpartition('@')[2][:60]}/…"  # never a user:password
    return (url.split("/", 1)[0][:40] + "/…") if "/" in url else url[:40]


class Alerter:
    def __init__(self, settings: AlertSettings, *, host: str, run_dir: Path, out_path: Path,
                 note: Callable[[str], None], on_spawn: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        self.host = host
        self.run_dir = run_dir
        self.out_path = out_path
        self.note = note
        self._on_spawn = on_spawn
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[str, str, str]] = {}  # delivery id -> (event, finding id, target)
        self._threads: list[threading.Thread] = []
        self._procs: list[subprocess.Popen] = []
        self._ids = itertools.count(1)
        self._closed = False
        self._write_failed = False
        self.records: list[dict[str, Any]] = []
        self.notified_ids: set[str] = set()  # finding ids posted to the webhooks so far

    @property
    def notifies(self) -> bool:
        return bool(self.settings.notify_urls)

    def send(self, event: str, finding: Mapping[str, Any], report: Path | None = None, *, run: bool = True,
             notify: bool = True) -> None:
        """Starts the deliveries of this alert (the command when `run`, the webhooks when `notify`) and
        returns at once. A hang runs --on-hang-exec; any other event --on-finding-exec."""
        payload = alert_payload(event, finding, host=self.host, run_dir=self.run_dir, report=report)
        command = self.settings.on_hang_exec if event == "hang" else self.settings.on_finding_exec
        if command and run:
            self._start_command(command, "--on-hang-exec" if event == "hang" else "--on-finding-exec", payload)
        if not notify:
            return
        self.notified_ids.add(payload["finding"]["id"])
        body = json.dumps(webhook_body(payload), default=str).encode()
        for url in self.settings.notify_urls:
            self._background(payload, shown_url(url), lambda d, url=url: self._post(d, url, body, payload))

    def send_findings(self, findings: list[Mapping[str, Any]], report: Path | None) -> None:
        """At the end of the job: every critical finding (findings.json's dicts) to --on-finding-exec; to
        the webhooks one message per incident (no consequence of another finding), none for a finding
        already posted while the job ran (the hang), at most MAX_NOTIFIED_AT_END."""
        num_notified = 0
        for finding in findings:
            if finding["severity"] != "critical":
                continue
            notify = (self.notifies and finding.get("role") != "consequence"
                      and finding["id"] not in self.notified_ids and num_notified < MAX_NOTIFIED_AT_END)
            num_notified += notify
            self.send("finding", finding, report, notify=notify)

    def close(self, timeout_s: float | None = None) -> None:
        """Waits for pending deliveries at most `timeout_s` (settings.end_wait_s), then leaves them."""
        waited = self.settings.end_wait_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + waited
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._closed = True
            left = [self._pending[d] for d in sorted(self._pending)]
        for event, finding_id, target in left:
            self._record_now(event, finding_id, target, ok=False, attempts=None, elapsed_s=None,
                             outcome=f"still pending when watch exited (waited {waited:g} s): left behind")
            self.note(f"alert to {target} ({finding_id}) still pending after {waited:g} s: left behind")
        for proc in self._procs:
            if proc.poll() is None:
                _end_group(proc)

    # -- deliveries --------------------------------------------------------------------------

    def _background(self, payload: Mapping[str, Any], target: str, deliver: Callable[[int], None]) -> None:
        delivery = next(self._ids)
        with self._lock:
            self._pending[delivery] = (payload["event"], payload["finding"]["id"], target)
        thread = threading.Thread(target=self._guarded, args=(deliver, delivery, payload, target),
                                  name=f"grpo-doctor-alert-{delivery}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guarded(self, deliver: Callable[[int], None], delivery: int, payload: Mapping[str, Any], target: str) -> None:
        """A delivery's thread: whatever goes wrong in it is that alert's one failed line, never a thread
        traceback (and never a word of the URL's path, which holds its token)."""
        start = time.monotonic()
        try:
            deliver(delivery)
        except Exception as exc:  # noqa: BLE001 - the last guard of an alert's thread
            self._done(delivery, payload, target, ok=False, attempts=None, elapsed_s=time.monotonic() - start,
                       outcome=f"{type(exc).__name__} while sending")

    def _post(self, delivery: int, url: str, body: bytes, payload: Mapping[str, Any]) -> None:
        target, start = shown_url(url), time.monotonic()
        outcome, attempt = "", 0
        for attempt in range(1, self.settings.num_attempts + 1):
            if attempt > 1:
                time.sleep(self.settings.backoff_s * 2 ** (attempt - 2))
            ok, retry, outcome = _post_once(url, body, self.settings.attempt_timeout_s)
            if ok or not retry:
                break
        self._done(delivery, payload, target, ok=ok, attempts=attempt, outcome=outcome,
                   elapsed_s=time.monotonic() - start)

    def _start_command(self, command: str, flag: str, payload: Mapping[str, Any]) -> None:
        env = {**os.environ, **exec_environment(payload)}
        try:
            # Its own session: ended as a group at close, and kept apart from the job's tree by watch.
            proc = subprocess.Popen(command, shell=True, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self._record_now(payload["event"], payload["finding"]["id"], flag, ok=False, attempts=1,
                             elapsed_s=0.0, outcome=f"could not start: {exc.strerror}")
            self.note(f"{flag} command could not start: {exc.strerror}")
            return
        if self._on_spawn is not None:
            self._on_spawn(proc.pid)
        self._procs.append(proc)
        stdin = json.dumps(payload, default=str).encode()
        self._background(payload, flag, lambda d: self._wait_command(d, proc, flag, stdin, payload))

    def _wait_command(self, delivery: int, proc: subprocess.Popen, flag: str, stdin: bytes,
                      payload: Mapping[str, Any]) -> None:
        start = time.monotonic()
        output = BoundedOutput()
        reader = threading.Thread(target=output.drain, args=(proc.stdout,), name=f"grpo-doctor-alert-out-{delivery}",
                                  daemon=True)
        reader.start()
        threading.Thread(target=_feed, args=(proc.stdin, stdin), name=f"grpo-doctor-alert-in-{delivery}",
                         daemon=True).start()
        try:
            proc.wait(timeout=self.settings.exec_timeout_s)
            ok = proc.returncode == 0
            outcome = "exit status 0" if ok else _status_text(proc.returncode)
        except subprocess.TimeoutExpired:
            _end_group(proc)
            proc.wait()
            ok, outcome = False, f"timed out after {self.settings.exec_timeout_s:g} s: ended"
        # A process that left the command's session may still hold its output open: not waited for.
        reader.join(timeout=OUTPUT_END_WAIT_S)
        head, tail, num_bytes = output.parts()
        text = tail.decode(errors="replace")[-MAX_OUTPUT_CHARS:]
        last = text.strip().splitlines()[-1][:200] if text.strip() else ""
        extra: dict[str, Any] = {"output_bytes": num_bytes}
        if num_bytes > HEAD_BYTES + TAIL_BYTES:
            extra["output_head"] = head.decode(errors="replace")[:MAX_OUTPUT_CHARS]
            extra["output_dropped_bytes"] = num_bytes - len(head) - len(tail)
        self._done(delivery, payload, flag, ok=ok, attempts=1, outcome=outcome, elapsed_s=time.monotonic() - start,
                   output_tail=text, line_detail=f": {last}" if last and not ok else "", extra=extra)

    # -- records -----------------------------------------------------------------------------

    def _done(self, delivery: int, payload: Mapping[str, Any], target: str, *, ok: bool, attempts: int | None,
              outcome: str, elapsed_s: float, output_tail: str | None = None, line_detail: str = "",
              extra: Mapping[str, Any] | None = None) -> None:
        with self._lock:
            if self._closed:
                return  # close() has recorded it as left behind
            self._pending.pop(delivery, None)
        fid = payload["finding"]["id"]
        self._record_now(payload["event"], fid, target, ok=ok, attempts=attempts, outcome=outcome,
                         elapsed_s=elapsed_s, text=alert_text(payload), output_tail=output_tail, extra=extra)
        if not ok:
            tries = f" after {attempts} attempt(s)" if attempts and attempts > 1 else ""
            self.note(f"alert to {target} ({fid}) failed{tries}: {outcome}{line_detail}")

    def _record_now(self, event: str, finding_id: str, target: str, *, ok: bool, attempts: int | None,
                    outcome: str, elapsed_s: float | None, text: str | None = None,
                    output_tail: str | None = None, extra: Mapping[str, Any] | None = None) -> None:
        record = {"t": round(time.time(), 3), "event": event, "finding_id": finding_id, "target": target, "ok": ok,
                  "attempts": attempts, "outcome": outcome,
                  "elapsed_s": None if elapsed_s is None else round(elapsed_s, 3)}
        if text is not None:
            record["text"] = text
        if output_tail:
            record["output_tail"] = output_tail
        record.update(extra or {})
        with self._lock:
            self.records.append(record)
            try:
                self.out_path.parent.mkdir(parents=True, exist_ok=True)
                with self.out_path.open("a") as f:
                    f.write(json.dumps(record) + "\n")
            except OSError as exc:
                if not self._write_failed:  # the alert itself went out: the record is what is lost, once
                    self._write_failed = True
                    self.note(f"cannot record alerts in {self.out_path}: {exc.strerror}")


def _post_once(url: str, body: bytes, timeout_s: float) -> tuple[bool, bool, str]:
    """(delivered, worth retrying, outcome): a 5xx, a 429, a timeout or a refused connection may pass
    on a later attempt; any other 4xx (a revoked token, a bad body) will not."""
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": f"grpo-doctor/{__version__}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read(65536)
            return True, False, f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return False, exc.code >= 500 or exc.code == 429, f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return False, True, f"no answer within {timeout_s:g} s"
        return False, True, getattr(reason, "strerror", None) or str(reason)
    except TimeoutError:  # the answer started, then stalled
        return False, True, f"no answer within {timeout_s:g} s"
    except OSError as exc:  # a connection reset mid-answer
        return False, True, exc.strerror or type(exc).__name__
    except http.client.HTTPException as exc:  # an answer that is not HTTP (a wrong port, a broken proxy)
        return False, True, f"not an HTTP answer ({type(exc).__name__})"
    except Exception as exc:  # noqa: BLE001 - a URL the checks at start let through: no retry will help
        return False, False, type(exc).__name__


def _feed(stdin: BinaryIO, data: bytes) -> None:
    """The finding to the command's stdin; a command that does not read it is no failure."""
    try:
        stdin.write(data)
    except OSError:
        pass
    finally:
        try:
            stdin.close()
        except OSError:
            pass


class BoundedOutput:
    """What an alert command printed, in bounded memory: its first HEAD_BYTES and last TAIL_BYTES, and
    how many bytes there were. Past both bounds each read is paced (`PACE_S`), so a command that floods
    its output (`yes`) is slowed down by its full pipe rather than spending a core of watch's host."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self.num_bytes = 0

    def drain(self, source: BinaryIO) -> None:
        fd = source.fileno()
        while True:
            try:
                chunk = os.read(fd, READ_BYTES)
            except OSError:
                break
            if not chunk:
                break
            self.add(chunk)
            if self.num_bytes > HEAD_BYTES + TAIL_BYTES:
                time.sleep(PACE_S)
        try:
            source.close()
        except OSError:
            pass

    def add(self, chunk: bytes) -> None:
        with self._lock:
            self.num_bytes += len(chunk)
            room = HEAD_BYTES - len(self._head)
            if room > 0:
                self._head += chunk[:room]
                chunk = chunk[room:]
            if not chunk:
                return
            self._tail.append(chunk)
            self._tail_bytes += len(chunk)
            while self._tail_bytes - len(self._tail[0]) >= TAIL_BYTES:
                self._tail_bytes -= len(self._tail.popleft())

    def parts(self) -> tuple[bytes, bytes, int]:
        """(head, tail, total bytes): the first HEAD_BYTES and the last TAIL_BYTES (the two overlap when
        the output was shorter than both together: then nothing was dropped)."""
        with self._lock:
            head = bytes(self._head)
            return head, (head + b"".join(self._tail))[-TAIL_BYTES:], self.num_bytes


def _status_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _end_group(proc: subprocess.Popen) -> None:
    """The command and whatever it started in its session: SIGKILL (it had its time)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
