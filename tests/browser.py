"""Opening a report in headless Chromium: its DOM and console messages, or a PNG screenshot.

Used by the test suite only (the page must load without console errors and show its findings; a
screenshot of it), so it lives under tests/ and is not shipped. Chromium prints every console message to
stderr as `...:CONSOLE:N] "message", source: ...` with `--enable-logging=stderr`; that is how a
script that ran, a CSP violation or a failed load is seen. Every call has a timeout.

Typical use:
    page = load_page(Path("runs/job-17/report.html"))
    assert not page.console_messages, page.console_messages
    screenshot(Path("runs/job-17/report.html"), Path("report.png"))
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.schema.errors import DoctorError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Flags for a container or CI box: no sandbox (root), no GPU, nothing fetched in the background.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--mute-audio")
CONSOLE_LINE = re.compile(r":CONSOLE(?:\(\d+\)|:\d+)\] (.*)$")


class BrowserError(DoctorError):
    """Chromium is missing, failed or did not finish in time."""


@dataclass(frozen=True)
class PageLoad:
    dom: str
    console_messages: tuple[str, ...]


def find_chromium() -> str | None:
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


def load_page(html: Path, timeout_s: float = 60.0) -> PageLoad:
    """The page's DOM after loading and every console message it produced."""
    result = _run(["--enable-logging=stderr", "--v=0", "--dump-dom", html.resolve().as_uri()], timeout_s)
    messages = tuple(m.group(1) for line in result.stderr.splitlines() if (m := CONSOLE_LINE.search(line)))
    return PageLoad(dom=result.stdout, console_messages=messages)


def screenshot(html: Path, png: Path, width: int = 1280, height: int = 2400, timeout_s: float = 60.0) -> Path:
    png.parent.mkdir(parents=True, exist_ok=True)
    _run([f"--window-size={width},{height}", f"--screenshot={png.resolve()}", html.resolve().as_uri()], timeout_s)
    if not png.is_file():
        raise BrowserError(f"chromium wrote no screenshot to {png}")
    return png


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    exe = find_chromium()
    if exe is None:
        raise BrowserError("no Chromium found (looked for " + ", ".join(CANDIDATES) + "); apt-get install chromium")
    # A fresh profile per call: no state shared between runs, no lock left by a killed browser.
    with tempfile.TemporaryDirectory(prefix="grpo-doctor-chromium-") as profile:
        try:
            result = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                                    text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise BrowserError(f"chromium did not finish within {timeout_s:.0f} s") from None
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise BrowserError(f"chromium exited with status {result.returncode}: {tail[0]}")
    return result
