"""A recorded run that ends in a hang: `num_steps` quick steps, then rank 1 stays in `rollout` for
`open_s` seconds while rank 0 waits in `reward` until its collective times out (as the reference
trainer's `--inject hang:rank=1,phase=rollout` does)."""
from pathlib import Path

from hostile import common, write_rank

from grpo_doctor.schema import End, EndReason, Error, Header, PhaseBegin, PhaseEnd, Step

PHASES = (("rollout", 0.10), ("reward", 0.02), ("forward", 0.05), ("backward", 0.08))
TIMEOUT_MESSAGE = "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv operation to complete"


def write_hang_run(root: Path, num_steps: int = 10, open_s: float = 60.0) -> Path:
    run = root / "hang-run"
    for rank in (0, 1):
        c = lambda step, t, rank=rank: common(rank, step=step, t=t, host="node-0")  # noqa: E731
        records = [Header(**c(None, 1.0), local_rank=rank, world_size=2, node_rank=0, local_world_size=2,
                          gpu_uuid=None, versions={"torch": "2.7.1"}, launch={}, argv=["train.py"])]
        t = 10.0
        for step in range(num_steps + 1):
            for name, length_s in PHASES:
                last = step == num_steps
                records.append(PhaseBegin(**c(step, t), phase=name, path=name))
                if last and rank == 1 and name == "rollout":
                    break  # rank 1 never leaves rollout
                if last and rank == 0 and name == "reward":
                    t_end = t + open_s  # waits for rank 1 until the collective times out
                    records += [Error(**c(step, t_end), exc_type="RuntimeError", message=TIMEOUT_MESSAGE,
                                      traceback="Traceback (most recent call last):\n  File \"train.py\", line 88, "
                                      f"in reward\nRuntimeError: {TIMEOUT_MESSAGE}\n", phase=name, path=name),
                                PhaseEnd(**c(step, t_end), phase=name, path=name, duration_s=open_s, synced=False),
                                End(**c(step, t_end), reason=EndReason.EXCEPTION)]
                    break
                t += length_s
                records.append(PhaseEnd(**c(step, t), phase=name, path=name, duration_s=length_s, synced=False))
            else:
                records.append(Step(**c(step, t), metrics={"loss": 0.5}))
                continue
            break
        write_rank(run, rank, records)
    return run
