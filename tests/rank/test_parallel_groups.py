"""Who is in which process group (issue 24 part 3): `watch --instrument` records each group a rank is in as
`new_group`, `new_subgroups` and `init_device_mesh` return (rank/auto/groups.py), the rank API does it
on request (`parallel_group`, `device_mesh`, `parallel_layout`), and `grpo-doctor report` names a hung
rank's groups; the wrappers keep the zero-code guarantees of the collectives' (docs/instrument.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env, free_port, write_program

from grpo_doctor.rank.auto import INSTRUMENT_ENV, site_dir

SITE = str(site_dir())
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4", "--master-addr=127.0.0.1"]
CLI = [sys.executable, "-m", "grpo_doctor.cli.main"]


def instrumented(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = clean_env(OMP_NUM_THREADS="1", GRPO_DOCTOR_RUN_DIR=str(tmp_path / "run"), **extra)
    env["PYTHONPATH"] = SITE + os.pathsep + env["PYTHONPATH"]
    env[INSTRUMENT_ENV] = "1"
    return env


def records(run_dir: Path, rank: int, kind: str | None = None) -> list[dict]:
    lines = (run_dir / "ranks" / f"rank-{rank:05d}.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if kind is None or r["kind"] == kind]


# A trainer with a 2x2 DeviceMesh (dp, tp) and groups of its own; rank 3's reward function never returns
# while the others wait for it in an all_reduce.
MESH_JOB = """
    import pickle, sys, time, torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    def score_completions():
        time.sleep(600)

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    reward = dist.new_group([1, 3], group_desc="reward_workers")
    pair = dist.new_group([0, 3])
    mine, _ = dist.new_subgroups(2)  # the tp rows again, unnamed
    pickle.dumps((dist.new_group, dist.new_subgroups, init_device_mesh, dist.init_device_mesh))
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        model(torch.ones(2, 4)).sum().backward()
        dist.all_reduce(model.bias.grad, group=mesh.get_group("tp"))
        dist.all_reduce(model.bias.grad, group=mesh.get_group("dp"))
        opt.step()
        opt.zero_grad()
    if rank == int(sys.argv[1]):
        score_completions()
    dist.all_reduce(torch.ones(1))
    sys.stdout.write(f"rank {rank} done\\n")
    dist.destroy_process_group()
