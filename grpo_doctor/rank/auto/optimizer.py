"""Every optimizer step as the job's step heartbeat, through torch's global optimizer step hook.

`torch.optim.optimizer.register_optimizer_step_post_hook` runs after the `step()` of every
torch.optim.Optimizer, including the torch optimizers that DeepSpeed's ZeRO wrappers and
accelerate step underneath. One step of training is one `grpo_doctor.step(n)`, n counted from the
recorder's current step:
  - param groups do not matter: the hook runs once per `step()` call, not per group;
  - with several optimizers (actor and critic, a GAN's two), the first optimizer that steps is the
    clock and the others are not counted; if it is garbage-collected, the next one to step takes over;
  - gradient accumulation steps the optimizer once per accumulated batch, so that is the count;
  - a job that calls `grpo_doctor.step()` itself (or runs a grpo-doctor integration) keeps its own
    numbering: from its first call on, the hook stands aside.

Typical use (sitecustomize does it when torch.optim.optimizer is imported):
    patch(torch.optim.optimizer)
"""
from __future__ import annotations

import weakref
from types import ModuleType

from grpo_doctor.rank.auto import state

_clock: weakref.ref | None = None  # the optimizer whose steps are counted
_our_num_steps: int | None = None  # the recorder's step() count after our last call; None before it
_stood_aside = False


def patch(optim_module: ModuleType) -> None:
    register = getattr(optim_module, "register_optimizer_step_post_hook", None)
    if register is None:
        state.fail("torch.optim", RuntimeError("this torch has no register_optimizer_step_post_hook (torch >= 2.0)"))
        return
    register(_after_step)


def _after_step(optimizer, args, kwargs) -> None:
    global _clock, _our_num_steps, _stood_aside
    if _stood_aside:
        return
    try:
        rec = state.current()
        if rec is None:
            return
        clock = _clock() if _clock is not None else None
        if clock is None:
            _clock = weakref.ref(optimizer)
        elif clock is not optimizer:
            return
        if _our_num_steps is not None and rec.num_steps != _our_num_steps or _our_num_steps is None and rec.num_steps:
            _stood_aside = True  # the job counts its own steps
            return
        rec.step(rec.current_step or 0, {})
        _our_num_steps = rec.num_steps
    except Exception as exc:  # noqa: BLE001 - a hook that raises would fail the job's optimizer.step()
        state.fail("the optimizer step hook", exc)
