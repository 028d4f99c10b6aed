"""`vllm-memory`: a vLLM engine started with no room for its KV cache (critical), or with room for so
few max-length requests that rollouts crawl (warning, CASES.md case 3).

From vllm-memory signatures. One engine start prints several lines (weights loaded, memory
profile, KV cache size, GPU blocks, maximum concurrency, the failure); they are combined into one
engine per log and rank: a model-loading line begins a new engine, a figure that contradicts the
engine's (beyond `Config.same_figure_ratio`) begins another, a failure ("Try increasing
`gpu_memory_utilization` ...") ends it, and lines more than `Config.max_gap_lines` apart are not
combined. Identical engines printing in turn (colocated ranks) combine into one.

Evidence keys: `kv_cache_bytes` (negative: the profile left nothing), `weights_bytes`,
`activation_peak_bytes`, `non_torch_bytes`, `peak_torch_bytes`, `total_gpu_bytes`,
`gpu_memory_utilization`, `budget_bytes` (total x utilization: what vLLM may use), `num_gpu_blocks`,
`kv_cache_tokens`, `max_model_len`, `max_concurrency` (max-length requests the KV cache holds at
once; from vLLM's line, else kv_cache_tokens / max_model_len), `no_cache_memory`, `source`,
`line_numbers` (the lines combined).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.remedies import SWIFT, SWIFT_ROLLOUT, TRL, TRL_SERVE, VERL
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.logs.kinds import VLLM_MEMORY
from grpo_doctor.schema.human_text import format_bytes

ID = "vllm-memory"
READS = {View.LOG_SIGNATURES, View.RANKS}

# Flags per framework (and their defaults) come from remedies.py: the same setting is spelled three ways.
HINT_RAISE = ("Raise vLLM's memory share where it has the GPU to itself (server mode: "
              + TRL_SERVE + " " + remedies.flag_set(TRL_SERVE, "gpu_memory_utilization", 0.9) + ", "
              + SWIFT_ROLLOUT + " " + remedies.flag_set(SWIFT_ROLLOUT, "vllm_gpu_memory_utilization", 0.9)
              + "). Colocated with training (defaults: " + remedies.vllm_shares() + "), raise "
              + remedies.flags(TRL, "vllm_gpu_memory_utilization") + ", "
              + remedies.flags(SWIFT, "vllm_gpu_memory_utilization") + " or "
              + remedies.flags(VERL, "actor_rollout_ref.rollout.gpu_memory_utilization")
              + " only as far as training leaves room, with vLLM asleep during training steps ("
              + remedies.flags(TRL, "vllm_enable_sleep_mode") + ", " + remedies.flags(SWIFT, "sleep_level") + ").")
HINT_MAX_LEN = ("Lower vLLM's context to what a rollout needs (longest prompt + max_completion_length): the KV cache "
                "must hold at least one request of that length. "
                + remedies.flags(TRL, "vllm_max_model_length") + " (server mode: "
                + remedies.flags(TRL_SERVE, "max_model_len") + "), "
                + remedies.flags(SWIFT, "vllm_max_model_len") + " (server mode: "
                + remedies.flags(SWIFT_ROLLOUT, "vllm_max_model_len") + "), "
                + remedies.flags(VERL, "actor_rollout_ref.rollout.max_model_len") + ".")
HINT_TP = ("Split the model over GPUs with tensor parallelism 2 or more, so the weights leave room for the KV cache "
           "on each GPU: " + remedies.flags(TRL, "vllm_tensor_parallel_size") + " (server mode: "
           + TRL_SERVE + " " + remedies.flag_set(TRL_SERVE, "tensor_parallel_size", 2) + "), "
           + remedies.flags(SWIFT, "vllm_tensor_parallel_size") + ", "
           + remedies.flags(VERL, "actor_rollout_ref.rollout.tensor_model_parallel_size") + ".")
HINT_RESERVE = remedies.VLLM_OWN_GPUS
HINT_THROUGHPUT = ("Rollouts are limited by the KV cache (case 3): raise vLLM's memory share to 0.85-0.9 where memory "
                   "allows (in server mode; colocated, see the framework's default: " + remedies.vllm_shares()
                   + "), lower its context to the real prompt + completion length, or add engines in server mode: "
                   + remedies.flags(TRL_SERVE, "data_parallel_size") + ", "
                   + remedies.flags(SWIFT_ROLLOUT, "vllm_data_parallel_size") + ".")
HINTS = (HINT_RAISE, HINT_MAX_LEN, HINT_TP, HINT_RESERVE, HINT_THROUGHPUT)

FIGURES = ("kv_cache_bytes", "weights_bytes", "activation_peak_bytes", "non_torch_bytes", "peak_torch_bytes",
           "total_gpu_bytes", "gpu_memory_utilization", "num_gpu_blocks", "kv_cache_tokens", "max_model_len",
           "max_concurrency")
FAILURE_ADVICE = "Try increasing"  # in every vLLM KV-cache start-up error: the engine start ends there


@dataclass(frozen=True)
class Config:
    min_concurrency: float = 4.0  # fewer max-length requests in the KV cache than this -> warning
    raise_below: float = 0.85  # suggest raising gpu_memory_utilization only when it is below this
    same_figure_ratio: float = 0.02  # figures within 2% are the same (vLLM rounds GiB differently per line)
    max_gap_lines: int = 2000  # lines of one engine start further apart than this are not combined


@dataclass
class _Engine:
    source: str
    rank: int | None
    host: str | None
    figures: dict[str, Any] = field(default_factory=dict)
    no_cache_memory: bool = False
    line_numbers: list[int] = field(default_factory=list)
    failed: bool = False


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    for engine in _engines(run, cfg):
        ev = _evidence(engine)
        if engine.no_cache_memory:
            yield _finding(run, engine, "critical", _no_cache_title(ev), _no_cache_hints(ev, cfg), ev)
        elif ev["max_concurrency"] is not None and ev["max_concurrency"] < cfg.min_concurrency:
            util = ev["gpu_memory_utilization"]
            title = (f"vLLM's KV cache holds only {ev['max_concurrency']:.2f} requests of max_model_len "
                     f"{ev['max_model_len']} tokens at once" + (f" (gpu_memory_utilization {util:g})" if util else ""))
            hints = (HINT_THROUGHPUT,) if util is None or util < cfg.raise_below else (HINT_MAX_LEN, HINT_TP)
            yield _finding(run, engine, "warning", title, hints, ev)


def _engines(run: RunView, cfg: Config) -> list[_Engine]:
    engines: list[_Engine] = []
    current: dict[tuple, _Engine] = {}  # (source, rank) -> the engine start its lines are adding to
    for row in sorted((r for r in run.signature_rows if r["kind"] == VLLM_MEMORY),
                      key=lambda r: (r["source"], r["line_number"])):
        f = row["fields"]
        figures = {k: f[k] for k in FIGURES if f.get(k) is not None}
        key = (row["source"], row["rank"])
        engine = current.get(key)
        loads_model = set(figures) == {"weights_bytes"}
        if (engine is None or engine.failed or row["line_number"] - engine.line_numbers[-1] > cfg.max_gap_lines
                or (loads_model and set(engine.figures) - {"weights_bytes"}) or _contradicts(engine, figures, cfg)):
            engine = current[key] = _Engine(row["source"], row["rank"], row["host"])
            engines.append(engine)
        engine.figures.update(figures)
        engine.no_cache_memory |= bool(f.get("no_cache_memory"))
        engine.line_numbers.append(row["line_number"])
        engine.failed = FAILURE_ADVICE in row["text"]
    return engines


def _contradicts(engine: _Engine, figures: dict[str, Any], cfg: Config) -> bool:
    for name, value in figures.items():
        old = engine.figures.get(name)
        if old is not None and abs(value - old) > cfg.same_figure_ratio * max(abs(value), abs(old)):
            return True
    return False


def _evidence(engine: _Engine) -> dict[str, Any]:
    ev: dict[str, Any] = {name: engine.figures.get(name) for name in FIGURES}
    total, util = ev["total_gpu_bytes"], ev["gpu_memory_utilization"]
    ev["budget_bytes"] = int(total * util) if total and util else None
    if ev["max_concurrency"] is None and ev["kv_cache_tokens"] and ev["max_model_len"] and not engine.no_cache_memory:
        ev["max_concurrency"] = round(ev["kv_cache_tokens"] / ev["max_model_len"], 2)
    ev.update(no_cache_memory=engine.no_cache_memory, source=engine.source, line_numbers=engine.line_numbers)
    return ev


def _no_cache_title(ev: dict[str, Any]) -> str:
    if ev["kv_cache_tokens"] is not None and ev["max_model_len"] is not None:
        why = (f"max_model_len {ev['max_model_len']} is more than the {ev['kv_cache_tokens']} tokens "
               "its KV cache can hold")
    elif ev["kv_cache_bytes"] is not None and ev["kv_cache_bytes"] <= 0:
        why = f"{format_bytes(ev['kv_cache_bytes'])} left for it"
    elif ev["num_gpu_blocks"] == 0:
        why = "0 GPU blocks"
    else:
        why = "no available memory for the cache blocks"
    return f"vLLM has no memory for the KV cache: {why}"


def _no_cache_hints(ev: dict[str, Any], cfg: Config) -> tuple[str, ...]:
    util, weights, budget = ev["gpu_memory_utilization"], ev["weights_bytes"], ev["budget_bytes"]
    raise_util = (HINT_RAISE,) if util is None or util < cfg.raise_below else ()
    if weights and budget and weights >= budget:  # the weights alone fill vLLM's share: only more GPU helps
        return (HINT_TP, *raise_util, HINT_RESERVE)
    if ev["kv_cache_tokens"] is not None and ev["max_model_len"] is not None:
        return (HINT_MAX_LEN, *raise_util, HINT_TP, HINT_RESERVE)
    return (*raise_util, HINT_MAX_LEN, HINT_TP, HINT_RESERVE)


def _finding(run: RunView, engine: _Engine, severity: str, title: str, hints: tuple[str, ...],
             ev: dict[str, Any]) -> Finding:
    host = engine.host or run.host_of(engine.rank)
    if engine.rank is not None:
        title = f"rank {engine.rank}: {title}"
    return Finding(id=ID, severity=severity, title=title, ranks=(engine.rank,) if engine.rank is not None else (),
                   hosts=(host,) if host else (), step=None, phase=None, evidence=ev, hints=hints)
