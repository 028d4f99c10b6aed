"""--inject specs: parsing, the messages for bad ones, and the faults that can fire in-process."""
from __future__ import annotations

import pytest
import torch
from grpo_doctor_trainer.inject import (
    FAULT_KEYS,
    Fault,
    Injector,
    catalogue,
    check_faults_for_world,
    parse_fault,
)


def test_every_fault_parses_with_its_defaults():
    assert parse_fault("same-seed-per-node") == Fault("same-seed-per-node")
    assert parse_fault("constant-reward") == Fault("constant-reward", value=1.0)
    assert parse_fault("constant-reward:value=0.25") == Fault("constant-reward", value=0.25)
    assert parse_fault("hang:rank=1,phase=forward,step=2") == Fault("hang", rank=1, step=2, phase="forward")
    assert parse_fault("desync:rank=0,step=3") == Fault("desync", rank=0, step=3)
    assert parse_fault("slow:rank=1") == Fault("slow", rank=1, delay_s=0.5, phase="rollout")
    assert parse_fault("slow:rank=1,delay_s=2,phase=reward") == Fault("slow", rank=1, delay_s=2.0, phase="reward")
    assert parse_fault("oom:rank=0,step=1") == Fault("oom", rank=0, step=1, phase="forward")
    assert parse_fault("crash:rank=1,step=0,how=sigkill,phase=backward") == Fault(
        "crash", rank=1, step=0, how="sigkill", phase="backward")
    assert parse_fault("crash:rank=1,step=0") == Fault("crash", rank=1, step=0, how="exception", phase="forward")
    assert parse_fault("nan-loss:step=2") == Fault("nan-loss", step=2)
    assert parse_fault("nan-loss:step=2,rank=1") == Fault("nan-loss", step=2, rank=1)
    assert parse_fault("stale-weights:step=3") == Fault("stale-weights", step=3)


def test_catalogue_names_every_fault_and_key():
    text = catalogue()
    for name, keys in FAULT_KEYS.items():
        assert name in text
        for key in keys:
            assert f"{key}=" in text
    assert "\n" not in text


@pytest.mark.parametrize(("spec", "says"), [
    ("bogus", "unknown fault 'bogus'"),
    ("hang:rank=1", "hang needs phase, step"),
    ("slow:rank=1,speed=2", "slow has no key 'speed' (its keys: rank, delay_s, phase)"),
    ("same-seed-per-node:rank=0", "same-seed-per-node has no key 'rank' (its keys: none)"),
    ("slow:rank", "'rank' is not key=value"),
    ("slow:rank=one", "rank='one' is not a whole number >= 0"),
    ("slow:rank=-1", "rank='-1' is not a whole number >= 0"),
    ("constant-reward:value=high", "value='high' is not a number"),
    ("hang:rank=0,phase=sleep,step=1", "phase='sleep' is not one of weight-sync, rollout, reward"),
    ("crash:rank=0,step=1,how=gently", "how='gently' is not one of exception, sigkill"),
    ("slow:rank=0,rank=1", "'rank' given twice"),
])
def test_a_bad_spec_gets_one_line_naming_the_problem(spec, says):
    with pytest.raises(ValueError) as info:
        parse_fault(spec)
    message = str(info.value)
    assert says in message
    assert repr(spec) in message
    assert "\n" not in message


def test_unknown_names_and_keys_list_the_valid_ones():
    for spec in ("bogus", "slow:rank=1,speed=2", "hang:rank=1"):
        with pytest.raises(ValueError) as info:
            parse_fault(spec)
        assert catalogue() in str(info.value)


def test_faults_that_cannot_fire_in_this_run_are_named():
    hang = parse_fault("hang:rank=2,phase=forward,step=0")
    assert "rank=2 does not exist with world size 2" in check_faults_for_world([hang], 2, beta=0.04, rollout="hf")
    assert check_faults_for_world([hang], 4, beta=0.04, rollout="hf") is None
    ref = parse_fault("slow:rank=0,phase=ref-logprob")
    assert "never runs with --beta 0" in check_faults_for_world([ref], 2, beta=0.0, rollout="hf")
    sync = parse_fault("crash:rank=0,step=0,phase=weight-sync")  # HF rollouts push into their rollout copy too
    assert check_faults_for_world([sync], 2, beta=0.04, rollout="hf") is None
    desync = parse_fault("desync:rank=0,step=0")
    assert "at least 2 ranks" in check_faults_for_world([desync], 1, beta=0.04, rollout="hf")


def test_same_seed_per_node_derives_the_sampling_seed_from_the_node_rank():
    bug = Injector([parse_fault("same-seed-per-node")], rank=5, device=torch.device("cpu"))
    assert bug.sampling_rank(rank=5, node_rank=0) == 0
    healthy = Injector([], rank=5, device=torch.device("cpu"))
    assert healthy.sampling_rank(rank=5, node_rank=0) == 5


def test_faults_only_fire_on_their_rank_and_from_their_step():
    faults = [parse_fault("nan-loss:step=2,rank=1"), parse_fault("constant-reward:value=0.5")]
    rank0 = Injector(faults, rank=0, device=torch.device("cpu"))
    rank1 = Injector(faults, rank=1, device=torch.device("cpu"))
    assert not rank0.nan_loss(5)
    assert [rank1.nan_loss(s) for s in range(4)] == [False, False, True, True]
    assert rank0.reward_override() == rank1.reward_override() == 0.5


def test_stale_weights_skips_the_push_from_its_step_on_and_on_its_rank_only():
    every = Injector([parse_fault("stale-weights:step=3")], rank=1, device=torch.device("cpu"))
    assert [every.stale_weights(s) for s in range(5)] == [False, False, False, True, True]
    one = [parse_fault("stale-weights:step=0,rank=1")]
    assert not Injector(one, rank=0, device=torch.device("cpu")).stale_weights(4)
    assert Injector(one, rank=1, device=torch.device("cpu")).stale_weights(0)


def test_crash_raises_a_runtime_error_in_its_phase_and_step_only():
    injector = Injector([parse_fault("crash:rank=0,step=1,phase=backward")], rank=0, device=torch.device("cpu"))
    injector.at("backward", 0)
    injector.at("forward", 1)
    with pytest.raises(RuntimeError, match="injected crash on rank 0 at step 1 in phase backward"):
        injector.at("backward", 1)


def test_host_oom_is_a_real_memory_error_and_the_address_space_limit_is_lifted_again():
    import resource

    before = resource.getrlimit(resource.RLIMIT_AS)
    injector = Injector([parse_fault("oom:rank=0,step=0")], rank=0, device=torch.device("cpu"))
    with pytest.raises(MemoryError):
        injector.at("forward", 0)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    bytearray(512 * 1024 * 1024)  # memory is usable again


def test_slow_sleeps_in_its_phase_every_step():
    import time

    injector = Injector([parse_fault("slow:rank=0,delay_s=0.2,phase=reward")], rank=0, device=torch.device("cpu"))
    began = time.monotonic()
    injector.at("rollout", 3)
    rollout_s = time.monotonic() - began
    injector.at("reward", 3)
    reward_s = time.monotonic() - began - rollout_s
    assert reward_s >= 0.2 and rollout_s < reward_s / 2  # the delay is in its phase only
