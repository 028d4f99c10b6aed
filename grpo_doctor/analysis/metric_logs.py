"""Step metrics and completions from the files TRL and ms-swift write, for runs grpo-doctor never saw.

Read, by file name:
  trainer_state.json         Hugging Face Trainer state (TRL; ms-swift checkpoints too): `log_history`,
                             one dict per logging step with `step`; eval and end-of-training entries skipped.
  logging.jsonl              ms-swift: one JSON object per logging step, the step in `global_step/max_steps`
                             ("5/100"); its run's args.json (same or parent directory) gives beta and scale_rewards.
  completions_*.parquet      TRL `log_completions=True` (output_dir/completions/): step, prompt, completion, one
                             column per reward function, log_extra columns, advantage. Needs pyarrow; without it
                             a warning says so.
  completions.jsonl          ms-swift `log_completions true`: each line one logging step as columns
                             ({"step": [...], "prompt": [...], "completion": [...], <reward func>: [...],
                             "advantages": [...], other logged columns}), or one completion per line.
A completion's reward: a `reward` column holding the total (ms-swift < 3.4), else the trainers' weighted
nansum of the reward functions' columns (completion_rewards.py: which columns, which weights).
A directory is searched for these too: the latest checkpoint-N/trainer_state.json (when there is no
top-level one), completions/*.parquet, and TensorBoard event files up to three levels down (read by
metric_files.py, which also tells W&B exports and verl's file logger by their content; console_metrics.py
reads the metric lines printed in a raw log). Metric names are renamed to the vocabulary of
metric_names.py; a trainer_state.json beside an ms-swift args.json is read as ms-swift's.

Typical use:
    log = read_metric_log(Path("outputs/grpo/checkpoint-500/trainer_state.json"))
    log.source, log.steps[0]["reward_std_batch"]
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_doctor.analysis.completion_rewards import number, reward_functions, weighted_sum
from grpo_doctor.analysis.metric_names import ALIASES, SWIFT, TRL, canonical_frame
from grpo_doctor.checks.groups import duplicate_rate, group_members
from grpo_doctor.checks.rollout_rules import NONFINITE_CHECKED
from grpo_doctor.schema.metric_vocab import nonfinite, with_swift_step
from grpo_doctor.schema.safe_read import loads_bounded, open_text, read_json

METRIC_LOG_NAMES = ("trainer_state.json", "logging.jsonl", "completions.jsonl")
SAMPLES_PER_STEP = 8  # completions kept per step for the report; the diversity figures use all of them
SWIFT_ARGS = ("beta", "scale_rewards", "temperature", "num_generations", "max_completion_length", "seed",
              "dynamic_sample", "use_vllm", "vllm_mode", "reward_funcs", "reward_weights")
TENSORBOARD_GLOBS = ("events.out.tfevents.*", "*/events.out.tfevents.*", "*/*/events.out.tfevents.*")
_SKIP_ENTRY_KEYS = ("train_runtime", "train_loss", "last_model_checkpoint")  # end-of-training summaries
MAX_METRIC_FILE_BYTES = 512 * 2**20  # trainer_state.json of a long run: tens of MB; read whole, so capped
MAX_ARGS_BYTES = 2**20  # ms-swift's args.json: a few KB



@dataclass
class MetricLog:
    """One framework file, read: step rows in the canonical vocabulary, completions, run arguments."""

    path: Path
    source: str  # the framework: metric_names.TRL, SWIFT, VERL or OPENRLHF (rules judge each source apart)
    # what the file was recognised as: trainer-state, ms-swift-jsonl, trl-completions, ms-swift-completions
    # (this module), trl-console, ms-swift-console, verl-console, openrlhf-console (console_metrics.py),
    # verl-jsonl, wandb-csv, wandb-json, tensorboard (metric_files.py)
    format: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)  # step, source and canonical metrics
    completions: list[dict[str, Any]] = field(default_factory=list)  # COMPLETION_COLUMNS of load.py
    diversity: list[dict[str, Any]] = field(default_factory=list)  # step, duplicate_rate (from completion texts)
    args: dict[str, Any] = field(default_factory=dict)  # ms-swift args.json: SWIFT_ARGS where present
    # {"step", "metric", "value"} for each NaN / inf loss or grad_norm: in the table NaN also means "not logged"
    nonfinite: list[dict[str, Any]] = field(default_factory=list)
    # Step records of another kind of training (classic RL's episodes, no LLM rollout) the general reader read
    # and left unjudged: the log was read, and nothing in it is GRPO's (logs/metric_text.py)
    unjudged_rows: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        """Metric rows read: logged steps plus completions."""
        return len(self.steps) + len(self.completions)


def is_metric_log(path: Path) -> bool:
    return path.name in METRIC_LOG_NAMES or (path.suffix == ".parquet" and path.name.startswith("completions_"))


def find_metric_logs(directory: Path) -> list[Path]:
    """Metric logs below `directory` that a scan of its top-level files misses (TRL keeps them in sub-directories;
    the HF Trainer's and verl's TensorBoard event files sit one to three levels down: runs/<date>/, ...)."""
    found = sorted((directory / "completions").glob("completions_*.parquet"))
    found += sorted(p for pattern in TENSORBOARD_GLOBS[1:] for p in directory.glob(pattern) if p.is_file())
    if not (directory / "trainer_state.json").is_file() and not (directory / "logging.jsonl").is_file():
        state = _latest_checkpoint_state(directory)
        if state is not None:
            found.append(state)
    return found


def _latest_checkpoint_state(directory: Path) -> Path | None:
    """Each checkpoint holds the whole history so far: the latest is enough."""
    states = [p for p in directory.glob("checkpoint-*/trainer_state.json") if p.parent.name[11:].isdigit()]
    return max(states, key=lambda p: int(p.parent.name[11:])) if states else None


def read_metric_log(path: Path) -> MetricLog:
    args = _swift_args(path.parent)
    source = SWIFT if args is not None or path.name.endswith(".jsonl") else TRL
    kind = {"trainer_state.json": "trainer-state", "logging.jsonl": "ms-swift-jsonl"}.get(path.name, "completions")
    log = MetricLog(path=path, source=source, args=args or {},
                    format=f"{source}-completions" if kind == "completions" else kind)
    try:
        if path.name == "trainer_state.json":
            state = read_json(path, cap=MAX_METRIC_FILE_BYTES, errors="replace", what="a trainer_state.json")
            entries = state.get("log_history") if isinstance(state, dict) else None
            if not isinstance(entries, list):
                log.warnings.append(f"{path}: no log_history list; not a Trainer state file, left out")
                return log
            add_steps(log, [e for e in entries if isinstance(e, dict) and isinstance(e.get("step"), int)])
        elif path.name == "logging.jsonl":
            add_steps(log, [with_swift_step(e) for e in _json_lines(log) if "global_step/max_steps" in e])
        elif path.name == "completions.jsonl":
            _add_completions(log, _swift_completion_rows(_json_lines(log)))
        else:
            _read_parquet(log)
    except (OSError, ValueError) as exc:  # UnreadableFile (a FIFO, past the cap) is both
        log.warnings.append(f"{path}: cannot be read ({getattr(exc, 'why', exc)}); left out")
    return log


def metric_log_frames(logs: list[MetricLog]) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """All logs' step rows as one table (one row per source and step; the diversity of its
    completions joined in) and their completions."""
    steps = pd.DataFrame([row for log in logs for row in log.steps])
    diversity = pd.DataFrame([{"source": log.source, **row} for log in logs for row in log.diversity])
    if not steps.empty:
        # Checkpoints repeat earlier steps; W&B chart exports give one metric of a step each: the last value
        # logged of each metric wins
        steps = steps.groupby(["source", "step"], as_index=False, sort=False).last()
    if not diversity.empty:
        diversity = diversity.drop_duplicates(["source", "step"], keep="last")[["source", "step", "duplicate_rate"]]
        steps = diversity if steps.empty else steps.merge(diversity, on=["source", "step"], how="outer")
    if not steps.empty:
        steps = steps.sort_values(["source", "step"]).assign(rank=0, host=None, t=float("nan"))
    return steps, [row for log in logs for row in log.completions]


def _swift_args(directory: Path) -> dict[str, Any] | None:
    """ms-swift writes args.json into its output directory and every checkpoint; TRL writes none."""
    for candidate in (directory / "args.json", directory.parent / "args.json"):
        try:
            data = read_json(candidate, cap=MAX_ARGS_BYTES, errors="replace", what="an args.json")
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and ("rlhf_type" in data or "train_type" in data):
            return {k: data[k] for k in SWIFT_ARGS if k in data}
    return None


def _json_lines(log: MetricLog) -> list[dict[str, Any]]:
    out, bad = [], 0
    with open_text(log.path) as f:  # never a FIFO or a device (schema/safe_read.py)
        for line in f:
            if not line.strip():
                continue
            try:
                value = loads_bounded(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(value, dict):
                out.append(value)
    if bad:
        log.warnings.append(f"{log.path}: skipped {bad} unreadable line(s)")
    return out


def add_steps(log: MetricLog, entries: list[dict[str, Any]]) -> None:
    """Logged entries (a dict each: "step" and the framework's own metric names) become `log.steps` in the
    canonical vocabulary; evaluation entries and end-of-training summaries are left out."""
    entries = [e for e in entries if e.get("step") is not None and not any(k in e for k in _SKIP_ENTRY_KEYS)
               and not any(str(k).startswith("eval_") for k in e)]
    if not entries:
        log.warnings.append(f"{log.path}: no training steps logged")
        return
    for entry in entries:
        for name in NONFINITE_CHECKED:
            value = next((entry[key] for key in ALIASES[name] if key in entry), None)
            if (bad := nonfinite(value)) is not None:  # a float, or the text transformers 5 prints
                log.nonfinite.append({"step": entry["step"], "metric": name, "value": bad})
    # ms-swift's plain reward_std is the mean of group stds; TRL's (and any other's) the batch std
    reward_std_is = "group_mean" if log.source == SWIFT and log.args.get("scale_rewards") != "batch" else "batch"
    frame = canonical_frame(pd.DataFrame(entries), reward_std_is=reward_std_is)
    frame["source"] = log.source
    log.steps = frame.to_dict("records")


def _read_parquet(log: MetricLog) -> None:
    try:
        frame = pd.read_parquet(log.path)
    except ImportError:
        log.warnings.append(f"{log.path}: reading parquet needs pyarrow (pip install pyarrow); completions left out")
        return
    _add_completions(log, frame.to_dict("records"))


def _swift_completion_rows(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Columnar lines (one per logging step) become one row per completion; row lines pass unchanged."""
    rows: list[dict[str, Any]] = []
    for line in lines:
        if isinstance(line.get("completion"), list) and isinstance(line.get("step"), list):
            columns = {k: v for k, v in line.items() if isinstance(v, list)}
            rows += [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=False)]
        else:
            rows.append(line)
    return rows


