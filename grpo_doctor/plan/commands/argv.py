"""A launch command taken apart: environment assignments, the launcher, the program and its flags.

Launchers are peeled off in any nesting a shell line shows: `VAR=value` assignments, `env`,
`torchrun` / `python -m torch.distributed.run`, `accelerate launch`, the `deepspeed` launcher,
`ray job submit ... --`, `python [-u] [-m module | script.py]`. What each launcher says about the
job (processes per node, nodes, an accelerate or DeepSpeed config file) is kept; the rest is the
program and its own flags.

Typical use:
    cmd = split_command(["NPROC_PER_NODE=8", "swift", "rlhf", "--rlhf_type", "grpo"], env={})
    cmd.program, cmd.args, cmd.env["NPROC_PER_NODE"], cmd.procs_per_node
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from grpo_doctor.plan.commands.flags import PlanCommandError, parse_flags

ALL_GPUS = -1  # torchrun --nproc-per-node gpu / auto: one process per GPU of the node
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")


@dataclass(frozen=True)
class SplitCommand:
    program: str  # "swift rlhf", a module ("verl.trainer.main_ppo") or a script path
    args: tuple[str, ...]  # the program's own arguments
    env: dict[str, str] = field(default_factory=dict)
    launcher: str | None = None  # "torchrun", "accelerate", "deepspeed", "ray"
    procs_per_node: int | None = None
    nodes: int | None = None
    accelerate_config: str | None = None
    deepspeed_config: str | None = None  # the launcher's --deepspeed_config_file

    @property
    def expandable_segments(self) -> bool:
        """PYTORCH_CUDA_ALLOC_CONF asks the caching allocator for expandable segments (every framework)."""
        return "expandable_segments:true" in self.env.get("PYTORCH_CUDA_ALLOC_CONF", "").lower()


def split_command(argv: str | list[str] | tuple[str, ...], env: dict[str, str] | None = None) -> SplitCommand:
    try:
        words = shlex.split(argv) if isinstance(argv, str) else list(argv)
        if len(words) == 1 and " " in words[0]:  # a whole command line given as one word
            words = shlex.split(words[0])
    except ValueError as exc:  # an unbalanced quote
        raise PlanCommandError(f"cannot read the command as a shell would: {exc}") from None
    words = _first_command(words)
    merged = dict(env if env is not None else os.environ)
    launcher, procs, nodes, accel_cfg, ds_cfg = None, None, None, None, None
    while words:
        word = words[0]
        if _ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            merged[name] = value
            words.pop(0)
        elif word == "env" or word.endswith("/env"):
            words.pop(0)
        elif word in ("torchrun",) or word.endswith("/torchrun"):
            flags, words = _launcher_flags(words[1:], "torchrun")
            launcher = "torchrun"
            nproc = flags.get("nproc_per_node") or flags.get("nproc-per-node")
            procs = ALL_GPUS if nproc in ("gpu", "auto") else _int(nproc, procs)
            nodes = _nodes(flags.get("nnodes"), nodes)
        elif word == "accelerate" and len(words) > 1 and words[1] == "launch":
            flags, words = _launcher_flags(words[2:], "accelerate_launch")
            launcher = "accelerate"
            procs_total = _int(flags.get("num_processes") or flags.get("num-processes"), None)
            nodes = _int(flags.get("num_machines") or flags.get("num-machines"), nodes)
            procs = procs_total // (nodes or 1) if procs_total else procs
            accel_cfg = flags.get("config_file") or flags.get("config-file") or accel_cfg
            ds_cfg = flags.get("deepspeed_config_file") or ds_cfg
        elif word == "deepspeed" or word.endswith("/deepspeed"):
            flags, words = _launcher_flags(words[1:], "deepspeed_launcher")
            launcher = "deepspeed"
            procs = _int(flags.get("num_gpus") or flags.get("num-gpus"), procs)
            nodes = _int(flags.get("num_nodes") or flags.get("num-nodes"), nodes)
            if flags.get("module") is not None and words:
                return _finish(words[0], words[1:], merged, launcher, procs, nodes, accel_cfg, ds_cfg)
        elif word == "ray" and "--" in words:  # ray job submit [options] -- the real command
            launcher = "ray"
            words = words[words.index("--") + 1:]
        elif _PYTHON.match(word):
            rest = words[1:]
            while rest and rest[0].startswith("-") and rest[0] != "-m":
                rest.pop(0)  # -u, -O, -X ...
            if rest[:1] == ["-m"] and len(rest) > 1:
                module = rest[1]
                if module in ("torch.distributed.run", "torch.distributed.launch"):
                    words = ["torchrun", *rest[2:]]
                    continue
                if module == "accelerate.commands.launch":
                    words = ["accelerate", "launch", *rest[2:]]
                    continue
                return _finish(module, rest[2:], merged, launcher, procs, nodes, accel_cfg, ds_cfg)
            if rest:
                return _finish(rest[0], rest[1:], merged, launcher, procs, nodes, accel_cfg, ds_cfg)
            words = []
        elif word == "swift" and len(words) > 1:
            return _finish(f"swift {words[1]}", words[2:], merged, launcher, procs, nodes, accel_cfg, ds_cfg)
        else:
            return _finish(word, words[1:], merged, launcher, procs, nodes, accel_cfg, ds_cfg)
    return _finish("", [], merged, launcher, procs, nodes, accel_cfg, ds_cfg)


_SEPARATORS = {"|", "||", "&&", ";", "&", "|&"}
_REDIRECT = re.compile(r"^(\d*|&)(>>?|<)(&\d+)?$|^(\d*|&)(>>?|<)\S+$")


def _first_command(words: list[str]) -> list[str]:
    """A shell line's first command, without its redirections: `cmd args 2>&1 | tee log &` is `cmd args`."""
    kept: list[str] = []
    skip_target = False
    for word in words:
        if skip_target:
            skip_target = False
            continue
        if word in _SEPARATORS:
            break
        if _REDIRECT.match(word):
            skip_target = word.endswith((">", "<"))  # `> file`: the next word is the file
            continue
        kept.append(word)
    return kept


def _finish(program, args, env, launcher, procs, nodes, accel_cfg, ds_cfg) -> SplitCommand:
    # `python swift/cli/rlhf.py` is `swift rlhf`; a module path keeps its dots.
    if program.endswith(".py") and "/" in program:
        parts = program[:-3].split("/")
        if len(parts) >= 3 and parts[-3] == "swift" and parts[-2] == "cli":
            program = f"swift {parts[-1]}"
    return SplitCommand(program, tuple(args), env, launcher, procs, nodes, accel_cfg, ds_cfg)


def _launcher_flags(words: list[str], launcher: str) -> tuple[dict[str, str | None], list[str]]:
    """A launcher's own flags, up to the first word that is not one (the program)."""
    flags, used = parse_flags(words, launcher, stop_at_positional=True)
    return flags, words[used:]


def _int(value: str | None, default: int | None) -> int | None:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def _nodes(value: str | None, default: int | None) -> int | None:
    """torchrun --nnodes 2 or an elastic range 1:4 (the upper bound is what memory must hold)."""
    if value and ":" in value:
        value = value.split(":")[-1]
    return _int(value, default)
