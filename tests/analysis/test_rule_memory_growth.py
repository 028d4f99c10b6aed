"""`memory-growth`: memory creeping toward an OOM, split by where it goes, projected against the capacity.

Rank files and watch samples written as the rank side and watch write them; public reports replayed
from tests/data/memory_growth/ (SOURCES.md); and the reference trainer for real: a healthy run (no
finding) and a run with `--inject leak:rank=1,...` under an address-space limit (RLIMIT_AS, set for
torchrun and its ranks as `prlimit --as` would), run until the limit stops it, then `grpo-doctor report`.
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, clean_env, free_port
from rundata import common, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import memory_growth, run_rules
from grpo_doctor.checks.memory_trend import GIB, MIB, TrendConfig, memory_growth_check
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Header, Memory, RunPaths

ID = "memory-growth"
DATA = Path(__file__).resolve().parents[1] / "data" / "memory_growth"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"


def header(rank, host="node-0", **capacities):
    return Header(**common(rank, host=host), local_rank=rank, world_size=2, node_rank=0, local_world_size=2,
                  gpu_uuid=None, versions={}, launch={}, argv=["train.py"], **capacities)


def mem(rank, step, t, host="node-0", **fields):
    return Memory(**common(rank, step=step, t=t, host=host), tag="step", **fields)


def gpu_run(tmp_path, steps, reserved, allocated=None, others=None, total=79.1 * GIB, step_s=30.0, retries=None,
            rank=0, device=3):
    """One rank's GPU snapshots: the card holds its reserved memory plus `others` (engine, context)."""
    others = np.full(len(steps), 3 * GIB) if others is None else others
    records = [header(rank)]
    for i, step in enumerate(steps):
        records.append(mem(rank, int(step), 100.0 + step * step_s, host_rss_bytes=3 * GIB, device=device,
                           allocated_bytes=int(allocated[i]) if allocated is not None else None,
                           reserved_bytes=int(reserved[i]), total_bytes=int(total),
                           free_bytes=int(total - reserved[i] - others[i]),
                           num_alloc_retries=int(retries[i]) if retries is not None else 0))
    write_rank(tmp_path, rank, records)
    return load_evidence([tmp_path])


def growth(ev, cfg=None):
    found = list(memory_growth.check(ev, cfg or memory_growth.Config()))
    for f in found:
        assert_documented(f)
    return found


def assert_documented(finding):
    section = DOCS.read_text()
    section = section[section.index(f"## `{ID}`"):]
    section = section[:section.index("\n## ", 5)]
    for key in finding.evidence:
        assert f"`{key}`" in memory_growth.__doc__, key
        assert f"`{key}`" in section, key


def noise(n, mib, seed):
    return np.random.default_rng(seed).normal(0, mib * MIB, n)


# --- the GPU: where the growth goes ------------------------------------------------------------------

def test_reserved_growth_with_allocated_flat_is_cached_blocks_with_the_step_and_time_it_fills_the_card(tmp_path):
    steps = np.arange(100)
    reserved = 20 * GIB + 0.45 * GIB * steps
    [f] = growth(gpu_run(tmp_path, steps, reserved, allocated=np.full(100, 15 * GIB)))
    ev = f.evidence
    assert f.id == ID and f.ranks == (0,) and f.severity == "critical"
    assert (ev["memory"], ev["component"], ev["gpu"], ev["capacity_kind"]) == ("gpu", "reserved", 3, "gpu-total")
    assert ev["slope_bytes_per_step"] == pytest.approx(0.45 * GIB, rel=1e-6)
    # 23 GiB + 0.45 GiB a step meets 79.1 GiB at step 124.7, 25.7 steps of 30 s after step 99
    assert ev["projected_step"] == 125 and ev["time_left_s"] == pytest.approx(25.67 * 30, rel=0.01)
    assert ev["allocated_slope_bytes_per_step"] == 0
    assert ("grows 0.45 GiB per step on GPU 3 of rank 0 (the trainer's reserved memory; allocated flat: cached "
            "blocks, not a tensor leak); at this rate it reaches the 79.1 GiB card at about step 125, in about 13 min"
            in f.title)
    assert f.hints[0] == memory_growth.HINT_CACHED and "empty_cache" in f.hints[0]


