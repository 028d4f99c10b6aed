"""A watchdog for the probe's own stages, so that the probe can never hang: when a stage runs
past its budget, `on_expiry(stage, budget_s)` is called from a daemon thread (it reports and
ends the process).

Typical use:
    guard = StageGuard(on_expiry=give_up)
    guard.start("size sweep", budget_s=120)
    ...
    guard.stop()
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

CHECK_EVERY_S = 0.5


class StageGuard:
    def __init__(self, on_expiry: Callable[[str, float], None]):
        self._on_expiry = on_expiry
        self._lock = threading.Lock()
        self._stage: tuple[str, float, float] | None = None  # (name, budget_s, deadline_mono)
        self._thread: threading.Thread | None = None

    def start(self, stage: str, budget_s: float) -> None:
        with self._lock:
            self._stage = (stage, budget_s, time.monotonic() + budget_s)
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, daemon=True, name="grpo-doctor-probe-guard")
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stage = None

    def _watch(self) -> None:
        while True:
            time.sleep(CHECK_EVERY_S)
            with self._lock:
                stage = self._stage
            if stage is not None and time.monotonic() > stage[2]:
                self._on_expiry(stage[0], stage[1])
                return
