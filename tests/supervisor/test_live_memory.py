"""`memory-growth` judged live (supervisor/live_memory.py through sentinels.py): said as soon as the report
would make it of the steps so far (after the warm-up and `min_points` steps), critical once the projected
OOM comes near, cleared when the growth stops; nothing for a healthy run's first steps or a single rise;
the projection at the end is the report's; watch's samples for a host whose ranks record no memory."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import memory_growth
from grpo_doctor.checks.memory_trend import GIB, MIB
from grpo_doctor.schema import End, Header, Memory, Step
from grpo_doctor.schema.live_findings import read_live_findings
from grpo_doctor.supervisor.sampler import GpuSample, ProcSample
from grpo_doctor.supervisor.sentinels import Sentinels

HOST = "node-0"


def common(rank, step, t):
    return {"rank": rank, "pid": 1000 + rank, "host": HOST, "t": t, "mono": t, "step": step}


def header(rank, **capacities):
    return Header(**common(rank, 0, 100.0), local_rank=rank, world_size=2, node_rank=0, local_world_size=2,
                  gpu_uuid=None, versions={}, launch={}, argv=["train.py"], **capacities)


def leak_steps(n, vms_slope=64 * MIB, step_s=10.0, flat_from=None, seed=0, rss_slope=0.0):
    """Per step, per rank: [Memory, Step]; rank 1's virtual size grows `vms_slope` a step (until
    `flat_from`), with a few MiB of noise, as the reference trainer's leak does."""
    jitter = np.random.default_rng(seed).normal(0, 4 * MIB, (n, 2))
    out = []
    for step in range(n):
        grown = min(step, flat_from) if flat_from is not None else step
        recs = []
        for rank in (0, 1):
            t = 100.0 + step_s * (step + 1)
            recs.append(Memory(**common(rank, step, t), tag="step",
                               host_rss_bytes=int(2 * GIB + (rss_slope * grown if rank else 0) + jitter[step, rank]),
                               host_vms_bytes=int(12 * GIB + (vms_slope * grown if rank else 0) + jitter[step, rank])))
            recs.append(Step(**common(rank, step, t), metrics={"loss": 0.1}))
        out.append(recs)
    return out


def sentinels(tmp_path, alerts=None):
    return Sentinels(HOST, tmp_path / "live-findings.json", write=lambda what, fn: fn() or True,
                     alert=(lambda event, f: alerts.append(f)) if alerts is not None else None)


def replay(s, steps, capacities):
    """The records step by step, as watch's rounds bring them: [(step, lines said)]."""
    said = [(None, s.check([header(0, **capacities), header(1, **capacities)]))]
    for n, recs in enumerate(steps):
        said.append((n, s.check(recs)))
    said.append((None, s.finish([End(**common(r, len(steps), 1e6), reason="exit") for r in (0, 1)])))
    return [(n, line) for n, lines in said for line in lines]


def test_a_leak_toward_rlimit_as_is_a_warning_after_the_warm_up_then_critical_when_near_and_alerted_once(tmp_path):
    alerts = []
    s = sentinels(tmp_path, alerts)
    caps = {"ram_bytes": 256 * GIB, "rlimit_as_bytes": 20 * GIB}
    said = replay(s, leak_steps(100, step_s=120.0), caps)
    memory = [(n, line) for n, line in said if "memory-growth" in line]
    # the 5 warm-up steps, then 10 to fit: step 14 is the first the check may judge; 12 GiB + 64 MiB a step
    # meets the 20 GiB limit at step 128: (128 - 14) x 120 s is past critical_within_s (2 h), a warning
    (n, first), (m, second) = memory[:2]
    assert n == 14 and first.startswith("live: WARNING memory-growth at step 14 (rank memory records): "), first
    assert "virtual size (address space) of rank 1 on node-0 grows 64 MiB per step" in first
    assert "address-space limit (RLIMIT_AS) at about step 128" in first
    # critical once under 2 h are left: 60 steps of 120 s, at step 68
    assert 66 <= m <= 70 and second.startswith("live: CRITICAL memory-growth at step"), second
    assert "a warning since step 14" in second
    assert len(memory) == 2 and [a["severity"] for a in alerts] == ["critical"]
    [entry] = read_live_findings(tmp_path / "live-findings.json")
    assert (entry["state"], entry["said_at_step"], entry["critical_at_step"]) == ("standing", 14, m)
    assert entry["ranks"] == [1] and entry["hosts"] == [HOST]
    assert entry["evidence"]["capacity_kind"] == "rlimit-as" and entry["evidence"]["component"] == "address-space"