def test_a_far_projection_is_a_warning_and_a_near_one_critical(tmp_path):
    steps = np.arange(40)
    reserved = 20 * GIB + 0.1 * GIB * steps  # ~530 steps left
    [far] = growth(gpu_run(tmp_path / "far", steps, reserved, allocated=np.full(40, 15 * GIB), step_s=60.0))
    assert far.severity == "warning" and far.evidence["time_left_s"] > 7200
    [near] = growth(gpu_run(tmp_path / "near", steps, reserved, allocated=np.full(40, 15 * GIB), step_s=5.0))
    assert near.severity == "critical" and near.evidence["time_left_s"] < 7200


def test_allocated_growth_is_a_tensor_leak_in_the_training_code(tmp_path):
    steps = np.arange(60)
    allocated = 10 * GIB + 0.2 * GIB * steps
    [f] = growth(gpu_run(tmp_path, steps, allocated + 2 * GIB, allocated=allocated))
    assert f.evidence["component"] == "allocated" and "tensors kept alive" in f.title
    assert f.hints[0] == memory_growth.HINT_LEAK


def test_growth_outside_the_trainers_allocator_names_the_rollout_engine(tmp_path):
    steps = np.arange(60)
    engine = 20 * GIB + 0.3 * GIB * steps
    [f] = growth(gpu_run(tmp_path, steps, np.full(60, 30 * GIB), allocated=np.full(60, 25 * GIB), others=engine))
    assert f.evidence["component"] == "other-processes" and "the rollout engine" in f.title
    assert f.evidence["other_slope_bytes_per_step"] == pytest.approx(0.3 * GIB, rel=1e-6)
    assert f.hints[0] == memory_growth.HINT_ENGINE


@pytest.mark.parametrize("shape", ["warm-up then flat", "one rise then flat", "rise that stopped", "too few steps",
                                   "noise"])
def test_no_alarm_on_warm_up_a_single_rise_a_rise_that_stopped_or_noise(tmp_path, shape):
    n = 8 if shape == "too few steps" else 90
    steps = np.arange(n)
    base = 20 * GIB + noise(n, 30, seed=n)
    if shape == "warm-up then flat":
        reserved = base + np.minimum(steps, 5) * 3 * GIB
    elif shape == "one rise then flat":
        reserved = base + (steps >= 45) * 8 * GIB
    elif shape == "rise that stopped":
        reserved = base + np.minimum(steps, 35) * 0.3 * GIB
    elif shape == "too few steps":
        reserved = 20 * GIB + steps * 2 * GIB
    else:
        reserved = base
    assert growth(gpu_run(tmp_path, steps, reserved, allocated=reserved - 2 * GIB)) == []


