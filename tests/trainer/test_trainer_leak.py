"""`--inject leak:rank=R,mb_per_step=N`: the rank keeps a tensor of N MiB alive every step (its rollout
phase), written so that it is resident. The run to an address-space limit and its report:
tests/analysis/test_rule_memory_growth.py."""
import pytest
import torch
from grpo_doctor_trainer.inject import Fault, Injector, catalogue, parse_fault


def test_the_leak_spec_parses_with_its_default_and_is_in_the_catalogue():
    assert parse_fault("leak:rank=1,mb_per_step=32") == Fault("leak", rank=1, mb_per_step=32.0)
    assert parse_fault("leak:rank=0") == Fault("leak", rank=0, mb_per_step=64.0)
    assert "leak:rank=R[,mb_per_step=64.0]" in catalogue()


@pytest.mark.parametrize(("spec", "says"), [
    ("leak", "leak needs rank"),
    ("leak:rank=1,mb_per_step=0", "mb_per_step='0' is not a number > 0"),
    ("leak:rank=1,mb_per_step=lots", "mb_per_step='lots' is not a number > 0"),
    ("leak:rank=1,step=2", "leak has no key 'step' (its keys: rank, mb_per_step)"),
])
def test_a_bad_leak_spec_says_what_is_wrong(spec, says):
    with pytest.raises(ValueError) as info:
        parse_fault(spec)
    assert says in str(info.value)


def test_the_leaking_rank_keeps_one_written_tensor_per_step_in_its_rollout_phase():
    injector = Injector([parse_fault("leak:rank=1,mb_per_step=2")], rank=1, device=torch.device("cpu"))
    for step in range(3):
        for phase in ("rollout", "reward", "forward", "backward", "optimizer-step"):
            injector.at(phase, step)
    assert [t.numel() for t in injector.leaked] == [2 * 2**20] * 3
    assert all(bool((t == 1).all()) for t in injector.leaked)  # written: resident, not a lazy mapping
    other = Injector([parse_fault("leak:rank=1,mb_per_step=2")], rank=0, device=torch.device("cpu"))
    other.at("rollout", 0)
    assert other.leaked == []
