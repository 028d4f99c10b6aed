"""`version-mismatch`: library versions differ between hosts (CASES.md case 1).

Compared per host (the first rank's header on each host): python, torch, deepspeed, vllm,
transformers, trl, nccl, cuda, cuda_driver. Evidence keys: `differences` ({library: {host: version}}).

Also every `version-mismatch` problem `grpo-doctor probe` found before training (its
`probe/` files): evidence keys `source` ("probe"), `probe_file`, `message`, `nodes`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.probe_evidence import probe_findings
from grpo_doctor.analysis.views import RunView, View

ID = "version-mismatch"
READS = {View.PROBE_RESULTS, View.RANKS}

HINTS = (
    "Install the same versions on every node (one requirements file or one container image). Pin vLLM to the "
    "range your trainer declares, not to one remembered release: TRL's `vllm` extra (pip install \"trl[vllm]\"; "
    f"TRL {remedies.CHECKED_AGAINST[remedies.TRL]} declares {remedies.VLLM_RANGES[remedies.TRL]}), verl's `vllm` "
    "extra (pip install \"verl[vllm]\"), ms-swift's recommended versions (its README's table, its official images).",
    "Different NCCL or CUDA driver versions between nodes can hang or corrupt collectives: align the driver "
    "and the torch build (same CUDA) everywhere.",
)


@dataclass(frozen=True)
class Config:
    ignore: tuple[str, ...] = ()  # libraries whose differences do not matter to you


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    yield from probe_findings(run.probe, ID)
    per_host: dict[str, dict[str, str | None]] = {}
    for header in run.headers.values():
        per_host.setdefault(header.host, dict(header.versions or {}))
    if len(per_host) < 2:
        return
    names = sorted({k for v in per_host.values() for k in v} - set(cfg.ignore))
    differences = {n: {h: v.get(n) for h, v in per_host.items()} for n in names
                   if len({v.get(n) for v in per_host.values()}) > 1}
    if not differences:
        return
    yield Finding(
        id=ID, severity="warning",
        title="library versions differ between hosts: " + ", ".join(
            f"{n} ({' vs '.join(str(v) for v in dict.fromkeys(by_host.values()))})" for n, by_host in differences.items()),
        ranks=(), hosts=tuple(sorted(per_host)), step=None, phase=None,
        evidence={"differences": differences}, hints=HINTS,
    )
