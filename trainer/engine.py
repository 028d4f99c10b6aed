"""The training engine around the policy: DistributedDataParallel, or DeepSpeed ZeRO-2/3.

Both engines offer the same small surface to the loop: `forward(**inputs)`, `backward(loss)`,
`step() -> grad norm`, `generation_model()` (a context yielding a plain module with full
weights, for `generate`) and `named_full_parameters()` (for pushing weights into vLLM).

DeepSpeed on a machine without CUDA: its CPU accelerator is chosen with DS_ACCELERATOR=cpu,
it reuses our gloo process group, and it is given a torch AdamW with
`zero_force_ds_cpu_optimizer: false` (its own CPU Adam needs a compiled extension).

Typical use:
    engine = build_engine(policy, cfg, info)
    out = engine.forward(input_ids=ids, attention_mask=mask)
    engine.backward(loss); grad_norm = engine.step()
    with engine.generation_model() as model:
        model.generate(...)
"""
from __future__ import annotations

import contextlib
import inspect
import os
import warnings
from collections.abc import Iterator

import torch
from torch.nn.parallel import DistributedDataParallel

from .config import TrainConfig
from .dist import DistInfo

# DeepSpeed prints its config and a line every N steps unless told otherwise.
_DS_QUIET_STEPS = 10**9
# torch 2.13 renamed DDP's broadcast_buffers to forward_sync_buffers.
_DDP_OPTIONS = inspect.signature(DistributedDataParallel).parameters
_NO_BUFFER_SYNC = {("forward_sync_buffers" if "forward_sync_buffers" in _DDP_OPTIONS else "broadcast_buffers"): False}


class DDPEngine:
    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, info: DistInfo) -> None:
        self.module = model.to(info.device)
        device_ids = [info.device.index] if info.device.type == "cuda" else None
        # The only buffers are rotary tables every rank computes identically; syncing them in
        # every forward (the default) would add a collective per step for nothing.
        self.wrapped = DistributedDataParallel(self.module, device_ids=device_ids, **_NO_BUFFER_SYNC)
        self.optimizer = make_optimizer(self.module, cfg)
        self.max_grad_norm = cfg.max_grad_norm

    def forward(self, **inputs):
        return self.wrapped(**inputs)  # through the wrapper: its hooks all-reduce the gradients

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        grad_norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm.item()

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    @contextlib.contextmanager
    def generation_model(self) -> Iterator[torch.nn.Module]:
        yield self.module

    def named_full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in self.module.named_parameters():
            yield name, param.data


class DeepSpeedEngine:
    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, info: DistInfo) -> None:
        deepspeed = import_deepspeed()
        # DeepSpeed calls torch.distributed names that torch 2.13 deprecates, once per collective:
        # a FutureWarning per step per rank would bury the trainer's own output.
        warnings.filterwarnings("ignore", message=r".*is deprecated\. Please use `torch\.distributed",
                                category=FutureWarning)
        self.zero_stage = cfg.zero_stage
        config = {
            "train_micro_batch_size_per_gpu": cfg.per_device_batch,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": cfg.max_grad_norm,
            "zero_optimization": {"stage": cfg.zero_stage},
            "zero_force_ds_cpu_optimizer": False,
            "steps_per_print": _DS_QUIET_STEPS,
            "wall_clock_breakdown": False,
        }
        optimizer = make_optimizer(model, cfg)
        self.wrapped, self.optimizer, _, _ = deepspeed.initialize(
            model=model.to(info.device), optimizer=optimizer, config=config, dist_init_required=False
        )
        self.module = self.wrapped.module
        self._deepspeed = deepspeed

    def forward(self, **inputs):
        return self.wrapped(**inputs)

    def backward(self, loss: torch.Tensor) -> None:
        self.wrapped.backward(loss)

    def step(self) -> float:
        self.wrapped.step()  # clips to gradient_clipping, steps, zeroes the gradients
        grad_norm = self.wrapped.get_global_grad_norm()
        return float(grad_norm) if grad_norm is not None else float("nan")

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    @contextlib.contextmanager
    def generation_model(self) -> Iterator[torch.nn.Module]:
        if self.zero_stage != 3:
            yield self.module
            return
        # ZeRO-3 holds 1/world of each weight. Generation runs a different number of forward
        # passes on each rank, so per-layer gathers would not match up across ranks: gather
        # everything once, and take DeepSpeed's hooks off meanwhile (as TRL does).
        with self._deepspeed.zero.GatheredParameters(list(self.module.parameters())):
            _remove_zero3_hooks(self.wrapped)
            try:
                yield self.module
            finally:
                _add_zero3_hooks(self.wrapped)

    def named_full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in self.module.named_parameters():
            if self.zero_stage == 3:
                # A collective per parameter: every rank must walk the whole list.
                with self._deepspeed.zero.GatheredParameters([param]):
                    yield name, param.data
            else:
                yield name, param.data


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    # No weight decay, as the HF Trainer under TRL: decay moves the policy off the reference
    # even when every advantage is 0, and Adam then magnifies the resulting tiny KL gradient,
    # so a degenerate run (case 2) would show a growing KL instead of the telltale flat 0.
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)


def build_engine(model: torch.nn.Module, cfg: TrainConfig, info: DistInfo):
    return DeepSpeedEngine(model, cfg, info) if cfg.engine == "deepspeed" else DDPEngine(model, cfg, info)


def import_deepspeed():
    if not torch.cuda.is_available():
        # Must be set before deepspeed first looks for an accelerator.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    return deepspeed


def _zero3_offload(engine):
    return engine.optimizer.parameter_offload


def _remove_zero3_hooks(engine) -> None:
    offload = _zero3_offload(engine)
    for param in offload.module.parameters(recurse=True):
        param.ds_active_sub_modules.clear()
    for hook in offload.forward_hooks + offload.backward_hooks:
        hook.remove()
    offload.forward_hooks, offload.backward_hooks = [], []


def _add_zero3_hooks(engine) -> None:
    offload = _zero3_offload(engine)
    coordinator = offload.param_coordinator
    if not coordinator.is_invalid_trace():
        coordinator._invalidate_trace()  # the generation passes are not the trace of a training step
    offload._register_deepspeed_module(offload.module)
