"""One vocabulary for GRPO step metrics, whichever framework logged them.

TRL, ms-swift, verl and the reference trainer log the same quantities under different names,
and sometimes the same name for different quantities: TRL's `reward_std` is the std over the
whole batch, ms-swift's the mean of the per-group stds (unless `scale_rewards=batch`). The rules
read only the canonical names below, so each is read with one meaning.

Canonical name           read from (first present wins)
  loss                   loss, actor/pg_loss (verl), policy_loss (OpenRLHF)
  grad_norm              grad_norm, actor/grad_norm (verl), actor_grad_norm (OpenRLHF)
  learning_rate          learning_rate, lr, actor/lr (verl), actor_lr (OpenRLHF)
  reward                 reward, critic/score/mean (verl: the reward functions' score, before any KL
                         penalty), rollout/reward_mean (OpenRLHF)
  reward_std_batch       reward_std (TRL, reference trainer; ms-swift with scale_rewards=batch),
                         rollout/reward_std (OpenRLHF: std over every sample of the batch)
  reward_std_group_mean  reward_std (ms-swift, scale_rewards group / none / gdpo, the default)
  reward_func_std_max    the largest of rewards/<func>/std (TRL >= 0.17, ms-swift): batch std per function
  reward_range_batch     critic/score/max - critic/score/min (verl, which logs no reward std): 0 when
                         every sample of the batch scored the same
  advantage_abs_max      the larger of |critic/advantages/max| and |critic/advantages/min| (verl): 0 when
                         every advantage is 0, i.e. every group's rewards were equal (GRPO, RLOO, ...)
  frac_reward_zero_std   frac_reward_zero_std
  kl                     kl (absent when beta = 0 in TRL and ms-swift). verl's actor/kl_loss is not
                         read: it is 0.0 whenever the KL loss is off, so it says nothing about beta;
                         nor is OpenRLHF's kl (0 whenever there is no reference model), which its
                         readers rename to openrlhf/kl.
  entropy                entropy (TRL), entropy/mean (ms-swift --log_entropy), actor/entropy (verl),
                         actor/entropy_loss (verl < 0.4: the mean entropy despite its name),
                         entropy_loss (OpenRLHF with --entropy_coef: likewise the mean entropy)
  completion_length_mean completions/mean_length, completion_length (TRL < 0.17, reference trainer),
                         response_length/mean (verl), response_length, rollout/response_length_mean (OpenRLHF)
  completion_length_min  completions/min_length, response_length/min
  completion_length_max  completions/max_length, response_length/max
  clipped_frac           completions/clipped_ratio, response_length/clip_ratio (verl), rollout/truncated_rate
                         (OpenRLHF): truncated at the max
  rollout_logprob_diff   sampling/sampling_logp_difference/mean (TRL with vLLM), logprob_diff:
                         mean |log p_rollout - log p_trainer| per token, nats
  rollout_kl             rollout_correction/kl (ms-swift): KL(rollout policy || trainer policy)
  rollout_prob_diff      training/rollout_probs_diff_mean (verl): mean |p_rollout - p_trainer|
  frac_identical_groups  frac_identical_groups (reference trainer)
  duplicate_rate         duplicate_rate: mean over groups of completions equal to an earlier one in the
                         group / group size (computed from TRL / ms-swift completion files)
  cross_rank_duplicate_frac  the same (grpo_doctor.rollouts(compare_across_ranks=True)): this rank's
                         completions identical to one of the same prompt on another rank
  epoch                  epoch
Every canonical name is also read as itself, so tables already in this vocabulary pass unchanged.

Whose names a row holds (`framework_of`): verl's are prefixed (actor/, critic/, response_length/),
OpenRLHF's are policy_loss / actor_lr / actor_grad_norm, ms-swift adds global_step/max_steps; the
rest is the Hugging Face Trainer's (TRL). W&B and TensorBoard keep HF's and OpenRLHF's names under
train/ (eval/ for evaluation): `logged_name` takes that off.

The vocabulary is pure Python, with no library: the report's rules (analysis/metric_names.py builds
their pandas columns from it) and watch's live rules (supervisor/sentinels.py, one dict per logged
step) read every metric under the same name with the same meaning.

Typical use:
    canonical_metrics({"loss": 0.0, "reward_std": 0.0}, reward_std_is="batch")  # {"loss": 0.0, "reward_std_batch": 0.0}
    framework_of(["actor/entropy", "critic/score/mean"])                        # "verl"
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

ALIASES: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "actor/pg_loss", "policy_loss"),
    "grad_norm": ("grad_norm", "actor/grad_norm", "actor_grad_norm"),
    "learning_rate": ("learning_rate", "lr", "actor/lr", "actor_lr"),
    "reward": ("reward", "critic/score/mean", "rollout/reward_mean"),
    "reward_std_batch": ("reward_std_batch", "rollout/reward_std"),
    "reward_std_group_mean": ("reward_std_group_mean",),
    "frac_reward_zero_std": ("frac_reward_zero_std",),
    "kl": ("kl",),
    "entropy": ("entropy", "entropy/mean", "actor/entropy", "actor/entropy_loss", "entropy_loss"),
    "completion_length_mean": ("completion_length_mean", "completions/mean_length", "completion_length",
                               "response_length/mean", "response_length", "rollout/response_length_mean"),
    "completion_length_min": ("completion_length_min", "completions/min_length", "response_length/min"),
    "completion_length_max": ("completion_length_max", "completions/max_length", "response_length/max"),
    "clipped_frac": ("clipped_frac", "completions/clipped_ratio", "response_length/clip_ratio",
                     "rollout/truncated_rate"),
    "rollout_logprob_diff": ("rollout_logprob_diff", "sampling/sampling_logp_difference/mean", "logprob_diff"),
    "rollout_kl": ("rollout_kl", "rollout_correction/kl"),
    "rollout_prob_diff": ("rollout_prob_diff", "training/rollout_probs_diff_mean"),
    "frac_identical_groups": ("frac_identical_groups",),
    "duplicate_rate": ("duplicate_rate",),
    "cross_rank_duplicate_frac": ("cross_rank_duplicate_frac",),
    "epoch": ("epoch",),
}
# Read from two logged columns each: (canonical name, first column, second column)
SPANS = (("reward_range_batch", "critic/score/max", "critic/score/min"),
         ("advantage_abs_max", "critic/advantages/max", "critic/advantages/min"))
CANONICAL = (*ALIASES, "reward_func_std_max", *(name for name, _, _ in SPANS))
REWARD_STD_MEANINGS = ("batch", "group_mean")
TRL, SWIFT, VERL, OPENRLHF = "trl", "ms-swift", "verl", "openrlhf"
TEXT = "text"  # rows of the general metric reader (logs/metric_text.py): any logger, names mapped by rules
_VERL_PREFIXES = ("actor/", "critic/", "response_length/")
_OPENRLHF_NAMES = ("policy_loss", "actor_lr", "actor_grad_norm")
_SWIFT_NAMES = ("global_step/max_steps", "train_speed(iter/s)", "train_speed(s/it)")
# The Hugging Face Trainer's end-of-training summary, logged at the last step beside its metrics
SUMMARY_NAMES = frozenset({"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos",
                           "train_loss"})
FUNC_STD = re.compile(r"^rewards?/.+/std$")  # ms-swift's docs say reward/<f>/std, its code writes rewards/


def aliases_for(reward_std_is: str) -> dict[str, tuple[str, ...]]:
    """ALIASES with a plain `reward_std` read as the batch std or as the mean of the group stds."""
    if reward_std_is not in REWARD_STD_MEANINGS:
        raise ValueError(f"reward_std_is {reward_std_is!r} is not one of {', '.join(REWARD_STD_MEANINGS)}")
    aliases = dict(ALIASES)
    plain = "reward_std_batch" if reward_std_is == "batch" else "reward_std_group_mean"
    aliases[plain] = (*aliases[plain], "reward_std")
    return aliases


def canonical_metrics(entry: Mapping[str, Any], reward_std_is: str) -> dict[str, float]:
    """One logged step's metrics in the canonical vocabulary, numbers only (NaN for what is not one): the
    row analysis/metric_names.canonical_frame makes of `entry`, as a dict. A name none of whose columns
    the entry holds is left out."""
    out: dict[str, float] = {}
    for name, keys in aliases_for(reward_std_is).items():
        present = [key for key in keys if key in entry]
        if present:
            out[name] = next((v for v in map(_number, (entry[k] for k in present)) if not math.isnan(v)), math.nan)
    func_stds = [k for k in entry if FUNC_STD.match(str(k))]
    if "reward_func_std_max" in entry:
        func_stds.append("reward_func_std_max")
    if func_stds:
        values = [v for v in (_number(entry[k]) for k in func_stds) if not math.isnan(v)]
        out["reward_func_std_max"] = max(values) if values else math.nan
    for name, high, low in SPANS:
        if name in entry:
            out[name] = _number(entry[name])
        elif high in entry and low in entry:
            hi, lo = _number(entry[high]), _number(entry[low])
            if name == "reward_range_batch":
                out[name] = hi - lo
            else:
                out[name] = math.nan if math.isnan(hi) or math.isnan(lo) else max(abs(hi), abs(lo))
    return out


def _number(value: Any) -> float:
    """A logged value as a float, as pandas.to_numeric(errors="coerce") reads it: NaN for text that is no number."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return math.nan