def _add_completions(log: MetricLog, rows: list[dict[str, Any]]) -> None:
    """Rows of step, prompt, completion and the reward columns (module docstring) become completions
    (SAMPLES_PER_STEP a step) and each step's duplicate rate (over all its rows)."""
    rows = [row for row in rows if "completion" in row]
    if not rows:
        return
    total = "reward" if "reward" in rows[0] else None
    functions = reward_functions(log.args, list(rows[0]), _step_log_beside(log.path), log.warnings, str(log.path))
    if total in functions:  # a function named `reward` (TRL names functions by __name__), not the total
        total = None
    by_step: dict[int, tuple[list[str], dict[str, int], list[int]]] = {}  # completions, group of prompt, group ids
    for row in rows:
        step = _as_int(row.get("step"))
        if step is None:
            continue
        prompt, completion = _text(row.get("prompt")), _text(row.get("completion"))
        completions, groups, group_ids = by_step.setdefault(step, ([], {}, []))
        group = groups.setdefault(prompt, len(groups))
        completions.append(completion)
        group_ids.append(group)
        if len(completions) <= SAMPLES_PER_STEP:
            reward = number(row.get(total)) if total else weighted_sum(row, functions)
            log.completions.append({"source": log.source, "rank": None, "step": step, "group": group,
                                    "prompt": prompt, "completion": completion, "reward": reward})
    for step, (completions, groups, group_ids) in sorted(by_step.items()):
        # as checks.groups: a single completion of a prompt says nothing about duplicates
        log.diversity.append({"step": step, "duplicate_rate": duplicate_rate(completions, group_members(group_ids)),
                              "num_completions": len(completions), "num_groups": len(groups)})


def _step_log_beside(path: Path) -> Path | None:
    """The step log (logging.jsonl, trainer_state.json) written with a completions file, None without one."""
    if path.name == "completions.jsonl":
        return path.parent / "logging.jsonl"
    out = path.parent.parent if path.parent.name == "completions" else path.parent
    return out / "trainer_state.json" if (out / "trainer_state.json").is_file() else _latest_checkpoint_state(out)


def _as_int(value: Any) -> int | None:
    if hasattr(value, "item"):  # a numpy scalar from parquet
        value = value.item()
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():  # ms-swift writes the step as a string
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _text(value: Any) -> str:
    """Prompts and completions are strings, or chat messages ([{"role", "content"}]) in conversational datasets."""
    if isinstance(value, str):
        return value
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in value)
    return json.dumps(value, default=str)