def test_the_projection_at_the_end_is_the_reports(tmp_path):
    caps = {"ram_bytes": 256 * GIB, "rlimit_as_bytes": 20 * GIB}
    steps = leak_steps(60, rss_slope=40 * MIB, seed=3)
    s = sentinels(tmp_path)
    replay(s, steps, caps)
    [live] = [f for f in s.kept if f["id"] == "memory-growth"]
    run_dir = tmp_path / "run"
    for rank in (0, 1):
        write_rank(run_dir, rank, [header(rank, **caps)] + [r for recs in steps for r in recs if r.rank == rank])
    [reported] = list(memory_growth.check(load_evidence([run_dir]), memory_growth.Config()))
    assert live["title"] == reported.title and live["severity"] == reported.severity
    for key in ("component", "capacity_kind", "projected_step", "slope_bytes_per_step", "level_bytes", "num_points"):
        assert live["evidence"][key] == reported.evidence[key], key


@pytest.mark.parametrize("shape", ["flat", "one rise then flat", "first steps climb then flat"])
def test_no_alarm_for_a_healthy_run_or_a_single_rise(tmp_path, shape):
    n = 120
    vms = np.full(n, 12.0 * GIB) + np.random.default_rng(5).normal(0, 8 * MIB, n)
    if shape == "one rise then flat":
        vms[40:] += 2 * GIB
    elif shape == "first steps climb then flat":
        vms += np.minimum(np.arange(n), 5) * 300 * MIB  # warm-up: lazy init, the allocator filling its cache
    s = sentinels(tmp_path)
    steps = [[Memory(**common(0, step, 100.0 + step), tag="step", host_rss_bytes=int(v - 10 * GIB),
                     host_vms_bytes=int(v)), Step(**common(0, step, 100.0 + step), metrics={})]
             for step, v in enumerate(vms)]
    said = replay(s, steps, {"ram_bytes": 64 * GIB, "rlimit_as_bytes": 16 * GIB})
    assert said == [] and s.kept == []


def test_growth_that_stops_is_cleared_in_one_line(tmp_path):
    s = sentinels(tmp_path)
    said = replay(s, leak_steps(160, flat_from=40), {"rlimit_as_bytes": 40 * GIB})
    memory = [line for _, line in said if "memory-growth" in line]
    assert len(memory) == 2 and "live: cleared memory-growth at step" in memory[1], memory
    [entry] = read_live_findings(tmp_path / "live-findings.json")
    assert entry["state"] == "cleared" and entry["cleared_at_step"] > 40


def test_a_card_that_fills_is_judged_per_rank_from_its_snapshots(tmp_path):
    s = sentinels(tmp_path)
    total = 80 * GIB
    said = [s.check([header(0)])]
    for step in range(40):
        reserved = 20 * GIB + 0.45 * GIB * step
        snap = Memory(**common(0, step, 100.0 + 30 * step), tag="step", host_rss_bytes=4 * GIB, device=0,
                      allocated_bytes=int(12 * GIB), reserved_bytes=int(reserved), total_bytes=int(total),
                      free_bytes=int(total - reserved - 2 * GIB))
        said.append(s.check([snap, Step(**common(0, step, 100.0 + 30 * step), metrics={})]))
    [line] = [line for lines in said for line in lines]
    assert "memory grows 0.45 GiB per step on the GPU of rank 0 (the trainer's reserved memory" in line
    assert line.startswith("live: CRITICAL memory-growth at step 14")  # 120 steps of 30 s left: under 2 h


def gpu_sample(t, used, processes):
    return GpuSample(t=t, index=2, uuid="GPU-2", util_pct=90, mem_used_bytes=int(used), mem_total_bytes=80 * GIB,
                     power_w=300.0, temp_c=60, sm_clock_mhz=1980, processes=tuple(processes.items()),
                     xid_events=(), ecc_errors=0)


def test_an_uninstrumented_jobs_samples_are_judged_per_interval_and_named_by_process(tmp_path):
    s = sentinels(tmp_path)
    said = []
    for i in range(720):  # two hours, a sample every 10 s: the engine (pid 5000) gains 1 GiB every 10 min
        t = 1000.0 + 10 * i
        engine, trainer = 30 * GIB + GIB * (10 * i) / 600, 20 * GIB
        samples = [gpu_sample(t, engine + trainer, {4001: int(trainer), 5000: int(engine)}),
                   ProcSample(t=t, rank=0, pid=4001, rss_bytes=5 * GIB, cpu_pct=100.0, state="running", num_threads=4)]
        said += [(t, line) for line in s.check([], samples)]
    [(t, line)] = said
    # a point a minute (sample_interval_s): 5 warm-up intervals and 10 to fit; the 15th closes at 15 min
    assert t - 1000.0 == pytest.approx(15 * 60, abs=1), t
    assert line.startswith("live: WARNING memory-growth (watch's samples): memory grows 6.00 GiB per hour on GPU 2 "
                           "of node-0 (pid 5000, no rank: the rollout engine or another job)"), line
    [entry] = s.kept
    assert (entry["evidence"]["component"], entry["evidence"]["pid"], entry["step"]) == ("other-processes", 5000, None)


