"""GPU and process sampling. The processes are real children; NVML is absent here, so a fake
stands in for a two-GPU driver, and the `gpu` test samples a real GPU where one is lent."""
from __future__ import annotations

import json
import select
import subprocess
import sys
import time

import psutil
import pytest
from helpers import clean_env
from sample_files import load_samples

from grpo_doctor.host.nvml import GpuProcess, Nvml, NvmlError, XidEvent
from grpo_doctor.supervisor.sampler import (
    NO_NVML_MESSAGE,
    GpuSample,
    ProcSample,
    Sampler,
    shows_work,
)

MiB = 2**20
BUSY = "import sys; print('ready', flush=True)\nwhile True: pass"
SLEEPING = "import sys, time; print('ready', flush=True); time.sleep(600)"
# bytes * n writes every page, so they count in RSS (a bare bytearray(n) may not touch them).
ALLOCATING = "import time; held = b'x' * (120 * 2**20); print('ready', flush=True); time.sleep(600)"


@pytest.fixture
def spawn():
    children: list[subprocess.Popen] = []

    def start(code: str, timeout_s: float = 60.0) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=clean_env())
        children.append(proc)
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        assert ready and proc.stdout.readline().strip() == b"ready", f"child did not start: {code!r}"
        return proc

    yield start
    for proc in children:
        proc.kill()
        proc.wait(timeout=10)


class FakeNvml:
    """A two-GPU node: a rank on each GPU, a vLLM engine beside rank 0 whose memory NVML cannot
    attribute, GPU 1 unable to report power, and one Xid 79 (fallen off the bus) on GPU 0."""

    available = True

    def __init__(self):
        self.xid_queue = [XidEvent(index=0, xid=79)]
        self.watched = False

    def device_count(self):
        return 2

    def device_uuid(self, index):
        return f"GPU-fake-{index}"

    def utilization_pct(self, index):
        return [97, 0][index]

    def memory_bytes(self, index):
        return [(70 * 2**30, 80 * 2**30), (2 * 2**30, 80 * 2**30)][index]

    def power_w(self, index):
        if index == 1:
            raise NvmlError("nvmlDeviceGetPowerUsage: Not Supported")
        return 612.5

    def temperature_c(self, index):
        return 61 + index

    def sm_clock_mhz(self, index):
        return 1980

    def device_processes(self, index):
        if index == 0:
            return [GpuProcess(pid=4101, used_bytes=40 * 2**30), GpuProcess(pid=4242, used_bytes=None)]
        return [GpuProcess(pid=4102, used_bytes=2 * 2**30)]

    def ecc_errors(self, index):
        return 0

    def pci_bus_id(self, index):
        return f"00000000:{0x3B + index:02X}:00.0"

    def throttle_reasons(self, index):
        raise NvmlError("nvmlDeviceGetCurrentClocksEventReasons: Not Supported")

    def fault_fields(self, index):
        return {}

    def watch_xid_events(self):
        self.watched = True
        return 2

    def xid_events(self):
        events, self.xid_queue = self.xid_queue, []
        return events


def by_rank(samples):
    return {s.rank: s for s in samples if isinstance(s, ProcSample)}


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def test_busy_sleeping_and_allocating_ranks_are_told_apart(tmp_path, spawn):
    busy, sleeping, allocating = spawn(BUSY), spawn(SLEEPING), spawn(ALLOCATING)
    sampler = Sampler(tmp_path / "samples.jsonl", nvml=FakeNvml())
    began_cpu_s, began = cpu_s(busy.pid), time.monotonic()
    sampler.set_targets({0: busy.pid, 1: sleeping.pid, 2: allocating.pid})
    time.sleep(1.0)  # cpu_pct covers the time since set_targets
    procs = by_rank(sampler.sample_once())
    got_pct = 100 * (cpu_s(busy.pid) - began_cpu_s) / (time.monotonic() - began)
    assert procs[2].rss_bytes >= 100 * MiB and procs[1].rss_bytes < 100 * MiB
    # The spinning process's share of a core depends on what else runs (under 10 % beside six busy
    # processes on two cores): the sampler must report the share it got, as its own counters say.
    assert procs[0].cpu_pct == pytest.approx(got_pct, rel=0.2, abs=3), (procs[0].cpu_pct, got_pct)
    assert procs[1].cpu_pct <= 2 < procs[0].cpu_pct, (procs[0].cpu_pct, procs[1].cpu_pct)  # asleep: ~0 however busy
    assert procs[0].state == "running" and procs[1].state == "sleeping"
    assert all(p.num_threads >= 1 for p in procs.values())
    assert sampler.latest(1) == procs[1] and sampler.latest(7) is None


