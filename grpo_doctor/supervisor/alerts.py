"""Alerts that reach people: a webhook POST (`--notify URL`) and a command (`--on-hang-exec`,
`--on-finding-exec`), sent at a hang, at a critical finding at the end, and live (`--alert-live`).

Delivery never blocks or harms the job. Each webhook is posted on its own background thread, each
attempt with a timeout, a bounded number of attempts with backoff; a command runs with a timeout,
the finding as JSON on its stdin and GRPO_DOCTOR_* variables in its environment (alert_payload.py).
A failure costs one line naming the target by `scheme://host/…` only (a webhook URL holds its token
in the path). At watch's exit `close` waits a bounded time for what is pending, then records it as
left behind and ends any command still running. Every outcome is a line of supervisor/<host>/alerts.jsonl.

The command is started on the caller's thread (watch's loop) and reported through `on_spawn`, so
watch keeps it out of the job's process tree before it could end the tree (--on-hang kill).

Typical use:
    alerter = Alerter(AlertSettings(notify_urls=("https://hooks.slack.com/services/T/B/x",)),
                      host="node-1", run_dir=run_dir, out_path=sup_dir / "alerts.jsonl", note=console.note)
    alerter.send("hang", finding_from_hang(report, hang_file))
    alerter.close()   # at most settings.end_wait_s
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from grpo_doctor._version import __version__
from grpo_doctor.supervisor.alert_payload import alert_payload, alert_text, exec_environment, webhook_body

MAX_OUTPUT_CHARS = 2000  # of the command's output kept in alerts.jsonl
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
    """Why `url` cannot be a webhook (None when it can): only http:// and https:// with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"--notify {shown_url(url)}: only http:// and https:// URLs are accepted"
    if not parts.hostname:
        return f"--notify {shown_url(url)}: the URL names no host"
    return None


def shown_url(url: str) -> str:
    """`scheme://host[:port]/…`: what may be printed of a webhook URL, whose path and query hold its token."""
    parts = urlsplit(url)
    if parts.scheme and parts.hostname:
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}/…"
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
        thread = threading.Thread(target=deliver, args=(delivery,), name=f"grpo-doctor-alert-{delivery}", daemon=True)
        self._threads.append(thread)
        thread.start()

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
        try:
            output, _ = proc.communicate(stdin, timeout=self.settings.exec_timeout_s)
            ok = proc.returncode == 0
            outcome = "exit status 0" if ok else _status_text(proc.returncode)
        except subprocess.TimeoutExpired:
            _end_group(proc)
            output, _ = proc.communicate()
            ok, outcome = False, f"timed out after {self.settings.exec_timeout_s:g} s: ended"
        text = output.decode(errors="replace")[-MAX_OUTPUT_CHARS:]
        last = text.strip().splitlines()[-1][:200] if text.strip() else ""
        self._done(delivery, payload, flag, ok=ok, attempts=1, outcome=outcome, elapsed_s=time.monotonic() - start,
                   output_tail=text, line_detail=f": {last}" if last and not ok else "")

    # -- records -----------------------------------------------------------------------------

    def _done(self, delivery: int, payload: Mapping[str, Any], target: str, *, ok: bool, attempts: int,
              outcome: str, elapsed_s: float, output_tail: str | None = None, line_detail: str = "") -> None:
        with self._lock:
            if self._closed:
                return  # close() has recorded it as left behind
            self._pending.pop(delivery, None)
        fid = payload["finding"]["id"]
        self._record_now(payload["event"], fid, target, ok=ok, attempts=attempts, outcome=outcome,
                         elapsed_s=elapsed_s, text=alert_text(payload), output_tail=output_tail)
        if not ok:
            tries = f" after {attempts} attempt(s)" if attempts and attempts > 1 else ""
            self.note(f"alert to {target} ({fid}) failed{tries}: {outcome}{line_detail}")

    def _record_now(self, event: str, finding_id: str, target: str, *, ok: bool, attempts: int | None,
                    outcome: str, elapsed_s: float | None, text: str | None = None,
                    output_tail: str | None = None) -> None:
        record = {"t": round(time.time(), 3), "event": event, "finding_id": finding_id, "target": target, "ok": ok,
                  "attempts": attempts, "outcome": outcome,
                  "elapsed_s": None if elapsed_s is None else round(elapsed_s, 3)}
        if text is not None:
            record["text"] = text
        if output_tail:
            record["output_tail"] = output_tail
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
