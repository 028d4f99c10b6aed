import pytest
from rundata import common, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import straggler
from grpo_doctor.schema import PhaseBegin, PhaseEnd


def _phases(rank, durations, phase="rollout"):
    out, t = [], 0.0
    for step, d in enumerate(durations):
        out.append(PhaseBegin(**common(rank, step=step, t=t), phase=phase, path=phase))
        out.append(PhaseEnd(**common(rank, step=step, t=t + d), phase=phase, path=phase, duration_s=d, synced=False))
        t += d + 1
    return out


def test_the_rank_slow_in_a_phase_is_named_with_its_medians(tmp_path):
    for rank in range(4):
        durations = [3.1, 2.9, 3.0] if rank == 2 else [1.0, 1.1, 0.9]
        write_rank(tmp_path, rank, [header(rank)] + _phases(rank, durations) + _phases(rank, [0.2, 0.2], "forward"))
    [f] = straggler.check(load_evidence([tmp_path]), straggler.Config())
    assert (f.id, f.severity, f.ranks, f.phase, f.hosts) == ("straggler", "warning", (2,), "rollout", ("node-1",))
    assert f.evidence["phases"]["rollout"]["rank_median_s"] == 3.0
    assert f.evidence["phases"]["rollout"]["all_median_s"] == 1.0
    assert straggler.HINT_NODES not in f.hints  # every node launched alike: no "same GPUs per node" advice
    assert "num_infer_workers" not in " ".join(f.hints) and "--vllm_data_parallel_size" in f.hints[-1]


def test_small_absolute_differences_are_not_stragglers(tmp_path):
    for rank in range(4):
        write_rank(tmp_path, rank, [header(rank)] + _phases(rank, [0.4, 0.4] if rank == 0 else [0.1, 0.1]))
    assert not list(straggler.check(load_evidence([tmp_path]), straggler.Config()))


@pytest.mark.distributed
def test_the_reference_trainer_with_a_slow_rank_gets_that_rank_named_in_rollout(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path / "run", "--steps", "4", "--inject", "slow:rank=1,delay_s=0.8", nproc=3)
    assert result.returncode == 0, result.explain()
    findings = list(straggler.check(load_evidence([tmp_path / "run"]), straggler.Config()))
    assert [(f.id, f.ranks, f.phase) for f in findings] == [("straggler", (1,), "rollout")]
    assert findings[0].evidence["phases"]["rollout"]["rank_median_s"] >= 0.8