"""


@pytest.mark.distributed
@pytest.mark.slow
def test_a_torchrun_job_under_watch_instrument_records_its_mesh_and_groups_and_the_report_names_the_hung_ranks(
        tmp_path):
    job = write_program(tmp_path, MESH_JOB, "mesh_job.py")
    run_dir = tmp_path / "run"
    cmd = [*CLI, "watch", "--instrument", "--run-dir", str(run_dir), "--no-report", "--hang-timeout", "15",
           "--second-look", "1", "--on-hang", "kill", "--", *TORCHRUN, f"--master-port={free_port()}", str(job), "3"]
    out = subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 124, out.stderr[-3000:]
    groups = [(g["name"], g["dim"], g["ranks"], g["source"]) for g in records(run_dir, 3, "parallel_group")]
    assert groups[:3] == [("dp", "dp", [1, 3], "device_mesh"), ("tp", "tp", [2, 3], "device_mesh"),
                          ("reward_workers", None, [1, 3], "new_group")]
    assert groups[3][:3] == (None, None, [0, 3]) and groups[4][:3] == (None, None, [2, 3])  # unnamed
    mesh = records(run_dir, 0, "parallel_group")[0]
    assert (mesh["mesh_shape"], mesh["mesh_dim_names"], mesh["mesh_dim"]) == ([2, 2], ["dp", "tp"], 0)
    assert "reward_workers" not in {g["name"] for g in records(run_dir, 0, "parallel_group")}  # not a member
    header = records(run_dir, 3, "header")[0]
    assert (header["local_rank"], header["gpu_index"], header["gpu_pci_bus_id"]) == (3, None, None)  # CPU

    report = subprocess.run([*CLI, "report", str(run_dir)], env=clean_env(), capture_output=True, text=True,
                            timeout=300)
    assert report.returncode == 1, report.stderr[-3000:]
    # On a loaded machine watch may also have looked once while every rank was still starting: that look
    # names them all; the hang is the one naming rank 3.
    [found] = [f for f in json.loads((run_dir / "findings.json").read_text())["findings"]
               if f["id"] == "hang" and f["ranks"] == [3]]
    host = header["host"]
    assert found["title"].endswith(f"; rank 3: host {host}, local rank 3, tp group 1 (ranks 2-3), dp group 1 "
                                   "(ranks 1,3), reward_workers group 0 (ranks 1,3), group 6 (ranks 0,3)"), found["title"]
    where = found["evidence"]["coordinates"]["3"]
    assert where["groups"]["tp"] == {"label": "tp", "dim": "tp", "name": "tp", "index": 1, "ranks": "2-3", "size": 2,
                                     "position": 1}
    assert found["evidence"]["fault_domain"] == "rank"


# One process, a group of one: what the job can notice, with and without the wrappers.
GUARANTEES_JOB = """
    import gc, json, pickle, sys, weakref, torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
    out = {}
    makers = (dist.new_group, dist.new_subgroups, dist.new_subgroups_by_enumeration, dist.init_device_mesh,
              init_device_mesh)
    blob = pickle.dumps(makers)
    out["pickled"] = pickle.loads(blob) == makers
    out["names"] = [f.__name__ for f in makers]
    g = dist.new_group([0], group_desc="TENSOR_MODEL_PARALLEL_GROUP")
    ref = weakref.ref(g)
    dist.destroy_process_group(g)
    del g
    gc.collect()
    out["group_alive"] = ref() is not None
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
    out["mesh"] = mesh.mesh.tolist()

    def step(x):
        group = dist.new_group([0])
        dist.all_reduce(x, group=group)
        return x * 2

    # torch's own new_group cannot be traced (a graph break; fullgraph=True raises Unsupported with or without us)
    out["compiled"] = torch.compile(step, backend="eager")(torch.ones(2)).tolist()
    real = dist.get_process_group_ranks
    dist.get_process_group_ranks = lambda pg: 1 / 0  # a group our code cannot read
    unreadable = dist.new_group([0], group_desc="unreadable")
    dist.get_process_group_ranks = real
    t = torch.ones(1)
    dist.all_reduce(t, group=unreadable)
    from vllm.distributed.parallel_state import GroupCoordinator
    out["vllm"] = GroupCoordinator([[0]], group_name="tp").ranks
    out["sum"] = t.item()
    sys.stdout.write(json.dumps(out) + "\\n")
    dist.destroy_process_group()
"""
# vLLM's GroupCoordinator as it makes its groups (vllm/distributed/parallel_state.py): the name is a local.
FAKE_VLLM = """
    import torch.distributed

    class GroupCoordinator:
        def __init__(self, group_ranks, group_name=None):
            group_name = group_name or "anonymous"
            for ranks in group_ranks:
                device_group = torch.distributed.new_group(ranks, backend="gloo")
                if torch.distributed.get_rank() in ranks:
                    self.ranks = ranks
"""


@pytest.mark.distributed
def test_the_wrappers_keep_no_group_alive_pickle_compile_as_torchs_and_an_unreadable_group_costs_its_record(
        tmp_path):
    """Before: no parallel_group record at all; the wrappers must change nothing else the job can see."""
    package = tmp_path / "lib" / "vllm" / "distributed"
    package.mkdir(parents=True)
    for folder in (package.parent, package):
        (folder / "__init__.py").write_text("")
    write_program(package, FAKE_VLLM, "parallel_state.py")
    job = write_program(tmp_path, GUARANTEES_JOB, "guarantees.py")
    lib = str(tmp_path / "lib")
    plain_env = clean_env(OMP_NUM_THREADS="1")
    plain_env["PYTHONPATH"] = lib + os.pathsep + plain_env["PYTHONPATH"]
    ours_env = instrumented(tmp_path)
    ours_env["PYTHONPATH"] += os.pathsep + lib
    results = {}
    for name, env in (("plain", plain_env), ("ours", ours_env)):
        out = subprocess.run([sys.executable, str(job), str(free_port())], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        results[name] = json.loads(out.stdout.splitlines()[-1])
        if name == "ours":
            assert "instrumentation is off" not in out.stderr and "records no process groups" not in out.stderr
    assert results["ours"] == results["plain"]
    assert results["ours"]["pickled"] and not results["ours"]["group_alive"]
    groups = [(g["name"], g["dim"], g["ranks"], g["source"]) for g in records(tmp_path / "run", 0, "parallel_group")]
    assert groups == [("TENSOR_MODEL_PARALLEL_GROUP", "tp", [0], "new_group"), ("fsdp", "fsdp", [0], "device_mesh"),
                      ("tp", "tp", [0], "new_group")]  # vLLM's name read from its GroupCoordinator
    # The compiled step's group (under tracing: torch's call alone) and the unreadable one have no record; the
    # collective on the unreadable group is still a phase: the layer stayed on.
    phases = [r for r in records(tmp_path / "run", 0, "phase_begin")]
    assert phases[-1]["phase"] == "all_reduce" and phases[-1]["detail"]["group"] == "unreadable"


API_JOB = """
    import json, sys, types
    import grpo_doctor as gd

    # What Megatron and vLLM keep once they made their groups (never imported by grpo_doctor).
    megatron = types.ModuleType("megatron.core.parallel_state")
    megatron._TENSOR_MODEL_PARALLEL_GLOBAL_RANKS = [4, 5, 6, 7]
    megatron._PIPELINE_GLOBAL_RANKS = [5, 13]
    megatron._DATA_PARALLEL_GLOBAL_RANKS = None  # not made: left out
    vllm = types.ModuleType("vllm.distributed.parallel_state")
    vllm._TP = types.SimpleNamespace(ranks=[5, 6], unique_name="tp:0")
    sys.modules.update({"megatron.core.parallel_state": megatron, "vllm.distributed.parallel_state": vllm})
    gd.init(sys.argv[1])
    found = gd.parallel_layout()
    gd.parallel_group("expert", [1, 5])
    gd.parallel_group("tp", "not ranks")  # refused in one line, nothing raised
    gd.shutdown()
    print(json.dumps({"found": found, "torch": "torch" in sys.modules}))