def test_a_process_sampled_the_moment_it_is_found_reads_unmeasured_not_idle(tmp_path, spawn):
    busy, sleeping = spawn(BUSY), spawn(SLEEPING)
    sampler = Sampler(tmp_path / "samples.jsonl", nvml=FakeNvml())
    began_cpu_s, began = cpu_s(busy.pid), time.monotonic()
    sampler.set_targets({0: busy.pid, 1: sleeping.pid})
    first = by_rank(sampler.sample_once())  # a few ms later: too short for a CPU figure
    assert first[0].cpu_pct is None and first[0].state == "running" and first[0].rss_bytes > 0
    assert shows_work(first[0]) and shows_work(first[1]) and shows_work(None)
    time.sleep(1.0)
    second = by_rank(sampler.sample_once())  # covers the time since set_targets
    got_pct = 100 * (cpu_s(busy.pid) - began_cpu_s) / (time.monotonic() - began)
    assert second[0].cpu_pct == pytest.approx(got_pct, rel=0.2, abs=3), (second[0].cpu_pct, got_pct)
    assert second[1].cpu_pct <= 2 and not shows_work(second[1])


def test_work_is_cpu_above_five_percent_or_not_yet_measured():
    def sample(cpu_pct, state):
        return ProcSample(t=0.0, rank=0, pid=1, rss_bytes=1, cpu_pct=cpu_pct, state=state, num_threads=1)

    assert shows_work(sample(30.0, "running")) and shows_work(sample(6.0, "sleeping"))
    assert not shows_work(sample(5.0, "running")) and not shows_work(sample(0.0, "sleeping"))
    assert shows_work(sample(None, "running")) and shows_work(sample(None, "disk-sleep"))
    assert not shows_work(sample(None, "gone")) and not shows_work(sample(None, "zombie"))


def test_a_killed_rank_reads_gone_and_the_others_are_still_sampled(tmp_path, spawn):
    victim, survivor = spawn(SLEEPING), spawn(SLEEPING)
    sampler = Sampler(tmp_path / "samples.jsonl", nvml=FakeNvml())
    sampler.set_targets({0: victim.pid, 1: survivor.pid})
    victim.kill()
    victim.wait(timeout=10)
    procs = by_rank(sampler.sample_once())
    assert procs[0] == ProcSample(t=procs[0].t, rank=0, pid=victim.pid, rss_bytes=None, cpu_pct=None,
                                  state="gone", num_threads=None)
    # (just started: it may not have reached its sleep yet on a loaded machine)
    assert procs[1].state in ("sleeping", "running") and procs[1].rss_bytes > 0


def test_a_rank_dead_before_it_was_targeted_reads_gone(tmp_path, spawn):
    child = spawn(SLEEPING)
    child.kill()
    child.wait(timeout=10)
    sampler = Sampler(tmp_path / "samples.jsonl", nvml=FakeNvml())
    sampler.set_targets({3: child.pid})
    assert by_rank(sampler.sample_once())[3].state == "gone"


def test_an_unreaped_rank_reads_zombie(tmp_path, spawn):
    child = spawn(SLEEPING)
    sampler = Sampler(tmp_path / "samples.jsonl", nvml=FakeNvml())
    sampler.set_targets({0: child.pid})
    child.kill()
    deadline = time.monotonic() + 10
    while (state := by_rank(sampler.sample_once())[0].state) != "zombie" and time.monotonic() < deadline:
        time.sleep(0.05)  # the kill is delivered asynchronously
    assert state == "zombie"


def test_targets_follow_ranks_as_they_come_and_go(tmp_path, spawn):
    first, restarted, other = spawn(SLEEPING), spawn(SLEEPING), spawn(SLEEPING)
    sampler = Sampler(tmp_path / "samples.jsonl", nvml=FakeNvml())
    sampler.set_targets({0: first.pid, 1: other.pid})
    sampler.sample_once()
    sampler.set_targets({0: restarted.pid})
    procs = by_rank(sampler.sample_once())
    assert list(procs) == [0] and procs[0].pid == restarted.pid and procs[0].state == "sleeping"


def test_json_lines_read_back_equal_the_samples(tmp_path, spawn):
    child = spawn(SLEEPING)
    out = tmp_path / "supervisor" / "node-1" / "samples.jsonl"
    sampler = Sampler(out, nvml=FakeNvml())
    sampler.set_targets({0: child.pid, 1: 999_999_999})
    written = sampler.sample_once(now=1000.0) + sampler.sample_once(now=1001.0)
    sampler.stop()
    assert load_samples(out) == written
    kinds = [json.loads(line)["kind"] for line in out.read_text().splitlines()]
    assert kinds == ["gpu", "gpu", "proc", "proc"] * 2


def test_a_torn_last_line_is_left_out_when_loading(tmp_path, spawn):
    out = tmp_path / "samples.jsonl"
    sampler = Sampler(out, nvml=FakeNvml())
    sampler.set_targets({0: spawn(SLEEPING).pid})
    written = sampler.sample_once()
    sampler.stop()
    with open(out, "a") as f:
        f.write('{"schema": 1, "kind": "proc", "t": 12')
    assert load_samples(out) == written


