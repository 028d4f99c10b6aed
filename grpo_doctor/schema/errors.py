"""The one base of every error a user can fix: a message that repeats the bad value, and a hint.

`grpo-doctor`'s main() catches `DoctorError` once and prints it on one or two lines (exit status
`exit_status`, 2 unless a subclass says otherwise), with a traceback only under --debug. Every
part raises its own subclass (RunDirError, EvidenceError, LaunchError, ...), so a library caller
can catch the narrow type and the command line needs no translation per command. Stdlib only: the
schema layer is the floor, so the rank side and the supervisor may raise it too.

Typical use:
    class RunDirError(DoctorError): ...
    raise RunDirError(f"{path} does not exist", "check the path; run directories are printed at start-up")
"""
from __future__ import annotations


class DoctorError(Exception):
    exit_status = 2  # usage or input error; LaunchError says 127 (command not found), as a shell would
    hint: str | None = None  # a subclass may give one hint for all its messages

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    @property
    def message(self) -> str:
        return str(self)
