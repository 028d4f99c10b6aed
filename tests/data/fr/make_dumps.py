"""Produce real flight-recorder dumps with gloo on CPU: every rank writes what torch's NCCL watchdog
writes on a timeout (`_dump_fr_trace()`, the same pickle), and `_dump_fr_trace_json()` beside it.

Scenarios:
  skip   (2+ ranks) the last rank takes another code path and never issues the default group's
         second all_reduce; the others issue it and dump while they wait in it, as on a watchdog timeout.
  shape  (2+ ranks) all finish, but at one all_reduce the last rank's shape differs ([6, 4], the others
         [4, 6]) and at the next its dtype (int32, the others float32); gloo only checks byte counts.

Typical use (the files in tests/data/fr/ were made this way):
    torchrun --nproc-per-node 3 tests/data/fr/make_dumps.py skip OUT_DIR
"""
from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json


def main(scenario: str, out_dir: Path) -> None:
    # generous: on a busy machine the ranks start seconds apart
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, last = dist.get_rank(), dist.get_world_size() - 1
    pair = dist.new_group([0, 1], group_desc="pair")
    t = torch.ones(8)
    dist.all_reduce(t)
    if rank in (0, 1):
        dist.all_reduce(torch.ones(2, 3), group=pair)
    dist.broadcast(t, 0)
    if scenario == "skip":
        if rank != last:
            dist.all_reduce(torch.ones(16), async_op=True)  # never completes: the last rank is elsewhere
    else:
        dist.all_reduce(torch.ones(6, 4) if rank == last else torch.ones(4, 6))
        dist.all_reduce(torch.ones(8, dtype=torch.int32) if rank == last else torch.ones(8))
        dist.barrier()
    # Torch's default writer names the file <TORCH_FR_DUMP_TEMP_FILE prefix><rank>.
    (out_dir / f"nccl_trace_rank_{rank}").write_bytes(_dump_fr_trace())
    (out_dir / f"nccl_trace_rank_{rank}.json").write_bytes(_dump_fr_trace_json())


if __name__ == "__main__":
    os.makedirs(sys.argv[2], exist_ok=True)
    main(sys.argv[1], Path(sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)  # skip teardown: it would wait for the all_reduce that never completes
