"""grpo-doctor: finds why distributed GRPO training hangs, runs out of memory or degenerates.

Inside a training process:
    import grpo_doctor as gd
    gd.init()
    with gd.phase("rollout"):
        ...
    gd.memory_snapshot("step")
    gd.step(n, loss=loss, reward=reward)

This import stays light: it never pulls in pandas, matplotlib, jinja2 or torch.
"""
from grpo_doctor._version import __version__
from grpo_doctor.rank.api import (
    flush,
    init,
    is_recording,
    memory_snapshot,
    phase,
    run_dir,
    set_step,
    shutdown,
    step,
)

__all__ = [
    "__version__", "flush", "init", "is_recording", "memory_snapshot", "phase", "run_dir", "set_step",
    "shutdown", "step",
]
