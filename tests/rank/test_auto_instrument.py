"""Zero-code instrumentation (`watch --instrument`): a script that never imports grpo_doctor gets phases
and steps, its results unchanged; a failure inside is one line and the job goes on."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env, free_port, write_program

from grpo_doctor.rank.auto import INSTRUMENT_ENV, TARGETS, site_dir
from grpo_doctor.supervisor import childenv

SITE = str(site_dir())

# A torchrun script as users write them: no grpo_doctor anywhere.
DISTRIBUTED_JOB = """
    import sys, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    actor, critic = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    # Two optimizers, one with two param groups: still one step per iteration.
    opt_actor = torch.optim.SGD([{"params": [actor.weight]}, {"params": [actor.bias], "lr": 0.01}], lr=0.1)
    opt_critic = torch.optim.AdamW(critic.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    for step in range(3):
        loss = actor(x).pow(2).mean() + critic(x).pow(2).mean()
        opt_actor.zero_grad(); opt_critic.zero_grad()
        loss.backward()
        for p in [*actor.parameters(), *critic.parameters()]:
            dist.all_reduce(p.grad)
        opt_actor.step(); opt_critic.step()
    dist.barrier()
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, dist.get_rank())
    # One write per line: two ranks share the pipe, and print() writes its parts one by one.
    sys.stdout.write(f"gathered {ranks}\\n")
    sys.stdout.flush()
    dist.destroy_process_group()
"""

# One process in a one-rank gloo group, ending with its own exit status.
SINGLE_JOB = """
    import sys, torch, torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    dist.all_reduce(model.bias.grad)
    opt.step()
    print("bias grad", model.bias.grad.item(), flush=True)
    sys.exit(3)
