"""The rollout call as a phase "rollout": Hugging Face generate, vLLM's LLM.generate / LLM.chat,
SGLang's Engine.generate.

A rollout that calls another wrapped rollout (PEFT's generate calling the base model's, vLLM's chat
calling generate) is one phase: the inner call runs unrecorded. The phase's detail names the engine.

Typical use (sitecustomize does it when the module is imported):
    patch_transformers(transformers.generation.utils)
"""
from __future__ import annotations

import functools
import threading
from types import ModuleType

from grpo_doctor.rank.auto import state
from grpo_doctor.rank.auto.collectives import MARK

PHASE = "rollout"
_inside = threading.local()  # .active: this thread is inside a recorded rollout


def patch_transformers(module: ModuleType) -> None:
    _patch_method(module.GenerationMixin, "generate", "transformers")


def patch_vllm(module: ModuleType) -> None:
    for name in ("generate", "chat"):
        _patch_method(module.LLM, name, "vllm")


def patch_sglang(module: ModuleType) -> None:
    _patch_method(module.Engine, "generate", "sglang")


def _patch_method(cls: type, name: str, engine: str) -> None:
    func = cls.__dict__.get(name)
    if func is None or getattr(func, MARK, False):
        return
    setattr(cls, name, _wrap(func, engine))


def _wrap(func, engine: str):
    detail = {"engine": engine}

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if getattr(_inside, "active", False):
            return func(*args, **kwargs)
        try:
            rec = state.current()
            if rec is not None:
                rec.begin_phase(PHASE, False, detail)
        except Exception as exc:  # noqa: BLE001 - ours: off, and the call goes on
            state.fail(f"{engine} generate", exc)
            rec = None
        if rec is None:
            return func(*args, **kwargs)
        _inside.active = True
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            _inside.active = False
            _end(rec, type(exc), exc, engine)
            raise
        _inside.active = False
        _end(rec, None, None, engine)
        return result

    setattr(wrapper, MARK, True)
    return wrapper


def _end(rec, exc_type, exc, engine: str) -> None:
    try:
        rec.end_phase(exc_type, exc)
    except Exception as ours:  # noqa: BLE001
        state.fail(f"{engine} generate", ours)
