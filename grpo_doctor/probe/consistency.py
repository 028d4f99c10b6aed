"""Which settings and versions differ between nodes, and which node is the odd one out.

The odd nodes of a setting are those holding a value fewer nodes hold; on a tie (two nodes, one
value each), those that differ from the first node (node 0, the master).

Typical use:
    problems = compare_nodes({"node0": settings0, "node1": settings1}, versions_by_node)
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from grpo_doctor.probe.results import Problem
from grpo_doctor.probe.settings import is_critical

CONFIG_HINT = ("Launch every node from one shared script so that everything but NODE_RANK is identical: "
               "NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT, the GPUs made visible, NCCL_* variables and "
               "the training arguments (use_vllm, vllm_mode, num_generations, ...).")
VERSION_HINT = ("Install the same versions on every node (one container image or one pinned requirements file); "
                "different torch / NCCL / vLLM / DeepSpeed versions between nodes can hang or corrupt collectives.")


def odd_ones(values: Mapping[str, Any]) -> list[str]:
    """Labels whose value is in the minority (ties: those differing from the first label)."""
    counts = Counter(repr(v) for v in values.values())
    if len(counts) < 2:
        return []
    top = max(counts.values())
    majority = [k for k, c in counts.items() if c == top]
    first = repr(next(iter(values.values())))
    keep = first if len(majority) > 1 and first in majority else majority[0]
    return [label for label, v in values.items() if repr(v) != keep]


def differences(by_label: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """{key: {label: value}} for every key whose value is not the same for all labels (a key
    missing on one label counts as None there)."""
    keys = sorted({k for values in by_label.values() for k in values})
    out = {}
    for key in keys:
        values = {label: v.get(key) for label, v in by_label.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out[key] = values
    return out


def compare_nodes(nodes: list[tuple[int, str, Mapping[str, Any], Mapping[str, Any]]]) -> list[Problem]:
    """nodes: (node_rank, host, settings, versions), node 0 first. One problem per differing
    setting (config-mismatch) and one for all differing versions (version-mismatch), each naming
    the odd nodes."""
    label_of = {node: f"node {node} ({host})" for node, host, _, _ in nodes}
    host_of = {label_of[node]: host for node, host, _, _ in nodes}
    node_of = {label: node for node, label in label_of.items()}
    problems = []
    for key, values in differences({label_of[n]: s for n, _, s, _ in nodes}).items():
        odd = odd_ones(values)
        shown = ", ".join(f"{label}: {values[label]!r}" for label in values)
        problems.append(Problem(
            id="config-mismatch", severity="critical" if is_critical(key) else "warning",
            message=f"{key} differs between nodes - {shown}; odd one(s) out: {', '.join(odd)}",
            hint=CONFIG_HINT, nodes=[node_of[o] for o in odd], hosts=list(dict.fromkeys(host_of[o] for o in odd))))
    version_diffs = differences({label_of[n]: v for n, _, _, v in nodes})
    if version_diffs:
        odd = sorted({o for values in version_diffs.values() for o in odd_ones(values)}, key=node_of.__getitem__)
        shown = "; ".join(f"{name}: " + ", ".join(f"{label} {v}" for label, v in values.items())
                          for name, values in version_diffs.items())
        problems.append(Problem(
            id="version-mismatch", severity="warning", message=f"versions differ between nodes - {shown}",
            hint=VERSION_HINT, nodes=[node_of[o] for o in odd], hosts=list(dict.fromkeys(host_of[o] for o in odd))))
    return problems