def test_allocation_retries_that_climb_are_said_alone_and_with_growth(tmp_path):
    steps = np.arange(40)
    flat = np.full(40, 70 * GIB)
    [alone] = growth(gpu_run(tmp_path / "alone", steps, flat, allocated=flat - GIB, retries=steps // 1))
    assert alone.severity == "warning" and "retried an allocation in 34 of the last 35 steps" in alone.title
    assert alone.evidence["alloc_retries"] == 39 and alone.hints[0] == memory_growth.HINT_RETRIES
    reserved = 20 * GIB + 0.45 * GIB * steps
    [both] = growth(gpu_run(tmp_path / "both", steps, reserved, allocated=np.full(40, 15 * GIB), retries=steps))
    assert "the allocator retried in 34 of the last 35 steps" in both.title
    assert memory_growth.HINT_RETRIES in both.hints and both.evidence["component"] == "reserved"


# --- host memory: RSS against RAM and the cgroup, address space against RLIMIT_AS ---------------------

def host_run(tmp_path, rss_slopes, vms_slopes=(), step_s=10.0, n=60, **capacities):
    vms_slopes = list(vms_slopes) + [0.0] * (len(rss_slopes) - len(vms_slopes))
    for rank, (slope, vms_slope) in enumerate(zip(rss_slopes, vms_slopes, strict=True)):
        records = [header(rank, **capacities)]
        for step in range(n):
            records.append(mem(rank, step, 100.0 + step * step_s, host_rss_bytes=int(4 * GIB + slope * step),
                               host_vms_bytes=int(12 * GIB + vms_slope * step)))
        write_rank(tmp_path, rank, records)
    return load_evidence([tmp_path])


def test_the_hosts_ranks_rss_together_against_the_tightest_of_ram_and_the_cgroup_limit(tmp_path):
    ev = host_run(tmp_path, [100 * MIB, 100 * MIB], n=30, ram_bytes=64 * GIB, cgroup_memory_max_bytes=16 * GIB)
    [f] = growth(ev)
    e = f.evidence
    assert (f.ranks, f.hosts, e["memory"], e["component"]) == ((0, 1), ("node-0",), "host", "host-rss")
    assert (e["capacity_kind"], e["capacity_bytes"]) == ("cgroup-memory-max", 16 * GIB)
    # two ranks at 4 GiB + 100 MiB a step each: 16 GiB at step 40.96
    assert e["slope_bytes_per_step"] == pytest.approx(200 * MIB) and e["projected_step"] == 41
    assert "host memory (RSS) of ranks 0, 1 on node-0 grows 0.20 GiB per step" in f.title
    assert "memory cgroup limit at about step 41" in f.title and f.hints == (memory_growth.HINT_HOST,)


def test_the_address_space_limit_is_named_when_it_is_met_first(tmp_path):
    ev = host_run(tmp_path, [0, 64 * MIB], vms_slopes=[0, 64 * MIB], ram_bytes=256 * GIB, rlimit_as_bytes=20 * GIB)
    [f] = growth(ev)
    assert f.ranks == (1,) and f.evidence["component"] == "address-space"
    assert (f.evidence["capacity_kind"], f.evidence["capacity_bytes"]) == ("rlimit-as", 20 * GIB)
    assert f.evidence["projected_step"] == 128  # 12 GiB + 64 MiB a step meets 20 GiB at step 128
    assert "address-space limit (RLIMIT_AS) at about step 128" in f.title


def test_rank_files_of_earlier_versions_load_and_their_growth_is_said_without_a_projection(tmp_path):
    ev = host_run(tmp_path, [80 * MIB], ram_bytes=64 * GIB)
    path = RunPaths(tmp_path).rank_file(0)
    old = []
    for line in path.read_text().splitlines():  # as written before capacities and the virtual size were recorded
        data = json.loads(line)
        for key in ("ram_bytes", "cgroup_memory_max_bytes", "rlimit_as_bytes", "host_vms_bytes"):
            data.pop(key, None)
        old.append(json.dumps(data))
    path.write_text("\n".join(old) + "\n")
    ev = load_evidence([tmp_path])
    assert ev.run.ranks[0].header.ram_bytes is None and len(ev.memory) == 60
    [f] = growth(ev)
    assert f.severity == "warning" and f.evidence["capacity_bytes"] is None and f.evidence["projected_step"] is None
    assert f.title.endswith("grows 80 MiB per step")


# --- watch's samples: jobs grpo-doctor never instrumented --------------------------------------------

def write_samples(run_dir, host, rows):
    path = RunPaths(run_dir).supervisor / host / "samples.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def gpu_sample(t, index, used, total, processes):
    return {"kind": "gpu", "t": t, "index": index, "uuid": f"GPU-{index}", "util_pct": 90, "mem_used_bytes": used,
            "mem_total_bytes": total, "power_w": 300.0, "temp_c": 60, "sm_clock_mhz": 1980, "ecc_errors": 0,
            "xid_events": [], "throttle_reasons": [],
            "processes": [{"pid": pid, "used_bytes": b} for pid, b in processes.items()]}


def proc_sample(t, rank, pid, rss):
    return {"kind": "proc", "t": t, "rank": rank, "pid": pid, "rss_bytes": rss, "cpu_pct": 100.0,
            "state": "running", "num_threads": 40}


def test_an_uninstrumented_jobs_gpu_growth_from_watch_samples_names_the_growing_process(tmp_path):
    rows = []
    for i in range(720):  # two hours, a sample every 10 s: the engine (pid 5000) gains 1 GiB every 10 min
        t = 1000.0 + 10 * i
        engine, trainer = 30 * GIB + GIB * (10 * i) / 600, 20 * GIB
        rows += [gpu_sample(t, 2, int(engine + trainer), int(80 * GIB), {4001: int(trainer), 5000: int(engine)}),
                 proc_sample(t, 0, 4001, int(5 * GIB))]
    write_samples(tmp_path, "node-7", rows)
    [f] = growth(load_evidence([tmp_path]))
    e = f.evidence
    assert (e["source"], e["component"], e["gpu"], e["pid"], e["pid_rank"]) == (
        "watch-samples", "other-processes", 2, 5000, None)
    assert e["slope_bytes_per_s"] == pytest.approx(GIB / 600, rel=0.02) and e["projected_step"] is None
    # 62 GiB used at the last interval's end, 18 GiB left at 6 GiB per hour: about 3 h
    assert e["time_left_s"] == pytest.approx(3 * 3600, rel=0.05)
    assert f.hosts == ("node-7",) and f.ranks == (0,)
    assert "grows 6.00 GiB per hour on GPU 2 of node-7 (pid 5000, no rank: the rollout engine" in f.title


# --- the incremental check the live sentinel calls --------------------------------------------------

def test_the_live_check_is_pure_and_answers_as_the_steps_come_in():
    steps = np.arange(80)
    peaks = 30 * GIB + 0.2 * GIB * steps + noise(80, 20, seed=1)
    answers = [memory_growth_check(peaks[:n], 79.1 * GIB, steps=steps[:n], times_s=100 + 30.0 * steps[:n])
               for n in range(1, 81)]
    first = next(i for i, a in enumerate(answers) if a) + 1
    assert first == 15  # 5 warm-up steps, then 10 points to fit
    assert all(a is None for a in answers[:first - 1]) and all(answers[first - 1:])
    last = answers[-1]
    assert last["id"] == ID and last["severity"] == "critical"
    assert abs(last["evidence"]["projected_step"] - 245) <= 2  # 30 + 0.2 s = 79.1 GiB at step 245.5
    assert memory_growth_check(peaks, 79.1 * GIB, steps=steps, times_s=100 + 30.0 * steps) == last  # no state
    flat = 30 * GIB + noise(80, 20, seed=2)
    assert memory_growth_check(flat, 79.1 * GIB, steps=steps) is None
    with pytest.raises(ValueError):
        memory_growth_check(peaks, 79.1 * GIB)


def test_the_rules_config_is_the_checks_trend_config():
    cfg = memory_growth.Config(min_points=4, min_growth_bytes=1)
    assert cfg.trend() == TrendConfig(min_points=4, min_growth_bytes=1)


# --- public reports, replayed -------------------------------------------------------------------------

def replay(tmp_path, spec):
    r = spec["replay"]
    if r["kind"] == "samples-host-rss":
        times = np.arange(0, r["duration_s"] + 1, r["interval_s"], dtype=float)
        anchors = np.array(r["anchors_bytes"], dtype=float)
        rss = np.interp(times, anchors[:, 0], anchors[:, 1]) + noise(len(times), r["noise_mib"], r["seed"])
        write_samples(tmp_path, "node-0", [proc_sample(1000.0 + t, 0, 4242, int(v)) for t, v in zip(times, rss, strict=True)])
        return load_evidence([tmp_path])
    n, total = r["steps"], r["total_gib"] * GIB
    steps = np.arange(n)
    jitter = noise(n, r["noise_mib"], r["seed"]) if r["noise_mib"] else np.zeros(n)
    records = [header(0)]
    for i, step in enumerate(steps):
        fields = {"total_bytes": int(total), "device": 0, "host_rss_bytes": 8 * GIB}
        if r["split"] == "card-only":  # the report gives the card's figure alone
            anchors = np.array(r["anchors_gib"], dtype=float)
            fields["free_bytes"] = int(total - np.interp(step, anchors[:, 0], anchors[:, 1]) * GIB - jitter[i])
        else:
            engine = (r["engine_start_gib"] * GIB + r["engine_bytes_per_step"] * step if r["split"] == "engine"
                      else r["engine_gib"][i] * GIB) + jitter[i]
            fields.update(allocated_bytes=int(r["trainer_allocated_gib"] * GIB),
                          reserved_bytes=int(r["trainer_reserved_gib"] * GIB),
                          free_bytes=int(total - r["trainer_reserved_gib"] * GIB - engine))
        records.append(mem(0, int(step), 100.0 + step * r["step_s"], **fields))
    write_rank(tmp_path, 0, records)
    return load_evidence([tmp_path])


@pytest.mark.parametrize("name", sorted(p.stem for p in DATA.glob("*.json")))
def test_a_public_report_replayed_gets_the_expected_projection(tmp_path, name):
    spec = json.loads((DATA / f"{name}.json").read_text())
    assert spec["source"].startswith("https://github.com/") and spec["source"] in (DATA / "SOURCES.md").read_text()
    found = growth(replay(tmp_path, spec))
    expect = spec["expect"]
    if not expect["finding"]:
        assert found == []
        return
    [f] = found
    e = f.evidence
    for key in ("memory", "component", "capacity_kind", "source"):
        if key in expect:
            assert e[key] == expect[key], (key, f.title)
    if "severity" in expect:
        assert f.severity == expect["severity"]
    if "projected_step_min" in expect:
        assert expect["projected_step_min"] <= e["projected_step"] <= expect["projected_step_max"], f.title
    for key in ("slope_bytes_per_step", "slope_bytes_per_s"):
        if key in expect:
            assert e[key] == pytest.approx(expect[key], rel=expect["slope_tolerance"]), f.title


def test_there_are_at_least_three_public_reports():
    assert len(list(DATA.glob("*.json"))) >= 3


# --- the reference trainer, for real (torchrun, two gloo ranks on the CPU) ---------------------------

LEAK_MIB = 32
LEAK_STEPS_OF_ROOM = 40
RUN_TIMEOUT_S = 300


def torchrun(run_dir: Path, *args: str, address_space_bytes: int | None = None) -> subprocess.CompletedProcess:
    def limit():  # what `prlimit --as=N` does to the launcher; its ranks inherit it
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, resource.getrlimit(resource.RLIMIT_AS)[1]))

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", "grpo_doctor_trainer.train", "--run-dir", str(run_dir), *args]
    return subprocess.run(cmd, cwd=REPO, env=clean_env(OMP_NUM_THREADS="1"), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, preexec_fn=limit if address_space_bytes else None)


