"""The settings a node (or rank) launches with, in the form compared across nodes: launch
variables, GPUs, NCCL_* / TORCH_* / GLOO_* variables, the user's own `--expect KEY=VALUE`, and
the scalar fields of an ms-swift / TRL argument file.

Keys that differ by design between nodes (NODE_RANK, RANK, LOCAL_RANK, ...) are left out.

Typical use:
    settings = node_settings(os.environ, nnodes=2, nproc_per_node=8, gpus=8,
                             expect=parse_expect(["use_vllm=true"]), args_file=Path("args.json"))
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.safe_read import UnreadableFile, loads_bounded, read_text

COMPARED_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS")
# Variables under those prefixes that are per process or per node by design.
PER_PROCESS = frozenset({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"})
# Argument-file fields that differ between nodes by design (paths with the host name, ranks).
ARGS_IGNORED = frozenset({"local_rank", "logging_dir", "run_name", "hub_token", "output_dir", "local_process_index",
                          "process_index"})
EXPECT_PREFIX = "expect:"
ARGS_PREFIX = "args:"
MAX_ARGS_FILE_BYTES = 2**20  # an args.json or a config YAML: a few KB
# Differences in these (or in any expect:/args: key) make the job fail or hang; others degrade it.
CRITICAL = frozenset({"NNODES", "NPROC_PER_NODE", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                      "CUDA_VISIBLE_DEVICES (count)", "GPUs visible", "local_world_size"})


class SettingsError(DoctorError, ValueError):
    """A bad --expect or argument file; the message names it and says what is expected."""

    hint = "see grpo-doctor probe --help"


def parse_expect(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"--expect {item!r}: expected KEY=VALUE, e.g. --expect use_vllm=true")
        out[key.strip()] = value.strip()
    return out


def read_args_file(path: Path) -> dict[str, Any]:
    """Top-level scalar fields of an ms-swift `args.json` or a TRL / accelerate YAML config."""
    try:  # a device, a FIFO or a file past the cap is refused without being read (schema/safe_read.py)
        text = read_text(path, cap=MAX_ARGS_FILE_BYTES, what="an arguments file")
    except UnreadableFile as exc:
        raise SettingsError(f"--args-file {path}: cannot read it ({exc.why})") from None
    kind = "YAML" if path.suffix in (".yaml", ".yml") else "JSON"
    try:
        if kind == "YAML":
            import yaml  # transformers depends on it; only YAML argument files need it

            data = yaml.safe_load(text)
        else:
            data = loads_bounded(text)
    except ImportError as exc:
        raise SettingsError(f"--args-file {path}: reading YAML needs PyYAML (pip install pyyaml)") from exc
    except Exception as exc:  # noqa: BLE001 - json's ValueError or yaml's YAMLError: both are bad files
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SettingsError(f"--args-file {path}: not valid {kind} ({first_line})") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"--args-file {path}: expected a mapping of argument names to values")
    return {k: _scalar(v) for k, v in sorted(data.items()) if k not in ARGS_IGNORED and not isinstance(v, dict)}


def node_settings(environ: Mapping[str, str], *, nnodes: int | None, nproc_per_node: int | None,
                  gpus: int | None, expect: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "NNODES": nnodes, "NPROC_PER_NODE": nproc_per_node,
        "WORLD_SIZE": environ.get("WORLD_SIZE"),  # as set, never derived: NPROC_PER_NODE already says it
        "MASTER_ADDR": environ.get("MASTER_ADDR"), "MASTER_PORT": environ.get("MASTER_PORT"),
        "GPUs visible": gpus,
    }
    cvd = environ.get("CUDA_VISIBLE_DEVICES")
    settings["CUDA_VISIBLE_DEVICES (count)"] = len([d for d in cvd.split(",") if d.strip()]) if cvd is not None else None
    settings |= {k: v for k, v in sorted(environ.items()) if k.startswith(COMPARED_PREFIXES) and k not in PER_PROCESS}
    settings |= {EXPECT_PREFIX + k: v for k, v in expect.items()}
    settings |= {ARGS_PREFIX + k: v for k, v in args.items()}
    return settings


def is_critical(key: str) -> bool:
    return key in CRITICAL or key.startswith((EXPECT_PREFIX, ARGS_PREFIX))


def _scalar(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else json.dumps(value, sort_keys=True)
