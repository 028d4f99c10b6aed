"""schema/safe_read.py: the one opener of files a user or a run hands grpo-doctor. Real device nodes,
FIFOs and symlink loops; a device is never trusted for its size (0 on disk, endless when read)."""
from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.safe_read import (
    UnreadableFile,
    loads_bounded,
    open_regular,
    read_bytes,
    read_json,
    read_text,
)

ZERO, URANDOM, FULL = (1, 5), (1, 9), (1, 7)  # the major and minor numbers of /dev/zero, /dev/urandom, /dev/full


def _device(tmp_path, name, numbers):
    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


@pytest.mark.parametrize("numbers", [ZERO, URANDOM], ids=["zero", "urandom"])
def test_a_character_device_is_refused_without_reading_it(tmp_path, numbers):
    device = _device(tmp_path, "config.json", numbers)
    with pytest.raises(UnreadableFile) as caught:
        read_json(device, cap=2**20)
    assert str(caught.value) == f"cannot read {device}: a character device, not a regular file"
    assert caught.value.hint and stat.S_ISCHR(os.stat(device).st_mode)


def test_a_fifo_is_refused_at_once_even_with_no_writer(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    done = []
    thread = threading.Thread(target=lambda: done.append(_error(lambda: read_text(fifo, cap=100))), daemon=True)
    thread.start()
    thread.join(10)
    assert done == [f"cannot read {fifo}: a FIFO (named pipe), not a regular file"]


def test_a_fifo_swapped_in_after_the_check_does_not_block_the_open(tmp_path, monkeypatch):
    """The path is checked, then opened with O_NONBLOCK and checked again: a FIFO put there in between
    is refused, never waited on."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: real_stat(__file__) if str(p) == str(fifo) else real_stat(p, *a, **k))
    done = []
    thread = threading.Thread(target=lambda: done.append(_error(lambda: open_regular(fifo))), daemon=True)
    thread.start()
    thread.join(10)
    assert done == [f"cannot read {fifo}: a FIFO (named pipe), not a regular file"]


def test_a_socket_a_directory_and_a_symlink_loop_are_one_line_each(tmp_path):
    import socket

    sock_path = tmp_path / "s"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    try:
        assert _error(lambda: read_bytes(sock_path, cap=10)).endswith("a socket, not a regular file")
        assert _error(lambda: read_bytes(tmp_path, cap=10)).endswith("a directory, not a regular file")
        assert _error(lambda: read_bytes(tmp_path / "a", cap=10)).endswith("a loop of symbolic links")
        assert _error(lambda: read_bytes(tmp_path / "nope", cap=10)).endswith("no such file")
    finally:
        sock.close()


def test_the_cap_is_counted_by_reading_not_by_the_size_on_disk(tmp_path):
    """/proc files say 0 bytes on disk; the opener reads cap + 1 bytes and judges by what it got."""
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * 100)
    assert read_bytes(exact, cap=100) == b"x" * 100
    with pytest.raises(UnreadableFile, match="more than 99 B"):
        read_bytes(exact, cap=99)
    assert os.stat("/proc/self/status").st_size == 0
    assert b"Pid:" in read_bytes("/proc/self/status", cap=2**20)
    with pytest.raises(UnreadableFile, match="more than 10 B"):
        read_bytes("/proc/self/status", cap=10)


def test_json_nested_a_million_deep_is_one_error_not_a_recursion_error(tmp_path):
    deep = tmp_path / "findings.json"
    deep.write_text("[" * 1_000_000)
    assert _error(lambda: read_json(deep, cap=2**21)) == f"cannot read {deep}: not JSON (nested too deeply)"
    with pytest.raises(ValueError, match="nested too deeply"):
        loads_bounded("{\"a\": " * 100_000)
    assert loads_bounded("[" * 50 + "]" * 50) is not None


def test_text_that_is_not_utf8_and_json_that_is_not_json(tmp_path):
    latin = tmp_path / "latin"
    latin.write_bytes(b"caf\xe9")
    assert _error(lambda: read_text(latin, cap=10)).endswith("not UTF-8 text")
    assert read_text(latin, cap=10, errors="replace") == "caf\ufffd"
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert "not JSON" in _error(lambda: read_json(bad, cap=10))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"a": [1, 2]}))
    assert read_json(good, cap=100) == {"a": [1, 2]}


def test_the_error_is_a_user_error_an_oserror_and_a_valueerror(tmp_path):
    """One line on the command line (DoctorError, exit 2); skipped with a warning by the readers that
    catch OSError or ValueError for a damaged file."""
    with pytest.raises(UnreadableFile) as caught:
        read_bytes(tmp_path / "nope", cap=1)
    assert isinstance(caught.value, DoctorError) and isinstance(caught.value, OSError)
    assert isinstance(caught.value, ValueError) and caught.value.exit_status == 2
    assert caught.value.errno == 2 and str(caught.value) == f"cannot read {tmp_path / 'nope'}: no such file"


def _error(call) -> str:
    try:
        call()
    except UnreadableFile as exc:
        return str(exc)
    return "no error"


def test_a_small_file_costs_its_size_not_the_cap(tmp_path):
    import tracemalloc

    small = tmp_path / "small.json"
    small.write_text('{"a": 1}')
    tracemalloc.start()
    try:
        assert read_json(small, cap=2**30) == {"a": 1}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, peak


def test_a_sparse_gigabyte_is_refused_after_reading_the_cap_only(tmp_path):
    import resource

    big = tmp_path / "findings.json"
    with open(big, "wb") as f:
        f.truncate(2**30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(UnreadableFile) as caught:
        read_bytes(big, cap=8 * 2**20)
    assert caught.value.over_cap == 8 * 2**20 and "more than 8.0 MiB" in str(caught.value)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB: well under the gigabyte
