"""The report's memory-plan section: a stacked bar per GPU row at its peak phase, the verdict, the fixes.

From watch's plan.json (made at start, when it recognised the command). Bars are plain HTML (a
flex row of widths), so the page stays one file without script; every name reaches the page
through the template, escaped.

Typical use:
    section = plan_section(evidence)      # None without a plan
"""
from __future__ import annotations

from typing import Any

from grpo_doctor.analysis.load import Evidence
from grpo_doctor.plan.render import gpu_label

# One colour per kind of part, so the same part has the same colour on every bar; the first key a
# part's name contains decides (the engine's parts before the trainer's of the same word).
COLOURS = (("KV cache", "#499894"), ("vLLM weights", "#86bcb6"), ("vLLM", "#b07aa1"), ("reference", "#a0cbe8"),
           ("weights", "#4e79a7"), ("optimizer", "#f28e2b"), ("gradients", "#ffbe7d"), ("activations", "#59a14f"),
           ("logits", "#8cd17d"), ("ZeRO-3", "#b6992d"), ("fragmentation", "#bab0ac"), ("CUDA", "#9d7660"),
           ("NCCL", "#d7b5a6"))
OTHER = "#cccccc"
MAX_FIXES = 6


def plan_section(run: Evidence) -> list[dict[str, Any]]:
    return [_host_section(host, data) for host, data in sorted(run.memory_plans.items())]


def _host_section(host: str, data: dict) -> dict[str, Any]:
    rows = []
    for gpu in data["gpus"]:
        phase = gpu.get("peak_phase") or max(gpu["phases"], key=lambda p: sum(gpu["phases"][p]["parts"].values()))
        parts = gpu["phases"][phase]["parts"]
        capacity = gpu["capacity_bytes"]
        scale = max(capacity, sum(parts.values())) or 1
        rows.append({
            "label": _label(gpu["gpus"]), "role": str(gpu.get("role", "")), "phase": str(phase),
            "peak_gib": sum(parts.values()) / 2**30, "capacity_gib": capacity / 2**30,
            "over": sum(parts.values()) > capacity, "capacity_pct": 100 * capacity / scale,
            "segments": [{"name": str(name), "gib": value / 2**30, "pct": 100 * value / scale, "colour": _colour(name)}
                         for name, value in parts.items() if value > 0],
        })
    fixes = [{"flag": str(f["flag"]), "frees_gib": (f.get("frees_bytes") or 0) / 2**30, "fits": bool(f.get("fits")),
              "cost": str(f.get("speed_cost", "")), "why": str(f.get("why", ""))} for f in data["fixes"][:MAX_FIXES]]
    return {"host": host, "fits": data["fits"], "verdict": data["verdict"], "rows": rows, "fixes": fixes,
            "assumptions": [str(a) for a in data.get("assumptions") or []]}


def _label(gpus: list) -> str:
    return gpu_label(tuple(int(g) for g in gpus if isinstance(g, int)))


def _colour(name: str) -> str:
    for key, colour in COLOURS:
        if key in name:
            return colour
    return OTHER
