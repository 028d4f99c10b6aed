"""What a rank's records say about it, written by real processes using the public API."""
import math

from helpers import run_program

from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Header, Memory, PhaseBegin, PhaseEnd, Step


def test_a_rank_file_starts_with_a_header_of_identity_versions_and_launch_settings(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
    """, RANK="3", LOCAL_RANK="1", WORLD_SIZE="4", GROUP_RANK="1", LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="10.0.0.1", MASTER_PORT="29500", NCCL_SOCKET_IFNAME="eth0", TORCH_NCCL_TRACE_BUFFER_SIZE="2000",
        PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", CUDA_VISIBLE_DEVICES="0,1", UNRELATED="x")
    assert out.returncode == 0, out.stderr
    log = load_run([tmp_path / "run"]).ranks[3]
    header = log.records[0]
    assert isinstance(header, Header)
    assert (header.rank, header.local_rank, header.world_size, header.node_rank, header.local_world_size) == (3, 1, 4, 1, 2)
    assert header.launch["MASTER_ADDR"] == "10.0.0.1" and header.launch["NCCL_SOCKET_IFNAME"] == "eth0"
    assert header.launch["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert header.launch["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000" and "UNRELATED" not in header.launch
    assert header.versions["python"] and "torch" in header.versions and "nccl" in header.versions
    assert header.schema_version == 1


def test_phases_nest_steps_number_the_records_and_the_decorator_marks_a_phase(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")

        @gd.phase("reward")
        def reward():
            return 1.0

        for n in range(2):
            with gd.phase("rollout"):
                with gd.phase("generate"):
                    pass
            reward()
            gd.step(n, loss=0.5 * n, reward=reward(), nan=float("nan"))
    """)
    assert out.returncode == 0, out.stderr
    log = load_run([tmp_path / "run"]).ranks[0]
    begins = [(r.path, r.step) for r in log.of_kind(PhaseBegin)]
    assert begins[:3] == [("rollout", 0), ("rollout/generate", 0), ("reward", 0)]
    assert ("rollout", 1) in begins
    ends = log.of_kind(PhaseEnd)
    assert all(e.duration_s >= 0 and e.synced is False and e.error is None for e in ends)
    steps = log.of_kind(Step)
    assert [s.step for s in steps] == [0, 1] and steps[1].metrics["loss"] == 0.5
    assert math.isnan(steps[0].metrics["nan"])
    assert log.end.reason == "exit" and log.open_path is None


def test_metrics_given_as_numpy_or_tensors_are_stored_as_numbers(tmp_path):
    out = run_program(tmp_path, """
        import numpy as np, torch, grpo_doctor as gd
        gd.init("run")
        gd.step(0, a=np.float32(0.5), b=torch.tensor(2.0), c=np.int64(3), d=object)
    """)
    assert out.returncode == 0, out.stderr
    metrics = load_run([tmp_path / "run"]).ranks[0].of_kind(Step)[0].metrics
    assert metrics["a"] == 0.5 and metrics["b"] == 2.0 and metrics["c"] == 3.0
    assert metrics["d"] == "<class 'object'>"


def test_memory_snapshot_without_a_gpu_records_host_memory_only(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
        block = bytearray(64 * 2**20)
        rec = gd.memory_snapshot("after-alloc")
        print(rec.host_rss_bytes)
    """)
    assert out.returncode == 0, out.stderr
    mem = load_run([tmp_path / "run"]).ranks[0].of_kind(Memory)[0]
    assert mem.tag == "after-alloc" and mem.host_rss_bytes >= 64 * 2**20
    assert mem.allocated_bytes is None and mem.gpu_processes is None


def test_the_supervisor_run_dir_wins_over_the_script_argument(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        print(gd.init("from-script"))
    """, GRPO_DOCTOR_RUN_DIR=str(tmp_path / "from-supervisor"))
    assert out.stdout.strip() == str(tmp_path / "from-supervisor")
    assert (tmp_path / "from-supervisor" / "ranks" / "rank-00000.jsonl").exists()
    assert not (tmp_path / "from-script").exists()


def test_without_any_location_local_ranks_of_one_launch_share_a_new_directory(tmp_path):
    prog = """
        import grpo_doctor as gd
        print(gd.init())
    """
    first = run_program(tmp_path, prog, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2")
    second = run_program(tmp_path, prog, RANK="1", LOCAL_RANK="1", WORLD_SIZE="2")
    # Both children of this test process: the same launcher, hence the same directory.
    assert first.stdout == second.stdout and first.stdout.startswith("grpo-doctor-runs/")
    run = load_run([tmp_path / first.stdout.strip()])
    assert sorted(run.ranks) == [0, 1]


def test_recording_can_be_switched_off(tmp_path):
    out = run_program(tmp_path, """
        import grpo_doctor as gd
        print(gd.init("run"))
        with gd.phase("x"):
            gd.step(0, loss=1.0)
    """, GRPO_DOCTOR_DISABLE="1")
    assert out.returncode == 0 and out.stdout.strip() == "None"
    assert not (tmp_path / "run").exists()


def test_a_forked_worker_does_not_write_into_its_rank_file(tmp_path):
    out = run_program(tmp_path, """
        import os, grpo_doctor as gd
        gd.init("run")
        pid = os.fork()
        if pid == 0:
            with gd.phase("worker"):
                gd.step(99)
            os._exit(0)
        os.waitpid(pid, 0)
        with gd.phase("parent"):
            pass
    """)
    assert out.returncode == 0, out.stderr
    log = load_run([tmp_path / "run"]).ranks[0]
    assert [p.phase for p in log.of_kind(PhaseBegin)] == ["parent"] and log.last_step is None
    assert len(log.pids) == 1


def test_steps_counted_with_numpy_are_whole_numbers_and_a_fraction_is_refused_once(tmp_path):
    out = run_program(tmp_path, """
        import numpy as np, grpo_doctor as gd
        gd.init("run")
        for n in np.arange(3):
            gd.step(n)
        gd.step(2.5)
        gd.step(2.5)
    """)
    assert out.returncode == 0
    steps = load_run([tmp_path / "run"]).ranks[0].of_kind(Step)
    assert [s.step for s in steps] == [0, 1, 2] and all(type(s.step) is int for s in steps)
    assert out.stderr.count("step(2.5) ignored: a step must be a whole number") == 1