def test_gpu_samples_keep_every_metric_a_gpu_can_report(tmp_path):
    nvml = FakeNvml()
    sampler = Sampler(tmp_path / "samples.jsonl", nvml=nvml)
    gpu0, gpu1 = sampler.sample_once(now=5.0)
    assert nvml.watched
    assert gpu0 == GpuSample(t=5.0, index=0, uuid="GPU-fake-0", util_pct=97, mem_used_bytes=70 * 2**30,
                             mem_total_bytes=80 * 2**30, power_w=612.5, temp_c=61, sm_clock_mhz=1980,
                             processes=((4101, 40 * 2**30), (4242, None)), xid_events=(79,), ecc_errors=0,
                             pci_bus_id="00000000:3B:00.0")
    assert gpu1.power_w is None and gpu1.temp_c == 62 and gpu1.processes == ((4102, 2 * 2**30),)
    assert gpu1.xid_events == ()
    later0, _ = sampler.sample_once()
    assert later0.xid_events == ()  # an Xid is reported once, in the round after it happened
    assert sampler.latest_gpu_bytes(4101) == 40 * 2**30 and sampler.latest_gpu_bytes(4242) is None
    assert [g["uuid"] for g in sampler.latest_gpus()] == ["GPU-fake-0", "GPU-fake-1"]


def test_without_a_driver_gpu_sampling_is_off_and_said_once(tmp_path, spawn):
    nvml = Nvml()
    if nvml.available:
        pytest.skip("this machine has an NVIDIA driver")
    messages = []
    sampler = Sampler(tmp_path / "samples.jsonl", nvml=nvml, notify=messages.append)
    sampler.set_targets({0: spawn(SLEEPING).pid})
    rounds = [sampler.sample_once() for _ in range(4)]
    assert messages == [NO_NVML_MESSAGE] and sampler.latest_gpus() == []
    with pytest.raises(NvmlError, match="NVML unavailable"):
        nvml.power_w(0)
    assert all([type(s) for s in r] == [ProcSample] for r in rounds)


def test_the_thread_samples_at_its_interval_and_stops_within_the_timeout(tmp_path, spawn):
    out = tmp_path / "samples.jsonl"
    sampler = Sampler(out, nvml=FakeNvml(), interval_s=0.05)
    sampler.set_targets({0: spawn(SLEEPING).pid})
    sampler.start()
    deadline = time.monotonic() + 10
    while (not out.exists() or len(out.read_text().splitlines()) < 9) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sampler.stop(timeout_s=30.0)
    samples = load_samples(out)
    assert len(samples) >= 9 and len(samples) % 3 == 0  # whole rounds: two GPUs and one rank each
    assert sampler.latest(0).state == "sleeping" and sampler.cpu_s > 0
    # stop() wakes the thread from its wait: an hour-long interval does not hold it.
    out_hourly = tmp_path / "hourly.jsonl"
    hourly = Sampler(out_hourly, nvml=FakeNvml(), interval_s=3600.0)
    hourly.set_targets({0: spawn(SLEEPING).pid})
    hourly.start()
    deadline = time.monotonic() + 30
    while not (out_hourly.exists() and out_hourly.read_text().count("\n") >= 3) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(load_samples(out_hourly)) == 3  # its first round, then the hour's wait began
    assert hourly.stop(timeout_s=60.0)


@pytest.mark.gpu
def test_a_real_gpu_shows_the_memory_a_torch_process_holds(tmp_path, spawn):
    holder = spawn("import time, torch; x = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda');"
                   "torch.cuda.synchronize(); print('ready', flush=True); time.sleep(600)")
    messages = []
    sampler = Sampler(tmp_path / "samples.jsonl", notify=messages.append)
    sampler.set_targets({0: holder.pid})
    time.sleep(0.5)
    samples = sampler.sample_once()
    sampler.stop()
    gpus = [s for s in samples if isinstance(s, GpuSample)]
    assert gpus and NO_NVML_MESSAGE not in messages, messages
    assert all(g.uuid and g.uuid.startswith(("GPU-", "MIG-")) for g in gpus)
    assert all(g.mem_total_bytes and g.temp_c is not None and g.util_pct is not None for g in gpus)
    assert max(g.mem_used_bytes for g in gpus) >= 2 * 2**30
    # Inside a container NVML may report host pids, so the holder is found by its memory when not by pid.
    held = [used for g in gpus for pid, used in g.processes if pid == holder.pid or (used or 0) >= 2 * 2**30]
    assert held or all(g.processes == () for g in gpus), [g.processes for g in gpus]
    assert load_samples(tmp_path / "samples.jsonl") == samples
    print("\n".join(json.dumps(g.to_dict()) for g in gpus))
