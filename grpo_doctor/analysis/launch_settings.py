"""Launch settings compared between hosts: what the `config-mismatch` rule reports, and what other rules ask
before they tell the user to make every node's launch identical (hang, nccl-timeout, collective-mismatch,
straggler). One comparison in one module, so no rule imports another or runs it again.

Compared per host (the first rank's header on each host): the named settings, every variable with one of
the prefixes, the number of CUDA_VISIBLE_DEVICES and the local world size.

Typical use:
    differences = host_differences(evidence.headers)   # {setting: {host: value}}; None = not set
    if differing_settings(evidence.headers, evidence.probe): ...
"""
from __future__ import annotations

from grpo_doctor.analysis.probe_evidence import ProbeEvidence
from grpo_doctor.schema import Header

SETTINGS = ("NNODES", "NPROC_PER_NODE", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
PREFIXES = ("NCCL_",)
PROBE_ID = "config-mismatch"  # the probe's problem id for settings that differ between nodes


def per_host_settings(headers: dict[int, Header], settings: tuple[str, ...] = SETTINGS,
                      prefixes: tuple[str, ...] = PREFIXES) -> tuple[dict[str, dict[str, object]], dict[str, list[int]]]:
    """({host: {setting: value}}, {host: its ranks}), from each host's first rank header."""
    per_host: dict[str, dict[str, object]] = {}
    ranks_of: dict[str, list[int]] = {}
    for rank, header in headers.items():
        ranks_of.setdefault(header.host, []).append(rank)
        if header.host in per_host:
            continue
        launch = header.launch or {}
        values: dict[str, object] = {k: launch.get(k) for k in settings}
        values |= {k: v for k, v in launch.items() if k.startswith(prefixes)}
        cvd = launch.get("CUDA_VISIBLE_DEVICES")
        values["CUDA_VISIBLE_DEVICES (count)"] = len([d for d in cvd.split(",") if d.strip()]) if cvd else None
        values["local_world_size"] = header.local_world_size
        per_host[header.host] = values
    return per_host, ranks_of


def differences_of(per_host: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """{setting: {host: value}} for the settings whose values differ between hosts."""
    if len(per_host) < 2:
        return {}
    keys = sorted({k for values in per_host.values() for k in values})
    return {k: {h: v.get(k) for h, v in per_host.items()} for k in keys
            if len({repr(v.get(k)) for v in per_host.values()}) > 1}


def host_differences(headers: dict[int, Header]) -> dict[str, dict[str, object]]:
    """The default comparison's differences (see `differences_of`)."""
    return differences_of(per_host_settings(headers)[0])


def differing_settings(headers: dict[int, Header], probe: ProbeEvidence | None) -> set[str]:
    """The names of the launch settings that differ between hosts by the default comparison, and "probe"
    where `grpo-doctor probe` found a difference before training."""
    found = set(host_differences(headers))
    if probe is not None and any(problem.id == PROBE_ID for _, problem in probe.problems()):
        found.add("probe")
    return found
