"""A run whose every user-controlled string is an HTML/script payload: host names, phase names, an
exception message, a metric name, a launch variable, and a raw log line beside a CUDA OOM."""
from pathlib import Path

from helpers import write_rank

from grpo_doctor.schema import End, EndReason, Error, Header, PhaseBegin, PhaseEnd, Step

SCRIPT = '<script>console.error("xss-script-ran")</script>'
IMG = '<img src=x onerror="console.error(\'xss-img-ran\')">'


def write_hostile_run(root: Path) -> tuple[Path, Path]:
    run = root / "run"
    for rank in (0, 1):
        host = f"node-{rank}{IMG}"
        c = lambda step, t, rank=rank, host=host: common(rank, step=step, t=t, host=host)  # noqa: E731
        records = [Header(**c(None, 1.0), local_rank=rank, world_size=2, node_rank=rank, local_world_size=1,
                          gpu_uuid=None, versions={"torch": f"2.13{SCRIPT}"},
                          launch={"NCCL_SOCKET_IFNAME": f'"><b>{SCRIPT}', "NPROC_PER_NODE": "1"},
                          argv=["train.py", SCRIPT])]
        for step in range(4):
            t = 10.0 + step
            records += [PhaseBegin(**c(step, t), phase=f"rollout{SCRIPT}", path=f"rollout{SCRIPT}"),
                        PhaseEnd(**c(step, t + 0.5), phase=f"rollout{SCRIPT}", path=f"rollout{SCRIPT}",
                                 duration_s=0.5, synced=False),
                        Step(**c(step, t + 0.9), metrics={"loss": 0.1 * step, f"reward{IMG}": 1.0})]
        if rank == 1:
            records += [Error(**c(4, 14.5), exc_type="RuntimeError", message=f"completion was {SCRIPT}",
                              traceback=f"Traceback ...\n{SCRIPT}", phase="forward", path="forward"),
                        End(**c(4, 14.6), reason=EndReason.EXCEPTION)]
        else:
            records.append(End(**c(4, 14.6), reason=EndReason.EXIT))
        write_rank(run, rank, records)
    log = root / "node1-stderr.log"
    log.write_text(f"[rank1]: sampled completion: {SCRIPT}\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. "
                   "Tried to allocate 1.42 GiB. GPU 7 has a total capacity of 79.35 GiB of which 950.19 MiB is free. "
                   "Process 48213 has 29.59 GiB memory in use. Process 48377 has 48.83 GiB memory in use. "
                   "Of the allocated memory 27.01 GiB is allocated by "
                   f"PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated.\n[rank1]: {IMG}\n")
    return run, log


def common(rank, step, t, host):
    return dict(rank=rank, host=host, pid=1000 + rank, step=step, t=t, mono=t)
