"""`grpo-doctor probe`: run on every node before training, launched as the training will be.

This node's checks and the node rendezvous (grpo_doctor.probe.node), then torchrun with
`-m grpo_doctor.probe` for the collectives, unless the nodes could not even meet. The launch
settings come from flags, else from the scheduler's variables (host/cluster_env.py): torchrun's
(NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT), Kubeflow's (PET_*), then Slurm's
(SLURM_NNODES, SLURM_NODEID, the first host of SLURM_JOB_NODELIST, SLURM_GPUS_ON_NODE).

Typical use:
    NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 grpo-doctor probe --nproc-per-node 8 --expect use_vllm=true
    srun --nodes=2 --ntasks-per-node=1 grpo-doctor probe --nproc-per-node 8    # nodes and master from Slurm
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpo_doctor.cli.errors import UserError
from grpo_doctor.host.cluster_env import describe_sources, read_cluster_env
from grpo_doctor.logs.terminal_text import terminal_safe
from grpo_doctor.probe import table
from grpo_doctor.probe.options import ProbeOptions, add_measure_arguments, options_from_args, port_problem
from grpo_doctor.probe.results import write_json
from grpo_doctor.probe.verdict import exit_status
from grpo_doctor.probe.worker import NODES_CHECKED_ENV
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.probe_results import NodeReport
from grpo_doctor.schema.safe_read import read_json

MAX_COLLECTIVES_BYTES = 64 * 2**20  # collectives.json: one result per check and node

EPILOG = """\
exit status: 0 nothing found that would stop the job (warnings such as a slow link may be printed);
1 the job would fail as launched (a node missing or unreachable, settings that differ, a collective
that fails); 2 usage error.
results: <run-dir>/probe/node-NNN-HOST.json per node, probe/collectives.json from rank 0;
`grpo-doctor report <run-dir>` turns them into findings.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="check nodes, settings and collectives before training",
                       description=__doc__.split("\n\n")[0], epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    # A flag wins over its variable; the variable over the default.
    # Variables: host/cluster_env.py, in its order (torchrun's, then Kubeflow's PET_*, then Slurm's).
    p.add_argument("--nproc-per-node", type=int, default=None,
                   help="ranks to start on this node (default: $NPROC_PER_NODE, $PET_NPROC_PER_NODE or "
                        "$SLURM_GPUS_ON_NODE; the flag or a variable is needed)")
    p.add_argument("--nnodes", type=int, default=None,
                   help="number of nodes (default: $NNODES, $PET_NNODES or $SLURM_NNODES, else 1)")
    p.add_argument("--node-rank", type=int, default=None,
                   help="this node's rank (default: $NODE_RANK, $PET_NODE_RANK or $SLURM_NODEID, else 0)")
    p.add_argument("--master-addr", default=None,
                   help="node 0's address (default: $MASTER_ADDR, $PET_MASTER_ADDR or the first host of "
                        "$SLURM_JOB_NODELIST; 127.0.0.1 on one node)")
    p.add_argument("--master-port", type=int, default=None,
                   help="node 0's rendezvous port (default: $MASTER_PORT or $PET_MASTER_PORT, else 29500)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object on stdout")
    add_measure_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grpo_doctor.probe.node import NodeSpec, blocks_collectives, run_node_checks

    started_mono = time.monotonic()
    spec, given_by = _node_spec(args, os.environ, NodeSpec)
    try:
        import torch.distributed  # noqa: F401 - the rendezvous store and the collectives are torch's
    except ImportError as exc:
        raise UserError(f"grpo-doctor probe needs torch ({exc})",
                        "pip install 'grpo-doctor[train]' (or torch) on every node") from None
    opts = options_from_args(args, os.environ, started_mono=started_mono)  # SettingsError: a DoctorError
    out = sys.stderr if args.json else sys.stdout

    def say(line: str) -> None:
        print(terminal_safe(line), file=out, flush=True)  # host names and settings come from every node

    say(f"grpo-doctor probe: node {spec.node_rank} of {spec.nnodes}, {spec.nproc_per_node} rank(s), "
        f"master {spec.master_addr}:{spec.master_port}")
    if given_by:
        say(f"  from the environment: {given_by}")
    report = run_node_checks(spec, opts, say)
    paths = RunPaths(Path(opts.run_dir))
    write_json(paths.probe_node_file(spec.node_rank, report.host), report.to_dict())
    for line in _node_lines(report):
        say(line)
    problems = report.problems
    if blocks_collectives(report):
        say("grpo-doctor probe: collectives not run: the nodes cannot form the job")
        status = 1
    else:
        status = max(exit_status(problems), _run_collectives(spec, opts, out))
    say(table.verdict_line(status, str(paths.probe)))
    if args.json:
        collectives = paths.probe_collectives
        print(json.dumps({"status": status, "node": report.to_dict(),
                          "collectives": read_json(collectives, cap=MAX_COLLECTIVES_BYTES)
                          if collectives.is_file() else None},
                         indent=1, default=str))
    return status