def report(run_dir: Path, out: Path) -> list[dict]:
    subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "report", str(run_dir), "--out", str(out), "--json"],
                   cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return json.loads((out / "findings.json").read_text())["findings"]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("healthy") / "run"
    out = torchrun(run_dir, "--steps", "30", "--log-every", "10")
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir


@pytest.mark.distributed
@pytest.mark.slow
def test_a_healthy_trainer_run_has_no_memory_growth_and_records_its_capacities(healthy, tmp_path):
    assert not [f for f in report(healthy, tmp_path) if f["id"] == ID]
    header = load_run([healthy]).ranks[1].header
    assert header.ram_bytes and header.ram_bytes > GIB
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    assert header.rlimit_as_bytes == (None if soft == resource.RLIM_INFINITY else soft)


@pytest.mark.distributed
@pytest.mark.slow
def test_the_leak_run_to_its_address_space_limit_is_projected_within_20_percent_of_where_it_stopped(healthy, tmp_path):
    healthy_vms = load_evidence([healthy]).memory.query("rank == 1")["host_vms_bytes"].max()
    limit = int(healthy_vms + LEAK_STEPS_OF_ROOM * LEAK_MIB * MIB)
    run_dir = tmp_path / "run"
    out = torchrun(run_dir, "--steps", "400", "--log-every", "20", "--inject", f"leak:rank=1,mb_per_step={LEAK_MIB}",
                   address_space_bytes=limit)
    assert out.returncode != 0, "the leak never reached the address-space limit"
    rank1 = load_run([run_dir]).ranks[1]
    assert rank1.header.rlimit_as_bytes == limit
    [error] = rank1.errors
    assert "allocate memory" in error.message or "MemoryError" in error.exc_type, error.message
    stopped = error.step
    assert LEAK_STEPS_OF_ROOM / 2 < stopped < 2 * LEAK_STEPS_OF_ROOM

    findings = report(run_dir, tmp_path / "report")
    [f] = [f for f in findings if f["id"] == ID]
    e = f["evidence"]
    assert (f["ranks"], e["component"], e["capacity_kind"], e["capacity_bytes"]) == (
        [1], "address-space", "rlimit-as", limit)
    assert e["slope_bytes_per_step"] == pytest.approx(LEAK_MIB * MIB, rel=0.1)
    error_end = abs(e["projected_step"] - stopped) / stopped
    assert error_end <= 0.2, (e["projected_step"], stopped)
    # the crash is the growth's consequence, not a separate root cause
    crash = next(g for g in findings if g["id"] == "rank-crash" and g["ranks"] == [1])
    assert crash["role"] == "consequence" and crash["caused_by"] == f"{ID}@1" and f["role"] == "root-cause"

    # what the live check would have said halfway, from the first half of the steps alone
    memory = load_evidence([run_dir]).memory.query("rank == 1 and step <= @stopped // 2")
    half = memory_growth_check(memory["host_vms_bytes"], limit, steps=memory["step"], times_s=memory["t"])
    error_half = abs(half["evidence"]["projected_step"] - stopped) / stopped
    assert error_half <= 0.2, (half["evidence"]["projected_step"], stopped)
    print(f"stopped at step {stopped}; projected {e['projected_step']} at the end ({error_end:.1%}), "
          f"{half['evidence']['projected_step']} halfway ({error_half:.1%})")


def test_run_rules_runs_it_and_an_empty_run_is_no_failure():
    from grpo_doctor.analysis.load import Evidence
    from grpo_doctor.analysis.rules import RULES

    assert memory_growth in RULES
    findings, warnings = run_rules(Evidence(paths=[]))
    assert not [f for f in findings if f.id == ID] and not [w for w in warnings if "memory_growth" in w]
