"""The one way grpo-doctor writes a whole file (a report, findings.json, plan.json, a probe result,
run.json, a hang report): atomically, and never over something that is not a regular file.

What `write_file(path, data)` does with what it finds at `path`:
- nothing, or a regular file: the data goes to a temporary file of a unique name (mkstemp) in the
  same directory, which then replaces `path` (os.replace): a reader never sees half a file, and two
  processes writing one file never share a temporary name. A file replaced keeps its permissions
  (a new one gets 0666 less the umask, as open() would give it).
- a symbolic link: followed. The file it points to is replaced as above; the link stays a link.
  A dangling link gets its target created, as the shell's `>` would do.
- a character device or a FIFO (/dev/stdout, /dev/null, a named pipe a reader waits on): written
  through, never replaced or truncated; a FIFO nobody reads is refused (it would block forever).
  `--html /dev/stdout` thus prints the page, and `/dev/full` stays a device and says "no space".
- /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: written onto that descriptor of this process,
  whatever it leads to (a terminal, a pipe, the file of a shell's `>`), after what Python buffered for
  it: `report --html /dev/stdout > page.html` neither replaces page.html nor overwrites its start.
  Another process's /proc/PID/fd/N is opened and appended to, never replaced.
- a directory, a block device, a socket: refused (a block device is a disk; never write a report
  over it).
Every failure is one `UnwritableFile`: a `DoctorError` (one line and a hint on the command line,
exit status 2) naming the path and the cause (read-only file system, permission denied or an
immutable file, no such directory, a symbolic-link loop, no space), and an OSError carrying the
system's errno, so a writer that must never stop on a failed write (watch's RunFiles) goes on
catching OSError as before.

Typical use:
    write_file(RunPaths(run_dir).report_html, html)                   # UnwritableFile when it cannot
    write_file(out / "plan.json", text, hint="give --out a directory you can write")
"""
from __future__ import annotations

import errno as errno_codes
import fcntl
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.safe_read import special_file_kind

_HINTS = {
    errno_codes.EROFS: "that file system is read-only: write somewhere else",
    errno_codes.EPERM: "the file or its directory may be immutable (lsattr shows an i) or not yours: "
                       "write somewhere else",
    errno_codes.EACCES: "no permission to write there: write somewhere else",
    errno_codes.ENOENT: "that directory does not exist and cannot be made there: write somewhere else",
    errno_codes.ENOTDIR: "a part of that path is a file, not a directory: fix the path",
    errno_codes.ELOOP: "a symbolic link on that path points back at itself: fix or remove it",
    errno_codes.ENOSPC: "the disk is full: free space or write somewhere else",
    errno_codes.EDQUOT: "the disk quota is used up: free space or write somewhere else",
    errno_codes.ENXIO: "start the reader of that FIFO first, or write to a file",
}
DEFAULT_HINT = "write to a regular file in a directory you can write"


class UnwritableFile(DoctorError, OSError):
    """A file that cannot be written, or must not be. `path` names it, `why` says why; `errno` is
    the system's error number (None when grpo-doctor refused by itself)."""

    def __init__(self, path: str | Path, why: str, hint: str | None = None, errno: int | None = None) -> None:
        super().__init__(f"cannot write {path}: {why}", _HINTS.get(errno or 0) or hint or DEFAULT_HINT)
        self.path = str(path)
        self.why = why
        self.errno = errno
        self.strerror = why  # for a handler that says `exc.strerror`, as of any OSError

    def __str__(self) -> str:  # the message alone: OSError's own would say "[Errno 2] ..."
        return str(self.args[0])


def write_file(path: str | Path, data: str | bytes, *, encoding: str = "utf-8", make_parents: bool = True,
               hint: str | None = None) -> Path:
    """Writes `data` (text is encoded with `encoding`) to `path` as the module docstring says, making
    its missing parent directories when `make_parents`, and returns `path`. `hint` replaces the hint
    of a failure whose cause has no hint of its own (e.g. "give --out a directory you can write").
    Raises UnwritableFile."""
    path = Path(path)
    payload = data.encode(encoding) if isinstance(data, str) else bytes(data)
    try:
        target, mode = _target(path)
        open_file = _open_file(path)
        if open_file is not None and open_file >= 0:
            _write_to_fd(open_file, payload)
        elif mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or open_file is not None):
            try:
                _write_through(path, payload)  # by its own name: open() follows /proc's links as the kernel means them
            except OSError as exc:
                error = UnwritableFile(path, f"{special_file_kind(mode)} that refused the data ({_why(exc)})",
                                       errno=exc.errno)
                if exc.errno != errno_codes.ENXIO:
                    error.hint = hint or "write to a regular file instead"
                raise error from None
        elif mode is not None and not stat.S_ISREG(mode):
            raise UnwritableFile(path, f"{special_file_kind(mode)}, not a regular file; not overwritten",
                                 hint or DEFAULT_HINT)
        else:
            _replace(target, payload, mode, make_parents)
    except UnwritableFile:
        raise
    except OSError as exc:
        raise UnwritableFile(path, _why(exc), hint, exc.errno) from None
    return path


