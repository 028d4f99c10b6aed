"""schema/safe_write.py: the one writer of whole files. Real device nodes, FIFOs, symlinks and loops,
an immutable file (chattr +i), /proc and /sys; a device stays a device, a link stays a link."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest

from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.safe_write import UnwritableFile, make_dirs, write_file

ZERO, FULL = (1, 5), (1, 7)


def _device(tmp_path, name, numbers):
    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


def test_a_regular_file_is_replaced_atomically_keeping_its_mode(tmp_path):
    page = tmp_path / "report.html"
    page.write_text("old")
    page.chmod(0o640)
    assert write_file(page, "new") == page
    assert page.read_text() == "new" and stat.S_IMODE(page.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["report.html"]  # no temporary file left


def test_a_new_file_gets_the_umask_mode_and_its_parents(tmp_path):
    old = os.umask(0o027)
    try:
        written = write_file(tmp_path / "a" / "b" / "plan.json", b"{}")
    finally:
        os.umask(old)
    assert written.read_bytes() == b"{}" and stat.S_IMODE(written.stat().st_mode) == 0o640


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    target = tmp_path / "elsewhere" / "page.html"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "report.html"
    link.symlink_to(target)
    write_file(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    dangling = tmp_path / "dangling.html"
    dangling.symlink_to(tmp_path / "created.html")
    write_file(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "created.html").read_text() == "made"


def test_a_full_device_stays_a_device_and_the_error_is_one_line(tmp_path):
    full = _device(tmp_path, "full", FULL)
    with pytest.raises(UnwritableFile) as caught:
        write_file(full, "<html>")
    assert str(caught.value) == f"cannot write {full}: a character device that refused the data (No space left on device)"
    assert stat.S_ISCHR(os.stat(full).st_mode) and os.listdir(tmp_path) == ["full"]
    zero = _device(tmp_path, "zero", ZERO)
    write_file(zero, "discarded")  # a device that takes data is written through, never replaced
    assert stat.S_ISCHR(os.stat(zero).st_mode)


def test_a_fifo_is_written_through_to_its_reader_and_refused_without_one(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "nobody reads it" in str(_raises(lambda: write_file(fifo, "x")))
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    for _ in range(200):  # the reader's open has to come first
        try:
            write_file(fifo, "through the pipe")
            break
        except UnwritableFile:
            threading.Event().wait(0.01)
    reader.join(10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dev_stdout_goes_onto_the_shells_redirection_without_replacing_it(tmp_path):
    out = tmp_path / "out.txt"
    code = ("from grpo_doctor.schema.safe_write import write_file\n"
            "print('before')\nwrite_file('/dev/stdout', 'page\\n')\nprint('after')\n")
    with open(out, "w") as f:
        subprocess.run([sys.executable, "-c", code], stdout=f, check=True, timeout=60)
    assert out.read_text() == "before\npage\nafter\n"


def test_a_directory_a_socket_and_a_symlink_loop_are_refused(tmp_path):
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s"))
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    try:
        assert str(_raises(lambda: write_file(tmp_path, "x"))).endswith("a directory, not a regular file; not overwritten")
        assert "a socket" in str(_raises(lambda: write_file(tmp_path / "s", "x")))
        assert str(_raises(lambda: write_file(tmp_path / "a", "x"))).endswith("a loop of symbolic links")
        assert stat.S_ISSOCK(os.lstat(tmp_path / "s").st_mode) and (tmp_path / "a").is_symlink()
    finally:
        sock.close()


@pytest.mark.parametrize("path", ["/proc/self/report.html", "/proc/grpo-doctor-test.html", "/sys/kernel/x.html",
                                  "/proc/self/new/dir/findings.json"])
def test_proc_and_sys_are_one_line(path):
    error = _raises(lambda: write_file(path, "x"))
    assert str(error).startswith(f"cannot write {path}: ") and error.hint and "\n" not in str(error)
    assert isinstance(error, DoctorError) and isinstance(error, OSError) and error.errno


def test_an_immutable_file_is_one_line_and_left_as_it_was(tmp_path):
    if shutil.which("chattr") is None or os.geteuid() != 0:
        pytest.skip("chattr +i needs chattr and root")
    page = tmp_path / "report.html"
    page.write_text("kept")
    if subprocess.run(["chattr", "+i", str(page)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable flag")
    try:
        error = _raises(lambda: write_file(page, "new"))
        assert str(error) == f"cannot write {page}: operation not permitted (an immutable file?)"
        assert "immutable" in error.hint and page.read_text() == "kept"
        assert sorted(os.listdir(tmp_path)) == ["report.html"]  # the temporary file is removed
    finally:
        subprocess.run(["chattr", "-i", str(page)], check=True)


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path):
    target = tmp_path / "run.json"
    errors = []

    def writer(n):
        try:
            for _ in range(50):
                write_file(target, f"{n}" * 10000)
        except Exception as exc:  # noqa: BLE001 - any failure is the test's answer
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(target.read_text())) == 1 and os.listdir(tmp_path) == ["run.json"]


def test_make_dirs_over_a_file_or_in_proc_is_one_line(tmp_path):
    (tmp_path / "f").write_text("")
    assert "exists and is not a directory" in str(_raises(lambda: make_dirs(tmp_path / "f")))
    assert str(_raises(lambda: make_dirs("/proc/self/x"))).startswith("cannot write /proc/self/x: ")
    assert make_dirs(tmp_path / "d" / "e").is_dir()


def _raises(call) -> UnwritableFile:
    with pytest.raises(UnwritableFile) as caught:
        call()
    return caught.value
