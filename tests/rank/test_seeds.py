"""gd.seed_audit(): fingerprints of the random generators, equal exactly when the states are."""
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import clean_env, run_program, write_program

from grpo_doctor.rank.seeds import fingerprints
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Rng


def torchrun(prog, nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), str(prog)]


def seeded(seed: int) -> dict:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    return fingerprints()


def test_equal_seeds_give_equal_fingerprints_and_different_seeds_different_ones():
    first, again, other = seeded(0), seeded(0), seeded(1)
    assert first == again
    for name in ("torch_cpu", "numpy", "python"):
        assert len(first[name]) == 16 and first[name] != other[name], name
    assert first["torch_cuda"] is None  # CUDA never initialised in this process


def test_a_fingerprint_moves_when_its_generator_is_used():
    before = seeded(0)
    torch.rand(3)
    after = fingerprints()
    assert after["torch_cpu"] != before["torch_cpu"]
    assert (after["numpy"], after["python"]) == (before["numpy"], before["python"])


def test_seed_audit_records_the_fingerprints_and_the_sampling_seed_without_importing_anything(tmp_path):
    out = run_program(tmp_path, """
        import sys, grpo_doctor as gd
        gd.init("run")
        gd.step(2)
        gd.seed_audit("init", sampling_seed=1234, tp_rank=1, tp_group=0)
        print(sorted(m for m in ("torch", "numpy") if m in sys.modules))
        import torch
        torch.manual_seed(7)
        gd.seed_audit("step")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # the audit looked only at generators already there
    first, second = load_run([tmp_path / "run"]).ranks[0].of_kind(Rng)
    assert (first.tag, first.step, first.sampling_seed, first.tp_rank, first.tp_group) == ("init", 3, 1234, 1, 0)
    assert first.torch_cpu is None and first.numpy is None and first.torch_cuda is None
    assert len(first.python) == 16
    assert second.tag == "step" and len(second.torch_cpu) == 16


def test_two_processes_seeded_alike_agree_and_seeded_apart_differ(tmp_path):
    source = """
        import os, torch, grpo_doctor as gd
        gd.init("run")
        torch.manual_seed(int(os.environ["SEED"]))
        gd.seed_audit(sampling_seed=int(os.environ["SEED"]))
    """
    for rank, seed in ((0, "5"), (1, "5"), (2, "6")):
        out = run_program(tmp_path, source, RANK=str(rank), WORLD_SIZE="3", LOCAL_RANK=str(rank), SEED=seed)
        assert out.returncode == 0, out.stderr
    ranks = load_run([tmp_path / "run"]).ranks
    prints = {r: log.of_kind(Rng)[0] for r, log in ranks.items()}
    assert prints[0].torch_cpu == prints[1].torch_cpu != prints[2].torch_cpu
    assert (prints[0].sampling_seed, prints[2].sampling_seed) == (5, 6)


def test_a_bad_argument_is_one_line_and_no_record(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
        print(gd.seed_audit(sampling_seed="seven"))
    """)
    assert out.returncode == 0 and out.stdout.strip() == "None"
    (line,) = out.stderr.strip().splitlines()
    assert "seed_audit('init') recorded nothing" in line
    assert load_run([tmp_path / "run"]).ranks[0].of_kind(Rng) == []


@pytest.mark.distributed
def test_the_first_audit_compared_across_ranks_is_said_once_by_rank_0(tmp_path):
    prog = write_program(tmp_path, """
        import os, sys, torch, torch.distributed as dist, grpo_doctor as gd
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        if rank == 2:  # this rank cannot record (its run dir is a file) but still takes part in the gather
            open("blocked", "w").close()
        # rank 3 turned recording off for itself alone: it takes part too
        gd.init("blocked" if rank == 2 else "run", enabled=rank != 3)
        torch.manual_seed(0 if rank < 2 else rank)  # ranks 0 and 1 share a seed, ranks 2 and 3 do not
        gd.seed_audit("init", compare_across_ranks=True)
        gd.seed_audit("init", sampling_seed=rank, compare_across_ranks=True)  # distinct seeds: nothing said
        dist.destroy_process_group()
    """)
    out = subprocess.run(torchrun(prog, 4), env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    said = [line for line in out.stderr.splitlines() if "seed collision" in line]
    assert len(said) == 1 and said[0].startswith("grpo-doctor[rank 0]: seed collision: ranks 0-1 "), out.stderr
    assert "torch CPU RNG state" in said[0]


@pytest.mark.distributed
def test_with_grpo_doctor_disabled_for_the_job_no_rank_gathers(tmp_path):
    # Rank 1 never calls seed_audit or rollouts: were rank 0 to gather anyway, it would wait until the timeout.
    prog = write_program(tmp_path, """
        import datetime, torch.distributed as dist, grpo_doctor as gd
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
        gd.init("run")
        if dist.get_rank() == 0:
            gd.seed_audit("init", compare_across_ranks=True)
            gd.rollouts(["p"], ["a"], [1.0], compare_across_ranks=True)
        dist.barrier()
        dist.destroy_process_group()
    """)
    out = subprocess.run(torchrun(prog, 2), env=clean_env(OMP_NUM_THREADS="1", GRPO_DOCTOR_DISABLE="1"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert not (tmp_path / "run").exists()