def make_dirs(path: str | Path, hint: str | None = None) -> Path:
    """`path` and its missing parents as directories (mkdir -p); UnwritableFile when that fails."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        try:
            os.stat(path)
        except OSError as exc:  # a dangling link, a loop of them
            raise UnwritableFile(path, _why(exc), hint, exc.errno) from None
        raise UnwritableFile(path, "exists and is not a directory", hint, errno_codes.EEXIST) from None
    except OSError as exc:
        raise UnwritableFile(path, _why(exc), hint, exc.errno) from None
    return path


def _target(path: Path) -> tuple[Path, int | None]:
    """The file a write to `path` lands in and its mode (None: absent). A device or FIFO is opened by
    `path` itself (/dev/stdout is a link to /proc/self/fd/1, which names no file); a symbolic link to
    a regular file, or a dangling one, is followed to the file it names."""
    try:
        mode: int | None = os.stat(path).st_mode  # follows links; ELOOP for a loop
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return path, mode
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return path, mode
    except FileNotFoundError:
        return path, None
    target = Path(os.path.realpath(path))
    try:
        return target, os.stat(target).st_mode
    except FileNotFoundError:
        return target, None


_FD_LINK = re.compile(r"/proc/(self|thread-self|\d+)/(?:task/\d+/)?fd/(\d+)|/dev/fd/(\d+)")
_STD_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def _open_file(path: Path) -> int | None:
    """Whether `path` is, or links through, a process's open file (/dev/stdout, /dev/fd/1,
    /proc/self/fd/1): its descriptor number when it is one of this process's, -1 when another's,
    None when it is no such path. Such a file is written through even when it is regular
    (`--html /dev/stdout > page.html`): replacing it would cut the shell's redirection off."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        if current in _STD_STREAMS:
            return _STD_STREAMS[current]
        match = _FD_LINK.fullmatch(current)
        if match:
            whose = match.group(1)
            own = whose is None or whose in ("self", "thread-self") or whose == str(os.getpid())
            return int(match.group(2) or match.group(3)) if own else -1
        try:
            link = os.readlink(current)
        except OSError:
            return None
        current = os.path.abspath(os.path.join(os.path.realpath(os.path.dirname(current)), link))
    return None


def _write_to_fd(fd: int, payload: bytes) -> None:
    """Onto this process's own descriptor `fd`, at its offset, after what Python buffered for it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.fileno() == fd:
                stream.flush()
        except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation: a StringIO in its place
            pass
    _write_all(fd, payload)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno_codes.EIO, "nothing written")
        view = view[written:]


def _write_through(target: Path, payload: bytes) -> None:
    """Into a character device, a FIFO or another process's open file, as it is: no temporary file,
    no rename, no truncation (a regular file reached this way is appended to)."""
    # O_NONBLOCK: a FIFO without a reader is ENXIO at once instead of a hang; cleared for the writes.
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
            raise OSError(errno_codes.EINVAL, f"{special_file_kind(mode)}, not written")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        _write_all(fd, payload)
    finally:
        os.close(fd)


def _replace(target: Path, payload: bytes, mode: int | None, make_parents: bool) -> None:
    parent = target.parent
    if make_parents and not parent.is_dir():
        parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=parent, prefix=f".{target.name[:100]}.", suffix=".tmp")
    try:
        os.fchmod(fd, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        _write_all(fd, payload)
        os.close(fd)
        fd = -1
        os.replace(temp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def _umask() -> int:
    """This process's umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _why(exc: OSError) -> str:
    if exc.errno == errno_codes.ELOOP:
        return "a loop of symbolic links"
    if exc.errno == errno_codes.ENXIO:
        return "nobody reads it"
    if exc.errno == errno_codes.EPERM:
        return "operation not permitted (an immutable file?)"
    return exc.strerror or str(exc)