def _node_spec(args: argparse.Namespace, env: os._Environ | dict, NodeSpec: type):
    """The launch settings, each from its flag, else the scheduler's variables, else its default; and
    which variables gave them, for the first line the probe prints. A bad variable that a flag does not
    replace stops the probe (exit 2) rather than run it as some other job."""
    cluster = read_cluster_env(env)
    words = {"nnodes": "--nnodes", "node_rank": "--node-rank", "master_addr": "--master-addr",
             "master_port": "--master-port", "nproc_per_node": "--nproc-per-node"}

    def pick(name: str, default: int | str | None):
        flag = getattr(args, name)
        if flag is not None:
            return flag
        problems = cluster.problems_for(name)
        if problems:
            raise UserError(problems[0].removesuffix("; ignored"), f"fix or unset it, or pass {words[name]}")
        value = getattr(cluster, name)
        return default if value is None else value

    if cluster.task_local_rank and cluster.num_tasks and cluster.nnodes and cluster.num_tasks > cluster.nnodes:
        raise UserError(f"this is Slurm task {cluster.task_rank} (SLURM_LOCALID={cluster.task_local_rank}): "
                        "the probe runs once per node, and another task on this node runs it",
                        "srun --ntasks-per-node=1 grpo-doctor probe ... (one probe per node)")
    nproc = pick("nproc_per_node", None)
    if nproc is None or nproc < 1:
        raise UserError("how many ranks to start on this node is not known",
                        "pass --nproc-per-node N (as for torchrun) or set NPROC_PER_NODE")
    nnodes = pick("nnodes", 1)
    node_rank = pick("node_rank", 0)
    if not 0 <= node_rank < nnodes:
        raise UserError(f"node rank {node_rank} with {nnodes} node(s)", "NODE_RANK must be 0 .. NNODES-1")
    master_addr = pick("master_addr", None)
    if master_addr is None:
        if nnodes > 1:
            raise UserError(f"MASTER_ADDR is not set and NNODES={nnodes}",
                            "pass --master-addr (node 0's address, the same on every node) or set MASTER_ADDR")
        master_addr = "127.0.0.1"
    master_port = pick("master_port", 29500)
    if (problem := port_problem(master_port)) is not None:
        raise UserError(problem, "pass --master-port (or set MASTER_PORT) to a free port, the same on every node")
    from_env = [name for name in words if getattr(args, name) is None]
    return (NodeSpec(node_rank=node_rank, nnodes=nnodes, nproc_per_node=nproc, master_addr=master_addr,
                     master_port=master_port), describe_sources(cluster, from_env))


def _node_lines(report: NodeReport) -> list[str]:
    pre = report.preflight
    gpus = "no NVIDIA driver (gloo on CPU)" if pre.gpus_visible is None else f"{pre.gpus_visible} GPU(s) visible"
    ifaces = ", ".join(f"{n} {'/'.join(a) or '-'}" for n, a in pre.interfaces.items())
    lines = [f"  master {pre.master_addr}:{pre.master_port} resolves to {', '.join(pre.resolved) or '-'}; "
             f"{pre.connect} ({pre.connect_detail}); route from {pre.route_address or '-'}",
             f"  interfaces: {ifaces or 'none'}; {gpus}"]
    if report.arrived:
        lines.append(f"  nodes joined: {', '.join(f'{n} ({h})' for n, h in sorted(report.arrived.items()))} "
                     f"after {report.waited_s or 0:.1f} s")
    return lines + (table.problem_lines(report.problems) if report.problems else [])


def _run_collectives(spec, opts: ProbeOptions, out) -> int:
    """torchrun -m grpo_doctor.probe on this node; its own exit status (1 when it found a failure).
    The whole launch is bounded too: torchrun's rendezvous, then the ranks' own stage budgets."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={spec.nnodes}", f"--node-rank={spec.node_rank}",
           f"--nproc-per-node={spec.nproc_per_node}", f"--master-addr={spec.master_addr}",
           f"--master-port={spec.master_port}", f"--rdzv-conf=timeout={int(opts.rdzv_timeout_s)}",
           "-m", "grpo_doctor.probe", "--run-dir", str(Path(opts.run_dir).absolute()),
           "--rdzv-timeout", str(opts.rdzv_timeout_s), "--op-timeout", str(opts.op_timeout_s),
           "--sizes", ",".join(str(s) for s in opts.sizes_bytes), "--iters", str(opts.iters),
           "--warmup", str(opts.warmup), "--p2p-size", str(opts.p2p_bytes), "--repeats", str(opts.repeats),
           "--slow-ratio", str(opts.slow_ratio), "--backend", opts.backend]
    # Every launch setting is on the command line above: Kubeflow's PET_* (torchrun reads them as its
    # defaults) would otherwise switch an elastic PyTorchJob's probe to its c10d rendezvous.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")} | {NODES_CHECKED_ENV: "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    budget_s = 2 * opts.rdzv_timeout_s + opts.op_timeout_s * (12 + 4 * len(opts.sizes_bytes) + 2 * opts.repeats) + 60
    proc = subprocess.Popen(cmd, env=env, stdout=out, start_new_session=True)
    try:
        return 1 if proc.wait(timeout=budget_s) != 0 else 0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        print(f"grpo-doctor probe: torchrun did not finish within {budget_s:.0f} s and was stopped", file=out)
        return 1
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        raise
