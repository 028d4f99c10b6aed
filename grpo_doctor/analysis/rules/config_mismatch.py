"""`config-mismatch`: launch settings differ between hosts (CASES.md case 1: ranks take different code
paths and wait in different collectives; case 3: unequal GPUs per node).

Compared per host (the first rank's header on each host, analysis/launch_settings.py): NNODES,
NPROC_PER_NODE, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, every NCCL_* variable, the number of
CUDA_VISIBLE_DEVICES and the local world size. Evidence keys: `differences` ({setting: {host: value}}; None = not set).

Also every `config-mismatch` problem `grpo-doctor probe` found before training (its
`probe/` files): evidence keys `source` ("probe"), `probe_file`, `message`, `nodes`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.launch_settings import PREFIXES, SETTINGS, differences_of, per_host_settings
from grpo_doctor.analysis.probe_evidence import probe_findings
from grpo_doctor.analysis.views import RunView, View

ID = "config-mismatch"
READS = {View.PROBE_RESULTS, View.RANKS}

HINTS = (
    "Make every node's launch identical except NODE_RANK: same NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT, "
    "CUDA_VISIBLE_DEVICES count and use_vllm (export them from one shared script).",
    "Use the same number of GPUs on every node (NPROC_PER_NODE equal everywhere); unequal nodes make stragglers.",
    "Keep NCCL_* variables (NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE, ...) the same on all nodes.",
)
CRITICAL_SETTINGS = ("NNODES", "NPROC_PER_NODE", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                     "CUDA_VISIBLE_DEVICES (count)", "local_world_size")


@dataclass(frozen=True)
class Config:
    settings: tuple[str, ...] = SETTINGS
    prefixes: tuple[str, ...] = PREFIXES  # every variable with one of these prefixes is compared too


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    yield from probe_findings(run.probe, ID)
    per_host, ranks_of = per_host_settings(run.headers, cfg.settings, cfg.prefixes)
    differences = differences_of(per_host)
    if not differences:
        return
    critical = any(k in CRITICAL_SETTINGS for k in differences)
    ranks = sorted(r for rs in ranks_of.values() for r in rs)
    yield Finding(
        id=ID, severity="critical" if critical else "warning",
        title=f"launch settings differ between hosts: {', '.join(differences)}",
        ranks=tuple(ranks), hosts=tuple(sorted(per_host)), step=None, phase=None,
        evidence={"differences": differences}, hints=HINTS,
    )
