"""The scheduler's variables read into one `ClusterEnv` (schema/cluster_env.py): node count, this node's
id, master address and port, ranks per node, job id, and which variable gave each.

Each field takes the first of its variables that is set and readable, in this order:
1. torchrun's own: NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE, as a launch script
   exports them for `torchrun --nnodes $NNODES ...`;
2. Kubeflow's, as its training operator sets them in every pod: PET_NNODES, PET_NODE_RANK,
   PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT (torchrun reads PET_* itself; Trainer v2's
   TrainJob sets all five, PyTorchJob v1 the first three, and PET_RDZV_ENDPOINT with an elastic policy);
   an older PyTorchJob (one without PET_NPROC_PER_NODE) sets only MASTER_ADDR, MASTER_PORT and
   WORLD_SIZE / RANK counting pods, which are read as node count and node id inside Kubernetes only
   (KUBERNETES_SERVICE_HOST set, outside a torchrun worker): elsewhere they count processes;
3. Slurm's: SLURM_STEP_NUM_NODES / SLURM_NNODES / SLURM_JOB_NUM_NODES, SLURM_NODEID, the first host of
   SLURM_STEP_NODELIST / SLURM_NODELIST / SLURM_JOB_NODELIST, SLURM_GPUS_ON_NODE, SLURM_NTASKS_PER_NODE,
   SLURM_JOB_ID. Under `srun` the step's variables come first: SLURM_NODEID counts the step's nodes,
   which are the job's unless the step uses fewer.

A bad value (not a number, a node id past the node count, a malformed node list) is never raised:
it is one line in `problems`, and the field is left to the next variable or unset.

Typical use:
    env = read_cluster_env(os.environ)
    env.nnodes, env.node_rank, env.master_addr    # 4, 1, "node01" under `srun --nodes=4 ...`
    describe_sources(env)                          # "node count SLURM_NNODES, node rank SLURM_NODEID, ..."
    cluster_lines(env)                             # ["slurm job 4242, node 1/4, master node01 (from ...)"]
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from grpo_doctor.host.hostlist import HostlistError, expand_hostlist
from grpo_doctor.schema.cluster_env import ClusterEnv

SLURM_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
# torchrun's own words for --nproc-per-node: it decides the count itself, so there is none to read.
NPROC_WORDS = frozenset({"auto", "gpu", "cpu", "xpu"})
FIELD_WORDS = {"nnodes": "node count", "node_rank": "node rank", "master_addr": "master address",
               "master_port": "master port", "nproc_per_node": "ranks per node"}


def read_cluster_env(environ: Mapping[str, str]) -> ClusterEnv:
    r = _Reader(environ)
    kubernetes = bool(environ.get("KUBERNETES_SERVICE_HOST"))
    # PyTorchJob v1 without PET_NODE_RANK: WORLD_SIZE / RANK count its pods (master 0, worker i is i+1).
    pod_ranks = kubernetes and bool(environ.get("MASTER_ADDR")) and "LOCAL_RANK" not in environ
    pod_world = pod_ranks and "PET_NPROC_PER_NODE" not in environ  # newer operators multiply it by nproc
    nnodes = r.number("nnodes", ["NNODES", "PET_NNODES", *(["WORLD_SIZE"] if pod_world else []),
                                 "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"], minimum=1)
    node_rank = r.number("node_rank", ["NODE_RANK", "PET_NODE_RANK", *(["RANK"] if pod_ranks else []), "SLURM_NODEID"])
    if nnodes is not None and node_rank is not None and node_rank >= nnodes:
        r.problem("node_rank", f"{r.sources.pop('node_rank')}={node_rank} with {r.sources['nnodes']}={nnodes}: "
                               f"a node id is 0 .. {nnodes - 1}; ignored")
        node_rank = None
    master_addr = r.text("master_addr", ["MASTER_ADDR", "PET_MASTER_ADDR"])
    master_port = r.number("master_port", ["MASTER_PORT", "PET_MASTER_PORT"], minimum=1, maximum=65535)
    endpoint = environ.get("PET_RDZV_ENDPOINT", "").strip()
    if endpoint and (master_addr is None or master_port is None):
        host, port = _split_endpoint(endpoint)
        if master_addr is None and host:
            master_addr = r.found("master_addr", "PET_RDZV_ENDPOINT", host)
        if master_port is None and port is not None:
            master_port = r.number("master_port", ["PET_RDZV_ENDPOINT"], minimum=1, maximum=65535, value=port)
    if master_addr is None:
        master_addr = r.first_host(SLURM_NODELISTS)
    nproc = r.number("nproc_per_node", ["NPROC_PER_NODE", "PET_NPROC_PER_NODE", "PET_N_PROC_PER_NODE",
                                        "SLURM_GPUS_ON_NODE"], minimum=1)
    if nproc is None and environ.get("SLURM_NTASKS_PER_NODE", "").strip() not in ("", "1"):
        # Tasks per node are ranks per node only where every task is a rank (srun python train.py);
        # one task per node is one launcher per node (srun torchrun ...), which says nothing of its ranks.
        nproc = r.number("nproc_per_node", ["SLURM_NTASKS_PER_NODE"], minimum=1)
    slurm = bool(environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"))
    return ClusterEnv(
        nnodes=nnodes, node_rank=node_rank, master_addr=master_addr, master_port=master_port, nproc_per_node=nproc,
        job_id=r.text("job_id", ["SLURM_JOB_ID", "SLURM_JOBID"]),
        scheduler="slurm" if slurm else "kubernetes" if kubernetes else None,
        task_rank=r.number("task_rank", ["SLURM_PROCID"]) if slurm else None,
        task_local_rank=r.number("task_local_rank", ["SLURM_LOCALID"]) if slurm else None,
        num_tasks=r.number("num_tasks", ["SLURM_NTASKS"], minimum=1) if slurm else None,
        sources=r.sources, problems=tuple(r.problems),
    )


def describe_sources(env: ClusterEnv, names: Iterable[str] = FIELD_WORDS) -> str:
    """"node count SLURM_NNODES, node rank SLURM_NODEID, master address first host of SLURM_JOB_NODELIST"."""
    parts = []
    for name in names:
        source = env.sources.get(name)
        if source:
            source = f"first host of {source}" if source in SLURM_NODELISTS else source
            parts.append(f"{FIELD_WORDS.get(name, name)} {source}")
    return ", ".join(parts)


def cluster_lines(env: ClusterEnv) -> list[str]:
    """What watch says at start of a scheduled or multi-node job: where this node stands, from which
    variables, then each value it could not read. Nothing where nothing was set."""
    lines = []
    if env.label or env.job_id:
        where = [f"{env.scheduler} job {env.job_id}" if env.job_id else None, env.label,
                 f"master {env.master_addr}" if env.master_addr and env.label else None]
        sources = describe_sources(env, ("nnodes", "node_rank", "master_addr"))
        lines.append(", ".join(w for w in where if w) + (f" (from {sources})" if sources and env.label else ""))
    return lines + [message for _, message in env.problems]


def _split_endpoint(endpoint: str) -> tuple[str, str | None]:
    """"host:port", "[::1]:29400" or "host" -> (host, port text or None)."""
    if endpoint.startswith("["):
        host, _, rest = endpoint[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else None
    host, sep, port = endpoint.rpartition(":")
    return (host, port) if sep and ":" not in host else (endpoint, None)


class _Reader:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.sources: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []

    def problem(self, name: str, message: str) -> None:
        self.problems.append((name, message))

    def found(self, name: str, variable: str, value):
        self.sources[name] = variable
        return value

    def text(self, name: str, variables: list[str]) -> str | None:
        for variable in variables:
            value = (self.environ.get(variable) or "").strip()
            if value:
                return self.found(name, variable, value)
        return None

    def number(self, name: str, variables: list[str], minimum: int = 0, maximum: int | None = None,
               value: str | None = None) -> int | None:
        for variable in variables:
            raw = value if value is not None else self.environ.get(variable)
            text = (raw or "").strip()
            if not text or (name == "nproc_per_node" and text in NPROC_WORDS):
                continue
            lo, sep, hi = text.partition(":")
            if name == "nnodes" and sep and lo == hi:  # torchrun's MIN:MAX with MIN == MAX is a fixed count
                text = lo
            elif name == "nnodes" and sep:
                self.problem(name, f"{variable}={raw!r} is an elastic range (torchrun --nnodes MIN:MAX): "
                                   "the node count is not fixed; ignored")
                continue
            if not (text.isascii() and text.isdecimal()) or int(text) < minimum or (
                    maximum is not None and int(text) > maximum):
                bounds = f"{minimum} .. {maximum}" if maximum is not None else f"{minimum} or more"
                self.problem(name, f"{variable}={raw!r} is not a whole number {bounds}; ignored")
                continue
            return self.found(name, variable, int(text))
        return None

    def first_host(self, variables: Iterable[str]) -> str | None:
        for variable in variables:
            raw = (self.environ.get(variable) or "").strip()
            if not raw:
                continue
            try:
                return self.found("master_addr", variable, expand_hostlist(raw)[0])
            except HostlistError as exc:
                self.problem("master_addr", f"{variable}={raw!r} is not a Slurm node list ({exc}); ignored")
        return None
