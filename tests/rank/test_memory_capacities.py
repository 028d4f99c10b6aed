"""The host memory a rank may use, recorded in its header when it starts (physical RAM, the memory
cgroup's limit, RLIMIT_AS), and its virtual size in every memory snapshot: what `memory-growth`
projects host memory against."""
import os

from helpers import run_program

from grpo_doctor.rank.memory import cgroup_memory_max_bytes, memory_capacities
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Memory

GIB = 2**30


def test_the_header_holds_ram_and_the_address_space_limit_the_rank_started_with(tmp_path):
    out = run_program(tmp_path, """
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
        import grpo_doctor as gd
        gd.init("run")
        block = bytearray(64 * 2**20)
        gd.memory_snapshot("step")
    """)
    assert out.returncode == 0, out.stderr
    log = load_run([tmp_path / "run"]).ranks[0]
    assert log.header.rlimit_as_bytes == 8 * GIB
    assert log.header.ram_bytes == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    mem = log.of_kind(Memory)[0]
    assert mem.host_vms_bytes >= mem.host_rss_bytes >= 64 * 2**20


def test_no_address_space_limit_is_none(tmp_path):
    out = run_program(tmp_path, """
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        import grpo_doctor as gd
        gd.init("run")
    """)
    assert out.returncode == 0, out.stderr
    assert load_run([tmp_path / "run"]).ranks[0].header.rlimit_as_bytes is None


def test_cgroup_v2_the_tightest_memory_max_up_the_tree(tmp_path):
    root = tmp_path / "cgroup"
    (root / "kubepods" / "pod1" / "ctr").mkdir(parents=True)
    (root / "kubepods" / "pod1" / "ctr" / "memory.max").write_text("max\n")
    (root / "kubepods" / "pod1" / "memory.max").write_text(f"{48 * GIB}\n")
    (root / "kubepods" / "memory.max").write_text(f"{200 * GIB}\n")
    proc = tmp_path / "self-cgroup"
    proc.write_text("0::/kubepods/pod1/ctr\n")
    assert cgroup_memory_max_bytes(root, proc) == 48 * GIB
    assert memory_capacities(root, proc)["cgroup_memory_max_bytes"] == 48 * GIB


def test_cgroup_v1_memory_limit_and_no_limit(tmp_path):
    root = tmp_path / "cgroup"
    (root / "memory" / "slurm" / "job_7").mkdir(parents=True)
    (root / "memory" / "slurm" / "job_7" / "memory.limit_in_bytes").write_text(f"{16 * GIB}\n")
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    proc = tmp_path / "self-cgroup"
    proc.write_text("12:pids:/slurm/job_7\n4:memory:/slurm/job_7\n0::/\n")
    assert cgroup_memory_max_bytes(root, proc) == 16 * GIB
    proc.write_text("4:memory:/\n")
    assert cgroup_memory_max_bytes(root, proc) is None


def test_no_cgroup_filesystem_is_none(tmp_path):
    assert cgroup_memory_max_bytes(tmp_path / "absent", tmp_path / "no-such-file") is None
    assert cgroup_memory_max_bytes(tmp_path / "absent", _write(tmp_path / "c", "0::/user.slice\n")) is None


def _write(path, text):
    path.write_text(text)
    return path
