"""The config files a launch command names: DeepSpeed JSON, accelerate YAML, a TRL GRPOConfig YAML.

ms-swift's `--deepspeed zero2 | zero3 | zero2_offload | zero3_offload` are its bundled configs;
anything else is a path. A file the plan cannot read is an error naming it (the plan would
otherwise be for a different job); DeepSpeed's "auto" values are left to the flags.

Typical use:
    zero = deepspeed_settings("zero3_offload")        # ZeroSettings(stage=3, offload_optimizer=True, ...)
    zero = accelerate_settings("configs/deepspeed_zero3.yaml")
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.plan.commands.flags import PlanCommandError
from grpo_doctor.schema.safe_read import UnreadableFile, loads_bounded, read_text

# ms-swift's bundled DeepSpeed configs (swift/llm/ds_config/*.json), by the name --deepspeed takes.
SWIFT_SHORTHANDS = {
    "zero0": (0, False, False), "zero1": (1, False, False), "zero2": (2, False, False),
    "zero3": (3, False, False), "zero2_offload": (2, True, False), "zero3_offload": (3, True, True),
}


@dataclass(frozen=True)
class ZeroSettings:
    stage: int
    offload_optimizer: bool = False
    offload_params: bool = False
    fsdp: bool = False
    sub_group_size: int = 1_000_000_000  # ZeRO-3's zero_optimization.sub_group_size
    procs: int | None = None  # accelerate's num_processes
    nodes: int | None = None
    source: str = ""


def deepspeed_settings(value: str, base_dir: Path | None = None) -> ZeroSettings:
    if value.lower() in SWIFT_SHORTHANDS:
        stage, opt, params = SWIFT_SHORTHANDS[value.lower()]
        return ZeroSettings(stage, opt, params, source=f"ms-swift's {value}")
    data = _read_mapping(_resolve(value, base_dir))
    zero = data.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        zero = {}
    return ZeroSettings(
        stage=_stage(zero.get("stage", 0), value),
        offload_optimizer=_offloaded(zero.get("offload_optimizer")),
        offload_params=_offloaded(zero.get("offload_param")),
        sub_group_size=_count(zero.get("sub_group_size"), 1_000_000_000),
        source=value,
    )


def accelerate_settings(path: str, base_dir: Path | None = None) -> ZeroSettings:
    """accelerate's config YAML: DeepSpeed or FSDP, and how many processes on how many machines."""
    data = _read_mapping(_resolve(path, base_dir))
    procs, nodes = data.get("num_processes"), data.get("num_machines")
    ds = data.get("deepspeed_config") or {}
    fsdp = data.get("fsdp_config") or {}
    if isinstance(ds, dict) and ds.get("deepspeed_config_file"):
        inner = deepspeed_settings(str(ds["deepspeed_config_file"]), _resolve(path, base_dir).parent)
        return ZeroSettings(inner.stage, inner.offload_optimizer, inner.offload_params, False, inner.sub_group_size,
                            procs, nodes, path)
    if isinstance(ds, dict) and ds:
        return ZeroSettings(_stage(ds.get("zero_stage", 0), path),
                            str(ds.get("offload_optimizer_device", "none")).lower() in ("cpu", "nvme"),
                            str(ds.get("offload_param_device", "none")).lower() in ("cpu", "nvme"),
                            False, procs=procs, nodes=nodes, source=path)
    if isinstance(fsdp, dict) and (fsdp or data.get("distributed_type") == "FSDP"):
        offload = bool(fsdp.get("fsdp_offload_params"))
        return ZeroSettings(3, offload, offload, True, procs=procs, nodes=nodes, source=path)
    return ZeroSettings(0, procs=procs, nodes=nodes, source=path)


def read_yaml(path: str, base_dir: Path | None = None) -> dict:
    return _read_mapping(_resolve(path, base_dir))


def _resolve(value: str, base_dir: Path | None) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


MAX_CONFIG_BYTES = 2**20  # DeepSpeed / accelerate / GRPOConfig files are a few KB; watch plans before the job starts


def _read_mapping(path: Path) -> dict:
    try:  # a device, a FIFO or a file past the cap is refused without being read (schema/safe_read.py)
        text = read_text(path, cap=MAX_CONFIG_BYTES, what="a config file")
    except UnreadableFile as exc:
        raise PlanCommandError(f"cannot read {path}: {exc.why}") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml  # only for YAML configs: the JSON path needs nothing beyond the stdlib

            data = yaml.safe_load(text)
        else:
            data = loads_bounded(text)
    except RecursionError:  # YAML nested a thousand deep
        raise PlanCommandError(f"cannot parse {path}: nested too deeply") from None
    except Exception as exc:  # yaml.YAMLError or a ValueError of JSON: either way the file is not usable
        raise PlanCommandError(f"cannot parse {path}: {(str(exc).splitlines() or [type(exc).__name__])[0]}") from None
    if not isinstance(data, dict):
        raise PlanCommandError(f"cannot use {path}: not a mapping of settings")
    return data


def _stage(value, source: str) -> int:
    try:
        stage = int(value)
    except (TypeError, ValueError):
        raise PlanCommandError(f"{source}: ZeRO stage {value!r} is not 0, 1, 2 or 3") from None
    if stage not in (0, 1, 2, 3):
        raise PlanCommandError(f"{source}: ZeRO stage {stage} is not 0, 1, 2 or 3")
    return stage


def _count(value, default: int) -> int:
    """A DeepSpeed count (1e9 written as a float, or "auto": the default)."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


def _offloaded(section) -> bool:
    return isinstance(section, dict) and str(section.get("device", "none")).lower() in ("cpu", "nvme")
