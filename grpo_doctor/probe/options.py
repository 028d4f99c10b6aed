"""The probe's measurement options, shared by `grpo-doctor probe` (which passes them on to
torchrun) and the rank entry point `python -m grpo_doctor.probe`.

Defaults differ by backend: GPUs (NCCL) are swept up to 256 MiB as nccl-tests would; CPU ranks
(gloo, tests and laptops) up to 4 MiB so the probe stays a few seconds long.

Typical use:
    add_measure_arguments(parser)
    opts = options_from_args(parser.parse_args(), os.environ)
"""
from __future__ import annotations

import argparse
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_doctor.probe.settings import SettingsError, parse_expect, read_args_file
from grpo_doctor.schema import DEFAULT_RUNS_ROOT, RUN_DIR_ENV

GPU_SIZES = "1K,16K,256K,4M,64M,256M"
CPU_SIZES = "1K,16K,256K,4M"
_SIZE = re.compile(r"^(\d+)([KMG]?)(i?B)?$", re.IGNORECASE)


@dataclass(frozen=True)
class ProbeOptions:
    run_dir: Path
    rdzv_timeout_s: float = 60.0
    op_timeout_s: float = 30.0
    sizes_bytes: list[int] = field(default_factory=list)
    iters: int = 10
    warmup: int = 3
    p2p_bytes: int = 4 * 2**20
    repeats: int = 3
    slow_ratio: float = 0.5
    backend: str = "auto"
    expect: dict[str, str] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    # When the probe started (time.monotonic()): the rendezvous timeout counts from here, so
    # start-up (importing torch on a busy node) is inside it, not added to it.
    started_mono: float = field(default_factory=time.monotonic)


def add_measure_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", type=Path, default=None,
                   help=f"where results go, under probe/ (default: ${RUN_DIR_ENV} or {DEFAULT_RUNS_ROOT}/probe-TIME)")
    p.add_argument("--rdzv-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for every node / rank to join before naming the missing ones (default 60)")
    p.add_argument("--op-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="the longest any one collective may take before the probe calls it stuck (default 30)")
    p.add_argument("--sizes", default=None, metavar="LIST",
                   help=f"sweep sizes, comma-separated with K/M/G (default {GPU_SIZES} on GPUs, {CPU_SIZES} on CPU)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per size (default 20 on GPUs, 5 on CPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls per size first (default 5 / 2)")
    p.add_argument("--p2p-size", default=None, metavar="SIZE",
                   help="bytes per send/recv link test (default 64M on GPUs, 4M on CPU)")
    p.add_argument("--repeats", type=int, default=3, help="send/recv rounds per link; the median counts (default 3)")
    p.add_argument("--slow-ratio", type=float, default=0.5,
                   help="a link under this fraction of the upper quartile of like links (within a node, or between nodes) is slow (default 0.5)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: NCCL where CUDA is available, else gloo")
    p.add_argument("--expect", action="append", metavar="KEY=VALUE",
                   help="a setting of yours that must be the same on every node (repeatable), e.g. use_vllm=true")
    p.add_argument("--args-file", type=Path, default=None, metavar="FILE",
                   help="an ms-swift args.json or TRL/accelerate YAML config whose fields must agree across nodes")


def options_from_args(args: argparse.Namespace, environ: Mapping[str, str], *, cuda: bool | None = None,
                      started_mono: float | None = None) -> ProbeOptions:
    started_mono = time.monotonic() if started_mono is None else started_mono
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available() and args.backend != "gloo"
        if args.backend == "nccl" and not cuda:
            raise SettingsError("--backend nccl: CUDA is not available here (no GPU, or a CPU build of torch); "
                                "use --backend gloo or auto")
    for name in ("rdzv_timeout", "op_timeout", "slow_ratio"):
        if getattr(args, name) <= 0:
            raise SettingsError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be above 0")
    for name in ("iters", "warmup", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < (0 if name == "warmup" else 1):
            raise SettingsError(f"--{name} {getattr(args, name)}: must be at least {0 if name == 'warmup' else 1}")
    run_dir = args.run_dir or Path(environ.get(RUN_DIR_ENV) or Path(DEFAULT_RUNS_ROOT) / time.strftime("probe-%Y%m%d-%H%M%S"))
    return ProbeOptions(
        run_dir=run_dir, rdzv_timeout_s=args.rdzv_timeout, op_timeout_s=args.op_timeout,
        sizes_bytes=parse_sizes(args.sizes or (GPU_SIZES if cuda else CPU_SIZES)),
        iters=args.iters or (20 if cuda else 5), warmup=args.warmup if args.warmup is not None else (5 if cuda else 2),
        p2p_bytes=parse_sizes(args.p2p_size or ("64M" if cuda else "4M"), "--p2p-size")[0],
        repeats=args.repeats, slow_ratio=args.slow_ratio, backend=args.backend,
        expect=parse_expect(args.expect), args=read_args_file(args.args_file) if args.args_file else {},
        started_mono=started_mono,
    )


def port_problem(port: int) -> str | None:
    """Why `port` cannot be the master's TCP port (binding it would raise OverflowError), or None."""
    if not 1 <= port <= 65535:
        return f"master port {port}: out of range, a TCP port is 1 .. 65535"
    return None


def parse_sizes(text: str, flag: str = "--sizes") -> list[int]:
    sizes = []
    for item in text.split(","):
        m = _SIZE.match(item.strip())
        if not m or int(m.group(1)) == 0:
            raise SettingsError(f"{flag} {text!r}: {item.strip()!r} is not a size; use e.g. 1K,1M,64M")
        sizes.append(int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2).upper()])
    return sizes
