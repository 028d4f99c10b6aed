"""instrument()'s weight-sync hook around TRL 1.16's own push into vLLM, on CPU.

TRL's real `VLLMGeneration.sync_weights` and `_iter_named_params` run here; only the vLLM engine is
a stand-in (no vLLM on this machine): a module holding the tiny Llama's weights as vLLM's Llama
loader does (q/k/v rows stacked into `qkv_proj`, gate/up into `gate_up_proj`), reached where TRL
reaches it (`llm.llm_engine.model_executor.driver_worker.model_runner.model`). Not run: a real
vLLM engine, a GPU, sleep mode, ZeRO-3 / FSDP gathers.
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from grpo_doctor_trainer.model import build_char_tokenizer, build_tiny_model

from grpo_doctor.rank import api, weight_sync
from grpo_doctor.rank.integrations.trl import WeightSyncWatch, watch_weight_sync

trl_generation = pytest.importorskip("trl.generation.vllm_generation")

STACKED = (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj")))


class FusedLlama(torch.nn.Module):
    """The tensors vLLM's LlamaForCausalLM holds for a Hugging Face Llama, and its load_weights
    (stacked_params_mapping). `drops`: name parts its loader ignores (a layout it does not know)."""

    def __init__(self, policy: torch.nn.Module, drops: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.drops = drops
        self.offsets: dict[str, tuple[str, int, int]] = {}
        tensors: dict[str, torch.Tensor] = {}
        source = dict(policy.named_parameters())
        for name, param in source.items():
            for fused, parts in STACKED:
                if f".{parts[0]}." in name:
                    pieces = [source[name.replace(parts[0], p)] for p in parts]
                    tensors[name.replace(parts[0], fused)] = torch.cat(pieces).detach().to(torch.bfloat16)
                    start = 0
                    for p, piece in zip(parts, pieces, strict=True):
                        self.offsets[name.replace(parts[0], p)] = (name.replace(parts[0], fused), start, len(piece))
                        start += len(piece)
            if name not in self.offsets and not any(f".{p}." in name for _, ps in STACKED for p in ps):
                tensors[name] = param.detach().to(torch.bfloat16).clone()
        self.params = torch.nn.ParameterDict({n.replace(".", "__"): torch.nn.Parameter(t, requires_grad=False)
                                              for n, t in tensors.items()})

    def named_parameters(self, *args, **kwargs):  # vLLM's names, dots and all
        for key, param in self.params.items():
            yield key.replace("__", "."), param

    def load_weights(self, weights) -> None:
        own = dict(self.named_parameters())
        for name, tensor in weights:
            if any(d in name for d in self.drops):
                continue
            if name in self.offsets:
                fused, start, rows = self.offsets[name]
                own[fused].data.narrow(0, start, rows).copy_(tensor)
            else:
                own[name].data.copy_(tensor)


def fake_llm(model: torch.nn.Module) -> SimpleNamespace:
    worker = SimpleNamespace(model_runner=SimpleNamespace(model=model))
    return SimpleNamespace(llm_engine=SimpleNamespace(model_executor=SimpleNamespace(driver_worker=worker)),
                           reset_prefix_cache=lambda: None)


def trl_trainer(policy, engine_model, mode: str = "colocate"):
    """A GRPOTrainer as far as the hook and TRL's VLLMGeneration.sync_weights look at it."""
    generation = object.__new__(trl_generation.VLLMGeneration)
    generation.mode, generation.enable_sleep_mode, generation.model = mode, False, policy
    generation.accelerator = SimpleNamespace(is_main_process=True)
    generation._dist = SimpleNamespace(is_fsdp=False, gather_params=lambda params: contextlib.nullcontext())
    if mode == "colocate":
        generation.llm = fake_llm(engine_model)
    else:
        generation._weight_metadata = None
        generation.vllm_client = SimpleNamespace(update_named_params=lambda meta, params: list(params),
                                                 reset_prefix_cache=lambda: None)
    args = SimpleNamespace(use_vllm=True, vllm_mode=mode)
    return SimpleNamespace(args=args, vllm_generation=generation, state=SimpleNamespace(global_step=0))


@pytest.fixture
def recorded(monkeypatch):
    records: list = []
    recorder = SimpleNamespace(ident=SimpleNamespace(rank=0, host="node-0", pid=1), current_step=1,
                               sink=SimpleNamespace(enqueue=records.append))
    monkeypatch.setattr(api, "current_recorder", lambda: recorder)
    monkeypatch.setattr(weight_sync, "_said_mismatch", False)
    return records


def policy_model() -> torch.nn.Module:
    return build_tiny_model(build_char_tokenizer(), seed=0)


def nudge(policy: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05)


def test_each_push_through_trls_own_sync_is_checked_against_the_fused_engine(recorded):
    policy = policy_model()
    engine_model = FusedLlama(policy)
    trainer = trl_trainer(policy, engine_model)
    hook = watch_weight_sync(trainer)
    assert isinstance(trainer.vllm_generation.sync_weights, WeightSyncWatch) and hook is not None
    trainer.vllm_generation.sync_weights()
    nudge(policy)
    trainer.vllm_generation.sync_weights()  # TRL pushes the new weights: the engine follows
    assert [(r.engine, r.num_tensors, r.num_mismatched) for r in recorded] == [("trl-vllm-colocate", 21, 0)] * 2
    assert all((r.num_trainer_only, r.num_engine_only, r.num_unchecked) == (0, 0, 0) for r in recorded)
    assert "_iter_named_params" not in vars(trainer.vllm_generation)  # TRL's own walk is back


def test_a_loader_that_silently_drops_a_tensor_is_named_with_its_slice_of_the_fused_tensor(recorded):
    policy = policy_model()
    trainer = trl_trainer(policy, FusedLlama(policy, drops=("layers.1.self_attn.v_proj",)))
    watch_weight_sync(trainer)
    trainer.vllm_generation.sync_weights()
    nudge(policy)
    trainer.vllm_generation.sync_weights()
    first, second = recorded
    assert first.num_mismatched == 0
    [m] = second.mismatched
    assert (m["name"], m["engine_name"]) == ("model.layers.1.self_attn.v_proj.weight",
                                             "model.layers.1.self_attn.qkv_proj.weight[256:384]")


def test_every_nth_push_is_checked(recorded):
    policy = policy_model()
    trainer = trl_trainer(policy, FusedLlama(policy))
    watch_weight_sync(trainer, every=2)
    for _ in range(5):
        trainer.vllm_generation.sync_weights()
    assert len(recorded) == 3


def test_a_vllm_server_is_recorded_as_not_compared_once(recorded):
    policy = policy_model()
    trainer = trl_trainer(policy, None, mode="server")
    watch_weight_sync(trainer)
    trainer.vllm_generation.sync_weights()
    trainer.vllm_generation.sync_weights()
    [record] = recorded
    assert (record.checked, record.engine) == (False, "trl-vllm-server") and "another process" in record.reason


def test_no_vllm_or_every_zero_leaves_trl_alone(recorded):
    policy = policy_model()
    trainer = trl_trainer(policy, FusedLlama(policy))
    sync = trainer.vllm_generation.sync_weights
    assert watch_weight_sync(trainer, every=0) is None and trainer.vllm_generation.sync_weights == sync
    trainer.args.use_vllm = False
    assert watch_weight_sync(trainer) is None and recorded == []
