import pytest
from rundata import common, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.schema import PhaseBegin, PhaseEnd, Step


def _write(run_dir, skew_s, jitter_s=0.01, num_steps=6):
    """4 ranks on node-0 / node-1; node-1's wall clock is `skew_s` ahead; steps synchronised."""
    for rank in range(4):
        ahead = skew_s if rank >= 2 else 0.0
        records = [header(rank)]
        for step in range(num_steps):
            t = 100.0 + 2.0 * step + ahead + jitter_s * rank
            records += [PhaseBegin(**common(rank, step=step, t=t), phase="train", path="train"),
                        PhaseEnd(**common(rank, step=step, t=t + 1.5), phase="train", path="train", duration_s=1.5,
                                 synced=False),
                        Step(**common(rank, step=step, t=t + 1.6), metrics={"loss": 0.5})]
        write_rank(run_dir, rank, records)


def test_a_host_whose_clock_runs_ahead_is_found_said_and_shifted_back(tmp_path):
    _write(tmp_path, skew_s=37.0)
    ev = load_evidence([tmp_path])
    assert ev.clock_offsets == {"node-1": pytest.approx(37.0, abs=0.05)}
    assert any("clock skew" in w and "node-1" in w and "37.0" in w and "ahead" in w for w in ev.warnings)
    begins = ev.phases[ev.phases["step"] == 3].groupby("host")["begin_t"].median()
    assert begins["node-1"] == pytest.approx(begins["node-0"], abs=0.1)


def test_hosts_that_agree_within_collective_jitter_are_left_alone(tmp_path):
    _write(tmp_path, skew_s=0.0, jitter_s=0.05)
    ev = load_evidence([tmp_path])
    assert ev.clock_offsets == {} and not any("clock skew" in w for w in ev.warnings)
