"""The one way grpo-doctor reads a file a user or a run handed it: regular files only, never more than a cap.

A path on the command line or inside a run directory may be anything: /dev/zero (never ends),
/dev/urandom, a FIFO (opening it blocks until a writer comes), a socket, a 1 GB file of `[`. The
size on disk cannot be trusted to guard the read (it is 0 for a device, a pipe and every file in
/proc), so every read here
- refuses what is not a regular file, before and after opening it (opened with O_NONBLOCK, so a
  FIFO swapped in between cannot block the open), naming what it is: "a character device", "a FIFO";
- reads at most `cap + 1` bytes and refuses the file when it holds more;
- parses JSON with its nesting bounded (json's own depth count): a RecursionError never escapes.
Every refusal is an `UnreadableFile`: a `DoctorError` (one line and a hint on the command line, exit
status 2), and an OSError and a ValueError, so a reader that skips unreadable or damaged files with
a warning (`except (OSError, ValueError)`) goes on doing so.

Streaming readers (a log read line by line) open the file with `open_regular` and bound their own
reads. The windowed rank-file reader (runlog/lines.py, runlog/window.py) has its own opener.

Typical use:
    data = read_json(path, cap=MAX_CONFIG_BYTES)           # UnreadableFile when it cannot be used
    text = read_text(path, cap=2**20, errors="replace")
    with open_regular(log_path) as f: head = f.read(4096)
    with open_text(jsonl_path) as f: first = f.readline(65536)
"""
from __future__ import annotations

import errno as errno_codes
import fcntl
import io
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.human_text import format_bytes

DEFAULT_HINT = "pass the path of a regular file"


class UnreadableFile(DoctorError, OSError, ValueError):
    """A file that cannot be used: missing, unreadable, not a regular file, over its cap, not the
    text or JSON it should be. `path` names it, `why` says why ("a character device, not a regular
    file"); `errno` is the system's error number when the system refused; `over_cap` the cap a file
    held more than."""

    def __init__(self, path: str | Path, why: str, hint: str | None = None, errno: int | None = None) -> None:
        super().__init__(f"cannot read {path}: {why}", hint if hint is not None else _hint(errno))
        self.path = str(path)
        self.why = why
        self.errno = errno  # OSError's own attribute: handlers that look at it see the cause
        self.strerror = why  # for a handler that says `exc.strerror`, as of any OSError
        self.over_cap: int | None = None  # the cap, when the file held more than it

    def __str__(self) -> str:  # the message alone: OSError's own would say "[Errno 2] ..."
        return str(self.args[0])


def special_file_kind(mode: int) -> str:
    """'a FIFO (named pipe)', 'a character device', ... for a mode that is no regular file."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | Path) -> BinaryIO:
    """The file opened for binary reading; UnreadableFile when it is no regular file or cannot be
    opened. Nothing but a regular file is ever opened (a device's open can have effects, a FIFO's
    blocks), and what was opened is checked again (the path may have changed in between)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise _from_os_error(path, exc) from None
    if not stat.S_ISREG(mode):
        raise UnreadableFile(path, f"{special_file_kind(mode)}, not a regular file")
    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _from_os_error(path, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(path, f"{special_file_kind(mode)}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~getattr(os, "O_NONBLOCK", 0))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_text(path: str | Path, errors: str = "replace", encoding: str = "utf-8", newline: str | None = None) -> TextIO:
    """`open_regular` as text, for a reader that goes line by line and bounds its own reads."""
    return io.TextIOWrapper(open_regular(path), encoding=encoding, errors=errors, newline=newline)


def read_bytes(path: str | Path, *, cap: int, what: str = "file") -> bytes:
    """At most `cap` bytes: the whole file, or UnreadableFile when it holds more (counted by reading,
    never by its size on disk). `what` names the file in that message ("a model config")."""
    with open_regular(path) as f:
        try:
            parts = _read_up_to(f, cap + 1)
        except OSError as exc:
            raise _from_os_error(path, exc) from None
    if sum(map(len, parts)) > cap:
        error = UnreadableFile(path, f"more than {format_bytes(cap)}, too large for {what}",
                               f"pass {what} of at most {format_bytes(cap)}")
        error.over_cap = cap
        raise error
    return parts[0] if len(parts) == 1 else b"".join(parts)


CHUNK_BYTES = 2**20


def _read_up_to(f: BinaryIO, limit: int) -> list[bytes]:
    """At most `limit` bytes, in as few pieces as the file allows. The size on disk only sizes the first
    read (a small file costs its size, not the cap); a file that says 0 (/proc) or grows is read on in
    chunks, and the count read is what decides."""
    hint = os.fstat(f.fileno()).st_size
    want = min(limit, hint + 1) if hint > 0 else min(limit, CHUNK_BYTES)
    parts: list[bytes] = []
    total = 0
    while total < limit:
        asked = min(want, limit - total)
        chunk = f.read(asked)  # a buffered read returns less than asked only at the end of the file
        if chunk:
            parts.append(chunk)
            total += len(chunk)
        if len(chunk) < asked:
            break
        want = CHUNK_BYTES
    return parts or [b""]


def read_text(path: str | Path, *, cap: int, errors: str = "strict", encoding: str = "utf-8",
              what: str = "a text file") -> str:
    """The file as text (at most `cap` bytes); with errors="strict" a file that is not `encoding`
    is UnreadableFile."""
    data = read_bytes(path, cap=cap, what=what)
    try:
        return data.decode(encoding, errors)
    except UnicodeDecodeError:
        raise UnreadableFile(path, f"not {encoding.upper()} text") from None
    except LookupError:
        raise UnreadableFile(path, f"unknown encoding {encoding!r}") from None


def read_json(path: str | Path, *, cap: int, errors: str = "strict", what: str = "a JSON file") -> Any:
    """The file parsed as JSON, read as `read_text` does; UnreadableFile when it is not JSON (nested
    too deeply included: see loads_bounded)."""
    text = read_text(path, cap=cap, errors=errors, what=what)
    try:
        return loads_bounded(text)
    except ValueError as exc:
        raise UnreadableFile(path, f"not JSON ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
                             f"pass {what}") from None


def loads_bounded(text: str | bytes) -> Any:
    """json.loads, with a ValueError (never a RecursionError) for a text nested deeper than the
    parser goes (about 1000 arrays or objects: json's C parser counts its own depth, so the stack
    stays small and the time short; nothing grpo-doctor reads nests beyond a dozen)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _from_os_error(path: str | Path, exc: OSError) -> UnreadableFile:
    if exc.errno == errno_codes.ENOENT:
        why = "no such file"
    elif exc.errno == errno_codes.ELOOP:
        why = "a loop of symbolic links"
    else:
        why = exc.strerror or str(exc)
    return UnreadableFile(path, why, errno=exc.errno)


def _hint(code: int | None) -> str:
    if code == errno_codes.ENOENT:
        return "check the path"
    if code in (errno_codes.EACCES, errno_codes.EPERM):
        return "check its permissions (the user running grpo-doctor must read it)"
    if code == errno_codes.ELOOP:
        return "the symbolic link points back at itself: fix or remove it"
    return DEFAULT_HINT