def nonfinite(value: Any) -> float | None:
    """A logged value that is NaN or infinite, as a float (None otherwise). The HF Trainer of transformers
    5 prints its metrics as text (`'grad_norm': 'nan'`), so a text that reads as such a number counts too."""
    if isinstance(value, str) and value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
        value = float(value.strip())
    return value if isinstance(value, float) and not math.isfinite(value) else None


def framework_of(names) -> str:
    """VERL, OPENRLHF, SWIFT or TRL (the Hugging Face Trainer's names, and anything not told apart)."""
    names = list(names)
    if any(str(n).startswith(_VERL_PREFIXES) for n in names):
        return VERL
    if any(n in _OPENRLHF_NAMES for n in names):
        return OPENRLHF
    return SWIFT if any(n in _SWIFT_NAMES for n in names) else TRL


def logged_name(key: str) -> str | None:
    """A W&B / TensorBoard key as the framework logged it: HF's and OpenRLHF's loggers put train/ in front.
    None for what is no training step's metric: evaluation (eval/, verl's val-*), W&B's own (_runtime),
    the HF Trainer's end-of-training summary."""
    if key.startswith(("eval/", "val/", "val-core/", "val-aux/", "_")):
        return None
    name = key[len("train/"):] if key.startswith("train/") else key
    return None if name in SUMMARY_NAMES else name


