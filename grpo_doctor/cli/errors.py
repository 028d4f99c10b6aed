"""The one exception type for mistakes a user can fix; main() prints it without a traceback.

Typical use:
    raise UserError(f"no such run directory: {path}", hint="pass the directory printed at start-up")
"""
from __future__ import annotations


class UserError(Exception):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
