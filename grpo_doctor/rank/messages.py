"""What the rank side tells the person running the job (recording off, an option without effect, a
seed collision), through `logging`: logger "grpo_doctor", level WARNING, one line each, once.

Shown by default: a handler on that logger writes each line to stderr as before
("grpo-doctor[rank 3]: ..."), but steps aside as soon as the root logger has handlers of its own
(logging.basicConfig, a framework's setup), which then get the record by propagation, so a line
is never shown twice. To silence or redirect them: `logging.getLogger("grpo_doctor")` (its
level, `propagate`, or removing `DEFAULT_HANDLER`).

Typical use:
    say(f"step({n!r}) ignored: a step must be a whole number")
"""
from __future__ import annotations

import logging
import os
import sys

LOGGER = logging.getLogger("grpo_doctor")


class _UntilConfigured(logging.StreamHandler):
    """stderr while the program has configured no logging of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):  # sys.stderr as it is now: pytest and some launchers replace it
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if LOGGER.propagate and logging.getLogger().handlers:
            return  # the program's own handlers show it
        super().emit(record)


DEFAULT_HANDLER = _UntilConfigured()
LOGGER.addHandler(DEFAULT_HANDLER)
_said: set[str] = set()


def say(message: str) -> None:
    """Once per distinct message and process; prefixed with the rank where the launcher set RANK."""
    if message in _said:
        return
    _said.add(message)
    rank = os.environ.get("RANK")
    where = f"[rank {rank}]" if rank is not None else ""
    LOGGER.warning("grpo-doctor%s: %s", where, message)