"""


def instrumented(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = clean_env(OMP_NUM_THREADS="1", GRPO_DOCTOR_RUN_DIR=str(tmp_path / "run"), **extra)
    env["PYTHONPATH"] = SITE + ":" + env["PYTHONPATH"]
    env[INSTRUMENT_ENV] = "1"
    return env


def records(run_dir: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "ranks" / f"rank-{rank:05d}.jsonl").read_text().splitlines()]


def run_single(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    prog = write_program(tmp_path, SINGLE_JOB, "single.py")
    return subprocess.run([sys.executable, str(prog), str(free_port())], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_the_sitecustomize_runs_the_one_it_shadows_and_loads_no_grpo_doctor_before_torch(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("print('the shadowed sitecustomize ran', __name__)\n")
    env = instrumented(tmp_path)
    env["PYTHONPATH"] = f"{SITE}:{other}:{env['PYTHONPATH']}"
    code = ("import sys; print(type(sys.meta_path[0]).__name__, "
            "sorted(m for m in sys.modules if m.startswith(('grpo_doctor', 'torch'))))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["the shadowed sitecustomize ran sitecustomize", "PostImportFinder []"]
    assert out.stderr == ""

    (other / "sitecustomize.py").write_text("raise ImportError('broken site setup')\n")
    out = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True, timeout=60)
    # As Python itself reports a failing sitecustomize, and the program runs.
    assert out.stdout == "ran\n"
    assert out.stderr == "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nImportError: broken site setup\n"


def test_without_the_switch_the_sitecustomize_installs_nothing(tmp_path):
    env = instrumented(tmp_path)
    del env[INSTRUMENT_ENV]
    out = subprocess.run([sys.executable, "-c", "import sys; print(type(sys.meta_path[0]).__name__)"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() != "PostImportFinder"


def test_the_targets_switch_and_directory_are_spelled_alike_in_every_layer():
    tree = ast.parse((site_dir() / "sitecustomize.py").read_text())
    names = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
    assert set(ast.literal_eval(names["TARGETS"].args[0])) == set(TARGETS)
    assert ast.literal_eval(names["INSTRUMENT_ENV"]) == INSTRUMENT_ENV == childenv.INSTRUMENT_ENV
    assert childenv.INSTRUMENT_SITE_DIR == site_dir() and (site_dir() / "sitecustomize.py").is_file()


def test_watch_instrument_puts_the_site_directory_first_and_keeps_the_users_path(tmp_path):
    env, added = childenv.child_environment({"PYTHONPATH": "/mine:/theirs"}, tmp_path, "2.5.1", instrument=True)
    assert env["PYTHONPATH"] == f"{SITE}:/mine:/theirs" and env[INSTRUMENT_ENV] == "1"
    assert added["PYTHONPATH"] == env["PYTHONPATH"]  # recorded in run.json as watch's doing
    env, added = childenv.child_environment({"PYTHONPATH": "/mine"}, tmp_path, "2.5.1")
    assert env["PYTHONPATH"] == "/mine" and "PYTHONPATH" not in added and INSTRUMENT_ENV not in env


@pytest.mark.distributed
def test_a_plain_torchrun_script_under_watch_instrument_gets_collective_phases_and_steps(tmp_path):
    script = write_program(tmp_path, DISTRIBUTED_JOB, "job.py")
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--instrument", "--no-report", "--run-dir",
           str(run_dir), "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(script)]
    out = subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("gathered [0, 1]") == 2
    for rank in (0, 1):
        recs = records(run_dir, rank)
        assert recs[0]["kind"] == "header" and recs[0]["rank"] == rank and recs[0]["world_size"] == 2
        begins = [r for r in recs if r["kind"] == "phase_begin"]
        assert [r["phase"] for r in begins] == ["all_reduce"] * 12 + ["barrier", "all_gather_object"]
        assert [r["detail"]["seq"] for r in begins] == list(range(1, 15))
        assert begins[0]["detail"] == {"group": "default_pg", "group_size": 2, "seq": 1, "numel": 4, "size_bytes": 16}
        assert [r["step"] for r in recs if r["kind"] == "step"] == [0, 1, 2]  # not 6: one clock optimizer
        assert sum(r["kind"] == "phase_end" for r in recs) == 14 and recs[-1]["kind"] == "end"
    set_by_watch = json.loads((run_dir / "run.json").read_text())["hosts"]
    (host,) = set_by_watch.values()
    assert host["env_set_by_watch"][INSTRUMENT_ENV] == "1"
    assert host["env_set_by_watch"]["PYTHONPATH"].startswith(SITE)


def test_a_failure_inside_the_instrumentation_is_one_line_and_the_job_ends_with_its_own_status(tmp_path):
    out = run_single(tmp_path, instrumented(tmp_path, GRPO_DOCTOR_INSTRUMENT_FAULT="1"))
    assert out.returncode == 3 and out.stdout == "bias grad 2.0\n", out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if "grpo-doctor" in line]
    assert len(lines) == 1 and "zero-code instrumentation is off" in lines[0] and "fault injected" in lines[0], out.stderr
    assert not (tmp_path / "run" / "ranks").exists()


@pytest.mark.slow
def test_results_with_instrumentation_equal_those_without_and_generate_is_a_rollout_phase(tmp_path):
    job = """
        import json, sys, torch, torch.distributed as dist
        from transformers import GPT2Config, GPT2LMHeadModel
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32,
                                           bos_token_id=0, eos_token_id=0))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for step in range(3):
            ids = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=True, pad_token_id=0)
            loss = model(ids, labels=ids).loss
            opt.zero_grad(); loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            losses.append(loss.item())
        print(json.dumps({"ids": ids.tolist(), "losses": losses,
                          "params": sum(p.double().sum().item() for p in model.parameters())}))
    """
    prog = write_program(tmp_path, job, "hf.py")
    outs = [subprocess.run([sys.executable, str(prog), str(free_port())], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=180)
            for env in (clean_env(OMP_NUM_THREADS="1"), instrumented(tmp_path))]
    assert all(o.returncode == 0 for o in outs), outs[1].stderr[-3000:]
    assert outs[0].stdout == outs[1].stdout  # sampled ids, losses, parameters: identical
    recs = records(tmp_path / "run", 0)
    phases = [r["phase"] for r in recs if r["kind"] == "phase_begin"]
    assert phases.count("rollout") == 3 and phases.count("all_reduce") > 3
    assert [r["step"] for r in recs if r["kind"] == "step"] == [0, 1, 2]
