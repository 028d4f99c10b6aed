"""grpo-doctor: finds why distributed GRPO training hangs, runs out of memory or degenerates.

Inside a training process:
    import grpo_doctor as gd
    gd.init()
    gd.seed_audit("init", sampling_seed=seed + rank)
    with gd.phase("rollout"):
        ...
    gd.rollouts(prompts, completions, rewards, completion_ids=ids, max_length=512, temperature=1.0)
    gd.memory_snapshot("step")
    gd.step(n, loss=loss, reward=reward)
    gd.parallel_group("tp", tp_group)        # or gd.device_mesh(mesh), gd.parallel_layout(): who is in which group
    gd.check_weight_sync(policy.named_parameters(), engine_model.named_parameters())   # after a weight push

This import stays light: it never pulls in pandas, matplotlib, jinja2, numpy or torch.
"""
from grpo_doctor._version import __version__
from grpo_doctor.rank.api import (
    device_mesh,
    flush,
    init,
    is_recording,
    memory_snapshot,
    parallel_group,
    parallel_layout,
    phase,
    run_dir,
    set_step,
    shutdown,
    step,
)
from grpo_doctor.rank.rollouts import rollouts
from grpo_doctor.rank.seeds import seed_audit
from grpo_doctor.rank.weight_sync import (
    WeightSyncCheck,
    WeightTarget,
    check_weight_sync,
    vllm_name_map,
    weight_sync_not_checked,
)

__all__ = [
    "__version__", "flush", "init", "is_recording", "memory_snapshot", "phase", "rollouts", "run_dir",
    "seed_audit", "set_step", "shutdown", "step", "WeightSyncCheck", "WeightTarget", "check_weight_sync",
    "vllm_name_map", "weight_sync_not_checked",
    "device_mesh", "parallel_group", "parallel_layout",
]
