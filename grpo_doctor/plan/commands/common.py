"""What every command reader starts from: the GPUs, and the model when given apart from the command.

Typical use:
    hw = Hardware(gpus_per_node=8, nodes=1, gpu_memory_bytes=80 * GIB)
    s = Settings(flags, "ms-swift")               # typed reads that remember what was assumed
    s.number("per_device_train_batch_size", 1), s.switch("use_vllm", False), s.assumed
"""
from __future__ import annotations

from dataclasses import dataclass

from grpo_doctor.plan.commands.flags import PlanCommandError, as_bool, as_number, check_counts


@dataclass(frozen=True)
class Hardware:
    gpus_per_node: int | None  # None: the command or the environment says, else 8
    nodes: int | None
    gpu_memory_bytes: int
    model: str | None = None  # --model of `grpo-doctor plan` wins over the command's
    strict_flags: bool = True  # an unknown flag is an error (--ignore-unknown-flags: skipped)


class Settings:
    """The flags of one command, read with defaults; each default used becomes a stated assumption."""

    def __init__(self, flags: dict[str, str | None], framework: str) -> None:
        check_counts(flags)  # --num_generations -5: refused even where the plan does not read it
        self.flags = flags
        self.framework = framework
        self.assumed: list[str] = []

    def has(self, *names: str) -> bool:
        return any(n in self.flags for n in names)

    def text(self, name: str, default: str | None = None, say: str | None = None) -> str | None:
        if name in self.flags and self.flags[name] is not None:
            return self.flags[name]
        if say:
            self.assumed.append(say)
        return default

    def number(self, name: str, default, kind: type = int, say: str | None = None):
        if name in self.flags and self.flags[name] not in (None, "null", "None"):
            return as_number(self.flags[name], name, kind)
        if say:
            self.assumed.append(say)
        return default

    def switch(self, name: str, default: bool, say: str | None = None) -> bool:
        if name in self.flags:
            try:
                return as_bool(self.flags[name])
            except PlanCommandError:
                raise PlanCommandError(f"--{name} {self.flags[name]!r} is not true or false") from None
        if say:
            self.assumed.append(say)
        return default