def framework_entry(entry: dict, framework: str) -> dict:
    """`entry` with the names that mean something else in `framework` moved aside: OpenRLHF's `kl` is 0
    whenever the run has no reference model (init_kl_coef 0), so zero-kl must not read it as TRL's."""
    if framework == OPENRLHF and "kl" in entry:
        entry = {("openrlhf/kl" if k == "kl" else k): v for k, v in entry.items()}
    return entry


def with_swift_step(entry: dict[str, Any]) -> dict[str, Any]:
    """An ms-swift entry with its step read from `global_step/max_steps` ("5/100": 5; None when unreadable)."""
    done, _, _ = str(entry["global_step/max_steps"]).partition("/")
    return {**entry, "step": int(done) if done.strip().isdigit() else None}


# -- what the ranks' command line says about the metrics (Header.argv) ---------------------------------

def is_swift_command(argv: Sequence[str] | None) -> bool:
    """Whether a rank ran ms-swift's command line: `swift rlhf` (swift/cli/main.py) starts each rank as
    `python <...>/swift/cli/rlhf.py ...`, under torch.distributed.run for several processes, and
    `python -m swift.cli.rlhf` records the same path. So the script is a file of the swift.cli package;
    a script below a folder merely named like it (/home/swiftuser/train.py) is not. A run built in a
    script of one's own around ms-swift's Python API is not recognised: its metrics read as TRL's."""
    parts = PurePath(argv[0]).parts if argv else ()
    return any(parts[i:i + 2] == ("swift", "cli") for i in range(len(parts) - 2))


def launch_arg(argvs: Iterable[Sequence[str] | None], name: str) -> str | None:
    """The value of `name value` or `name=value` on the ranks' command lines; None when not given."""
    for argv in argvs:
        argv = list(argv or [])
        for i, arg in enumerate(argv):
            if arg == name:
                return argv[i + 1] if i + 1 < len(argv) else ""
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


def event_log_reward_std(argvs: Sequence[Sequence[str] | None]) -> str:
    """What a rank's plain `reward_std` means: the mean of the group stds under ms-swift (unless
    `--scale_rewards batch`), the batch std otherwise (TRL, the reference trainer)."""
    swift = any(is_swift_command(argv) for argv in argvs)
    return "group_mean" if swift and launch_arg(argvs, "--scale_rewards") != "batch" else "batch"


def zero_std_is_batch_flag(argvs: Sequence[Sequence[str] | None]) -> bool:
    """TRL computes frac_reward_zero_std from the std it scales by: with scale_rewards="batch" (and
    multi_objective_aggregation="normalize_then_sum") that is the batch's, so the share is 1 when
    every reward of the batch is equal and 0 otherwise. ms-swift always counts groups."""
    if any(is_swift_command(argv) for argv in argvs):
        return False
    return (launch_arg(argvs, "--scale_rewards") == "batch"
            or launch_arg(argvs, "--multi_objective_aggregation") == "normalize_then_sum")