def test_samples_are_not_judged_for_a_host_whose_ranks_record_memory(tmp_path):
    s = sentinels(tmp_path)
    s.check([header(0), Memory(**common(0, 0, 999.0), tag="step", host_rss_bytes=GIB, device=0, total_bytes=80 * GIB,
                                free_bytes=60 * GIB, reserved_bytes=10 * GIB), Step(**common(0, 0, 999.0), metrics={})])
    lines = []
    for i in range(720):
        t = 1000.0 + 10 * i
        lines += s.check([], [gpu_sample(t, 30 * GIB + GIB * (10 * i) / 600, {5000: int(GIB)})])
    assert lines == []


def test_memory_stays_bounded_over_a_long_run(tmp_path):
    s = sentinels(tmp_path)
    replay(s, leak_steps(600, vms_slope=MIB), {"rlimit_as_bytes": 400 * GIB})
    cfg = memory_growth.Config()
    assert all(len(series.points) <= cfg.warmup_points + cfg.window_points
               for group in (s.memory._vms, s.memory._rss) for series in group.values())


def test_judging_many_growing_series_keeps_to_its_budget_a_call_and_reaches_every_series(tmp_path):
    """A shared run directory's many ranks, each with a point every step: one call judges for about its
    budget, and the next takes up where it stopped, so that every rank's growth is said, none starved by
    the ranks before it getting new points."""
    from grpo_doctor.supervisor.live_memory import LiveMemory

    memory, ranks, gib = LiveMemory(HOST), range(48), 2**30

    def step_of_points(step):
        memory.add_records(Memory(rank=r, pid=1000 + r, host=f"node-{r // 8}", t=100.0 + 10 * step,
                                  mono=100.0 + 10 * step, step=step, tag="step", host_rss_bytes=None,
                                  total_bytes=80 * gib, free_bytes=int(60 * gib - step * 0.5 * gib - r),
                                  allocated_bytes=int(10 * gib), reserved_bytes=int(18 * gib + step * 0.5 * gib))
                           for r in ranks)

    for step in range(30):
        step_of_points(step)
    said, rounds = set(), 0
    while said != set(ranks) and rounds < 60:
        step_of_points(30 + rounds)
        before = len(memory._due())
        found = memory.standing(budget_s=0.02)
        assert len(memory._due()) < before, "a call judged nothing"
        assert rounds or memory._due(), "the first call took no notice of its budget"
        said |= {key[-1] for key in found if key[-2] == "gpu"}
        rounds += 1
    assert said == set(ranks), f"after {rounds} calls, never judged: {sorted(set(ranks) - said)}"


def test_a_budgeted_round_goes_on_after_the_key_judged_last_so_every_rank_waits_its_fair_turn(monkeypatch):
    """256 ranks, each fresh every call, 5 judged a call (a clock that ticks a second a look): every rank is
    judged within the 52 calls a fair turn takes (it was up to 7x that, skipping past the unjudged)."""
    from grpo_doctor.supervisor import live_memory
    from grpo_doctor.supervisor.live_memory import LiveMemory

    memory, gib, first = LiveMemory(HOST), 2**30, {}
    step_of = lambda step: memory.add_records(  # noqa: E731
        Memory(rank=r, pid=1000 + r, host=HOST, t=100.0 + 10 * step, mono=100.0 + 10 * step, step=step, tag="step",
               host_rss_bytes=None, total_bytes=80 * gib, free_bytes=int(60 * gib - step * 0.5 * gib - r),
               allocated_bytes=10 * gib, reserved_bytes=int(18 * gib + step * 0.5 * gib)) for r in range(256))
    for step in range(30):
        step_of(step)
    calls = 0
    while len(first) < 256 and calls < 400:
        step_of(30 + calls)
        monkeypatch.setattr(live_memory.time, "perf_counter", iter(range(10**6)).__next__)
        for key in memory.standing(budget_s=4.5):
            first.setdefault(key, calls)
        calls += 1
    assert len(first) == 256 and calls <= 52, calls