"""


def test_the_rank_api_records_groups_given_and_the_frameworks_own_without_importing_torch(tmp_path):
    job = write_program(tmp_path, API_JOB, "api_job.py")
    out = subprocess.run([sys.executable, str(job), str(tmp_path / "run")], env=clean_env(RANK="5", WORLD_SIZE="16"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"found": 3, "torch": False}
    assert "parallel_group('tp') ignored" in out.stderr
    groups = [(g["name"], g["dim"], g["ranks"], g["source"]) for g in records(tmp_path / "run", 5, "parallel_group")]
    assert groups == [("TENSOR_MODEL_PARALLEL_GROUP", "tp", [4, 5, 6, 7], "megatron"),
                      ("PIPELINE_MODEL_PARALLEL_GROUP", "pp", [5, 13], "megatron"),
                      ("tp:0", "tp", [5, 6], "vllm"), ("expert", "ep", [1, 5], "api")]


def test_names_say_their_dimension():
    from grpo_doctor.rank.layout import dim_of

    assert [dim_of(n) for n in ("TENSOR_MODEL_PARALLEL_GROUP", "PIPELINE_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP",
                                "DATA_PARALLEL_GROUP_WITH_CP", "EXPERT_MODEL_PARALLEL_GROUP", "tp", "mesh_default",
                                "EMBEDDING_GROUP", None)] == ["tp", "pp", "dp", "dp-cp", "ep", "tp", None, None, None]


def test_the_header_names_the_gpu_by_nvml_index_and_pci_bus_id(tmp_path, monkeypatch):
    pynvml = pytest.importorskip("pynvml")  # noqa: F841 - the fake driver takes its constants
    from fake_pynvml import FakeDriver, FakeGpu

    from grpo_doctor.host.nvml import Nvml
    from grpo_doctor.rank.identity import RankIdentity
    from grpo_doctor.rank.recorder import Recorder
    from grpo_doctor.schema import EndReason

    fake = FakeDriver([FakeGpu("GPU-aaaa", "00000000:3B:00.0"), FakeGpu("GPU-bbbb", "00000000:4C:00.0")])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ident = RankIdentity(rank=9, local_rank=1, world_size=16, node_rank=1, local_world_size=8, host="gpu-a1",
                         pid=os.getpid(), attempt=0)
    rec = Recorder(tmp_path / "run", ident, sync=False, warn=print, nvml=Nvml())
    rec.end(EndReason.SHUTDOWN)
    header = records(tmp_path / "run", 9, "header")[0]
    assert (header["gpu_uuid"], header["gpu_index"], header["gpu_pci_bus_id"]) == ("GPU-bbbb", 1, "00000000:4C:00.0")
    assert Nvml().place_of("GPU-zzzz") == (None, None)  # a UUID NVML does not know: nothing, no error
