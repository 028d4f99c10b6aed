"""Memory snapshots. NVML and CUDA are absent here: a fake NVML stands in for the driver on
CPU; the `gpu` tests run the real CUDA and NVML paths where a GPU is lent."""
import subprocess
import sys

import pytest
from helpers import clean_env, run_program

from grpo_doctor.host.nvml import GpuProcess, Nvml
from grpo_doctor.rank.identity import RankIdentity
from grpo_doctor.rank.recorder import Recorder
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Error, Header, Memory, PhaseEnd


class FakeNvml:
    """What NVML reports on a GPU shared by this rank and a colocated vLLM engine."""

    available = True

    def __init__(self, procs):
        self.procs = procs

    def driver_version(self):
        return "550.54.15"

    def uuid_of_visible_device(self, cuda_index, visible):
        return f"GPU-fake-{visible.split(',')[cuda_index]}"

    def processes(self, gpu_uuid):
        return self.procs if gpu_uuid == "GPU-fake-7" else []


def test_other_processes_on_the_ranks_gpu_appear_in_the_snapshot_and_header(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    ident = RankIdentity(rank=1, local_rank=1, world_size=2, node_rank=0, local_world_size=2, host="h", pid=1, attempt=0)
    nvml = FakeNvml([GpuProcess(pid=4242, used_bytes=48 * 2**30), GpuProcess(pid=17, used_bytes=None)])
    rec = Recorder(tmp_path, ident, sync=False, warn=print, nvml=nvml)
    rec.memory_snapshot("step")
    rec.end("shutdown")
    log = load_run([tmp_path]).ranks[1]
    header, mem = log.of_kind(Header)[0], log.of_kind(Memory)[0]
    assert header.gpu_uuid == "GPU-fake-7" and header.versions["cuda_driver"] == "550.54.15"
    assert mem.gpu_processes == [{"pid": 4242, "used_bytes": 48 * 2**30}, {"pid": 17, "used_bytes": None}]


def test_without_a_driver_nvml_reports_nothing_instead_of_failing():
    nvml = Nvml()
    if nvml.available:
        pytest.skip("this machine has an NVIDIA driver")
    assert nvml.driver_version() is None and nvml.processes("GPU-x") == []
    assert nvml.uuid_of_visible_device(0, "0") is None


def test_asking_for_allocator_history_without_cuda_says_it_has_no_effect(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run", record_memory_history=True)
    """)
    assert out.returncode == 0
    assert "record_memory_history has no effect: CUDA is not available" in out.stderr


@pytest.mark.gpu
def test_cuda_snapshot_reads_the_allocator_and_nvml_sees_this_process(tmp_path):
    out = run_program(tmp_path, """
        import os, torch, grpo_doctor as gd
        torch.cuda.set_device(0)
        gd.init("run")
        x = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        rec = gd.memory_snapshot("step")
        print(os.getpid())
    """, timeout_s=180)
    assert out.returncode == 0, out.stderr
    mem = load_run([tmp_path / "run"]).ranks[0].of_kind(Memory)[0]
    assert mem.allocated_bytes >= 256 * 2**20 and mem.reserved_bytes >= mem.allocated_bytes
    assert mem.total_bytes > mem.free_bytes > 0 and mem.num_ooms == 0
    assert int(out.stdout.strip()) in {p["pid"] for p in mem.gpu_processes or []} or mem.gpu_processes == []


@pytest.mark.gpu
def test_sync_marker_puts_gpu_time_inside_the_phase(tmp_path):
    out = run_program(tmp_path, """
        import torch, grpo_doctor as gd
        gd.init("run", sync=True)
        a = torch.randn(8192, 8192, device="cuda")
        torch.cuda.synchronize()
        with gd.phase("matmul"):
            for _ in range(20):
                a = a @ a / 8192
        with gd.phase("unsynced", sync=False):
            for _ in range(20):
                a = a @ a / 8192
        torch.cuda.synchronize()
    """, timeout_s=180)
    assert out.returncode == 0, out.stderr
    ends = {e.phase: e for e in load_run([tmp_path / "run"]).ranks[0].of_kind(PhaseEnd)}
    assert ends["matmul"].synced and not ends["unsynced"].synced
    assert ends["matmul"].duration_s > 5 * ends["unsynced"].duration_s


@pytest.mark.gpu
def test_a_real_cuda_oom_is_recorded_with_its_phase_and_an_allocator_dump(tmp_path):
    out = run_program(tmp_path, """
        import torch, grpo_doctor as gd
        torch.cuda.set_device(0)
        gd.init("run", record_memory_history=True)
        keep = []
        with gd.phase("forward"):
            while True:
                keep.append(torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda"))
    """, timeout_s=300)
    assert out.returncode == 1 and "OutOfMemoryError" in out.stderr
    (error,) = load_run([tmp_path / "run"]).ranks[0].of_kind(Error)
    assert error.exc_type == "OutOfMemoryError" and error.phase == "forward"
    assert "Tried to allocate" in error.message
    assert error.memory_dump and (tmp_path / "run" / error.memory_dump).stat().st_size > 0


def test_nvml_import_failure_is_not_an_error():
    code = "import sys; sys.modules['pynvml'] = None\nfrom grpo_doctor.host.nvml import Nvml\nprint(Nvml().available)"
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False"
