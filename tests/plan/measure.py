"""What the memory planner (`grpo-doctor plan`) is checked against, measured on this CPU machine.

Two references the planner does not compute itself:
- DeepSpeed's own ZeRO-2/3 model-state estimators, fed with the parameter counts of the real
  architecture built on the meta device (nothing allocated, so a 72B config costs seconds);
- the live tensor bytes of one real micro-step of the reference trainer (grpo_doctor_trainer's own
  token_logprobs and grpo_loss on a random-init LlamaForCausalLM), tracked storage by storage with
  torch's MemTracker, which also says what the bytes are (parameter, gradient, activation, temp).

Typical use:
    states = deepspeed_model_states(Path("config.json"), stage=3, gpus_per_node=8, nodes=1,
                                    offload_optimizer=False, offload_params=False)
    gpu_bytes, cpu_bytes = states
    step = measure_train_step(dict(vocab_size=32000, hidden_size=256, intermediate_size=704,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1),
                              micro_batch=2, prompt_len=64, completion_len=256,
                              gradient_checkpointing=True, dtype=torch.bfloat16)
    python -m tests.plan.measure [--json measured.json]      # the grid, in MiB
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from grpo_doctor_trainer.grpo import grpo_loss, position_ids_for, token_logprobs
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig
from transformers.modeling_outputs import CausalLMOutputWithPast

MIB = 2**20


# ---------------------------------------------------------------- DeepSpeed's estimators
@dataclass(frozen=True)
class ModelStates:
    """DeepSpeed's estimate per GPU; unpacks as (gpu_bytes, cpu_bytes)."""
    gpu_bytes: int
    cpu_bytes: int
    total_params: int
    largest_layer_params: int

    def __iter__(self):
        return iter((self.gpu_bytes, self.cpu_bytes))


def param_counts(config_json: Path) -> tuple[int, int]:
    """(total_params, largest_layer_params) as DeepSpeed's `model_to_params` counts them."""
    config_json = Path(config_json)
    config = AutoConfig.from_pretrained(config_json if config_json.is_dir() else str(config_json))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # DeepSpeed dedupes tied weights by data_ptr(), which is 0 for every meta tensor: key on the
    # Parameter object instead (a tied lm_head is the embedding's Parameter itself).
    total = sum({id(p): p.numel() for _, p in model.named_parameters(remove_duplicate=False)}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


def deepspeed_model_states(config_json: Path, stage: int, gpus_per_node: int, nodes: int,
                           offload_optimizer: bool, offload_params: bool, *,
                           zero_init: bool = True) -> ModelStates:
    """DeepSpeed 0.19's estimate_zero{2,3}_model_states_mem_needs at its default buffer factor (1.5).

    Stage 2 is `stage_1_and_2`'s estimator (there is no separate stage-1 one); parameter offload
    exists only for stage 3. zero_init is the estimator's own default.
    """
    total, largest = param_counts(config_json)
    if stage == 2:
        if offload_params:
            raise ValueError("offload_params needs ZeRO stage 3; DeepSpeed has no stage-2 parameter offload")
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            total, num_gpus_per_node=gpus_per_node, num_nodes=nodes, cpu_offload=offload_optimizer)
    elif stage == 3:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            total, largest, num_gpus_per_node=gpus_per_node, num_nodes=nodes, cpu_offload=offload_optimizer,
            cpu_offload_params=offload_params, zero_init=zero_init)
    else:
        raise ValueError(f"stage {stage}: DeepSpeed has estimators for ZeRO stages 2 and 3 only")
    return ModelStates(gpu_bytes=int(gpu), cpu_bytes=int(cpu), total_params=total, largest_layer_params=largest)


# ---------------------------------------------------------------- measured micro-steps
@dataclass(frozen=True)
class MeasuredStep:
    """Live tensor bytes of one policy micro-step (forward, GRPO loss, backward; no optimizer step).

    peak_activations_bytes is everything above parameters + gradients (+ optimizer states, none
    here) at the peak: saved activations, backward temporaries, buffers, the batch. The logits
    peaks are token_logprobs alone on the trunk's final hidden states (the lm_head matmul onward).
    """
    params_bytes: int
    grads_bytes: int
    peak_total_bytes: int
    peak_activations_bytes: int
    forward_peak_total_bytes: int  # the highest point before backward starts
    saved_after_forward_bytes: int  # live above params once the loss is computed: what autograd keeps
    grads_at_peak_bytes: int  # parameter gradients already written when the peak is reached
    peak_in: str  # "forward" or "backward"
    peak_by_category_bytes: dict  # MemTracker's categories at the peak
    logits_peak_bytes: int  # with grad, as the policy forward
    logits_peak_no_grad_bytes: int  # as the reference / old-policy pass


@dataclass(frozen=True)
class MeasuredLogprob:
    """Live bytes of a no_grad token_logprobs pass (reference or old policy)."""
    params_bytes: int
    peak_total_bytes: int
    peak_activations_bytes: int  # above parameters and buffers
    logits_peak_bytes: int


class _Bf16GemmInFp32(TorchDispatchMode):
    """Without AVX512-BF16 some bf16 GEMMs take a naive path (one [T, V] @ [V, H] of the lm_head
    backward took 89 s, 150x its fp32 time). This runs them in fp32 and rounds the result. It sits
    below MemTracker, so the tracker sees the bf16 result only, as it would from the native kernel
    (whose workspace it never sees either): the bytes measured are unchanged."""
    OPS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
           torch.ops.aten.baddbmm.default}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        low = next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)
        if func in self.OPS and low in (torch.bfloat16, torch.float16):
            up = tree_map_only(torch.Tensor, lambda t: t.float(), args)
            return func(*up, **kwargs).to(low)
        return func(*args, **kwargs)


def build_model(model_config: dict, dtype: torch.dtype, *, attn_implementation: str = "sdpa", seed: int = 0):
    config = LlamaConfig(**model_config)
    config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def _batch(model, micro_batch: int, prompt_len: int, completion_len: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, model.config.vocab_size, (micro_batch, prompt_len + completion_len), generator=gen)
    return input_ids, torch.ones_like(input_ids)  # no padding: every position is a real token


def _snapshot(tracker: MemTracker, kind: str) -> dict[str, int]:
    snap = tracker.get_tracker_snapshot(kind)
    merged: dict[str, int] = {}
    for per_device in snap.values():  # one device (cpu) here
        for key, value in per_device.items():
            name = getattr(key, "value", key)
            merged[name] = merged.get(name, 0) + value
    return merged


def _trunk(model, input_ids, attention_mask, grad: bool) -> torch.Tensor:
    with torch.set_grad_enabled(grad), _Bf16GemmInFp32():
        return model.model(input_ids=input_ids, attention_mask=attention_mask,
                           position_ids=position_ids_for(attention_mask), use_cache=False).last_hidden_state


def _logits_peak_on(model, hidden, input_ids, attention_mask, num_prompt_tokens: int, temperature: float,
                    grad: bool) -> int:
    tracker = MemTracker()
    # Seen through the lm_head's views it would count as new; it is the trunk's, so it is "Other".
    tracker.track_external(hidden, input_ids, attention_mask)

    def head_only(**_):  # what LlamaForCausalLM.forward does after its trunk
        return CausalLMOutputWithPast(logits=model.lm_head(hidden))

    with torch.set_grad_enabled(grad), _Bf16GemmInFp32(), tracker:
        logp = token_logprobs(head_only, input_ids, attention_mask, num_prompt_tokens, temperature)
    del logp
    peak = _snapshot(tracker, "peak")
    return peak["Total"] - peak["Parameter"] - peak["Buffer"] - peak["Gradient"] - peak["Other"]


def logits_peak_bytes(model, input_ids, attention_mask, num_prompt_tokens: int, temperature: float,
                      grad: bool) -> int:
    """Peak live bytes of token_logprobs from the lm_head on: logits [B, T, V], the sliced and
    temperature-scaled copy, the fp32 upcast, log_softmax and what autograd keeps of them."""
    hidden = _trunk(model, input_ids, attention_mask, grad)
    return _logits_peak_on(model, hidden, input_ids, attention_mask, num_prompt_tokens, temperature, grad)


def _params_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def measure_logprob_no_grad_on(model, micro_batch: int, prompt_len: int, completion_len: int, *,
                               temperature: float = 1.0, seed: int = 0) -> MeasuredLogprob:
    model.eval()
    input_ids, attention_mask = _batch(model, micro_batch, prompt_len, completion_len, seed)
    tracker = MemTracker()
    tracker.track_external(model, input_ids, attention_mask)
    with torch.no_grad(), _Bf16GemmInFp32(), tracker:
        ref_logp = token_logprobs(model, input_ids, attention_mask, prompt_len, temperature)
    del ref_logp
    peak = _snapshot(tracker, "peak")
    return MeasuredLogprob(
        params_bytes=_params_bytes(model), peak_total_bytes=peak["Total"],
        peak_activations_bytes=peak["Total"] - peak["Parameter"] - peak["Buffer"],
        logits_peak_bytes=logits_peak_bytes(model, input_ids, attention_mask, prompt_len, temperature, grad=False))


def measure_logprob_no_grad(model_config: dict, micro_batch: int, prompt_len: int, completion_len: int,
                            dtype: torch.dtype, **options) -> MeasuredLogprob:
    """The reference / old-policy pass: token_logprobs under no_grad, model in eval mode."""
    model = build_model(model_config, dtype, attn_implementation=options.pop("attn_implementation", "sdpa"))
    return measure_logprob_no_grad_on(model, micro_batch, prompt_len, completion_len, **options)


def measure_train_step_on(model, micro_batch: int, prompt_len: int, completion_len: int,
                          gradient_checkpointing: bool, *, temperature: float = 1.0, beta: float = 0.04,
                          epsilon: float = 0.2, seed: int = 0, accumulating: bool = False) -> MeasuredStep:
    """One micro-step measured. `accumulating`: a micro-step of gradient accumulation after the first
    (every .grad already exists, as in GRPO's accumulation and DeepSpeed's persistent gradient buffers),
    so that the peak above parameters and gradients is the activations' and logits' own."""
    model.train()
    if gradient_checkpointing:
        model.activation_checkpointing_enable()  # non-reentrant, as transformers and TRL default
    input_ids, attention_mask = _batch(model, micro_batch, prompt_len, completion_len, seed)
    # Stands for the reference model's output ([B, C] fp32, its values do not move memory); the
    # reference pass itself is measure_logprob_no_grad's.
    ref_logp = -torch.rand(micro_batch, completion_len, generator=torch.Generator().manual_seed(seed))
    advantages = torch.randn(micro_batch, generator=torch.Generator().manual_seed(seed))
    completion_mask = torch.ones(micro_batch, completion_len)

    if accumulating:  # the first micro-step, untracked: it leaves every parameter's .grad allocated
        with _Bf16GemmInFp32():
            first, _ = grpo_loss(token_logprobs(model, input_ids, attention_mask, prompt_len, temperature),
                                 ref_logp, advantages, completion_mask, beta, epsilon)
            first.backward()
            del first
    tracker = MemTracker()
    tracker.track_external(model, input_ids, attention_mask, ref_logp, advantages, completion_mask)
    with _Bf16GemmInFp32(), tracker:  # the reference trainer's forward, loss and backward phases
        logp = token_logprobs(model, input_ids, attention_mask, prompt_len, temperature)
        loss, _ = grpo_loss(logp, ref_logp, advantages, completion_mask, beta, epsilon)
        forward_peak, forward_end = _snapshot(tracker, "peak"), _snapshot(tracker, "current")
        loss.backward()
        del logp, loss
    peak, after = _snapshot(tracker, "peak"), _snapshot(tracker, "current")
    grads_bytes = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    result = MeasuredStep(
        params_bytes=_params_bytes(model), grads_bytes=grads_bytes,
        peak_total_bytes=peak["Total"],
        peak_activations_bytes=peak["Total"] - peak["Parameter"] - peak["Gradient"] - peak["Optstate"],
        forward_peak_total_bytes=forward_peak["Total"],
        saved_after_forward_bytes=forward_end["Total"] - forward_end["Parameter"] - forward_end["Gradient"],
        grads_at_peak_bytes=peak["Gradient"],
        peak_in="forward" if peak["Total"] == forward_peak["Total"] else "backward",
        peak_by_category_bytes=peak,
        logits_peak_bytes=0, logits_peak_no_grad_bytes=0)
    assert after["Gradient"] == grads_bytes, (after, grads_bytes)  # the tracker saw every gradient
    model.zero_grad(set_to_none=True)
    hidden = _trunk(model, input_ids, attention_mask, grad=True)
    logits = (_logits_peak_on(model, hidden, input_ids, attention_mask, prompt_len, temperature, grad)
              for grad in (True, False))
    return replace(result, logits_peak_bytes=next(logits), logits_peak_no_grad_bytes=next(logits))


def measure_train_step(model_config: dict, micro_batch: int, prompt_len: int, completion_len: int,
                       gradient_checkpointing: bool, dtype: torch.dtype, **options) -> MeasuredStep:
    """One micro-step of the reference trainer on a random-init LlamaForCausalLM(model_config)."""
    model = build_model(model_config, dtype, attn_implementation=options.pop("attn_implementation", "sdpa"))
    return measure_train_step_on(model, micro_batch, prompt_len, completion_len, gradient_checkpointing,
                                 **options)


# ---------------------------------------------------------------- the grid: python -m tests.plan.measure
@dataclass(frozen=True)
class Setting:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_key_value_heads: int  # heads are hidden_size / 64
    micro_batch: int
    prompt_len: int
    completion_len: int
    gradient_checkpointing: bool
    dtype: str  # "float32" or "bfloat16"
    tie_word_embeddings: bool = False

    def model_config(self) -> dict:
        return dict(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                    intermediate_size=int(self.hidden_size * 2.75), num_hidden_layers=self.num_hidden_layers,
                    num_attention_heads=self.hidden_size // 64, num_key_value_heads=self.num_key_value_heads,
                    tie_word_embeddings=self.tie_word_embeddings)


GRID = (
    Setting(32000, 256, 2, 4, 1, 64, 128, False, "float32"),
    Setting(32000, 256, 4, 1, 2, 128, 256, False, "float32"),
    Setting(32000, 512, 4, 2, 2, 128, 512, False, "float32"),
    Setting(32000, 512, 4, 2, 2, 128, 512, True, "float32"),
    Setting(32000, 768, 6, 3, 2, 64, 192, False, "bfloat16"),
    Setting(32000, 768, 6, 3, 2, 64, 192, True, "bfloat16"),
    Setting(32000, 1024, 2, 4, 1, 128, 256, True, "bfloat16"),
    Setting(32000, 512, 2, 8, 1, 64, 1024, False, "bfloat16"),
    Setting(151936, 256, 2, 1, 1, 64, 256, False, "bfloat16"),
    Setting(151936, 256, 2, 4, 4, 64, 64, False, "bfloat16", tie_word_embeddings=True),
    Setting(151936, 512, 2, 2, 2, 128, 128, True, "float32"),
    Setting(151936, 256, 2, 4, 1, 128, 512, True, "bfloat16"),
)

COLUMNS = ("V", "H", "L", "kv", "B", "P", "C", "ckpt", "dtype", "params", "grads", "peak", "grads@pk",
           "peak_act", "saved", "fwd_peak", "logits", "logits_ng", "ref_act", "s")

LEGEND = """MiB of live tensor bytes (MemTracker). V vocab, H hidden, L layers, kv KV/attention heads (head_dim 64),
B micro-batch, P prompt, C completion tokens (no padding), ckpt gradient checkpointing.
peak: the step's highest point (forward + GRPO loss + backward; an F after grads@pk marks a forward peak);
grads@pk: parameter gradients already written at it; peak_act = peak - params - grads@pk;
saved: live above params once the loss is computed; fwd_peak: highest point before backward;
logits / logits_ng: token_logprobs from the lm_head on, with grad / under no_grad;
ref_act: a whole no_grad token_logprobs pass (reference / old policy) above params; s: wall seconds."""


def measure_setting(setting: Setting) -> tuple[MeasuredStep, MeasuredLogprob]:
    model = build_model(setting.model_config(), getattr(torch, setting.dtype))
    args = (setting.micro_batch, setting.prompt_len, setting.completion_len)
    reference = measure_logprob_no_grad_on(model, *args)  # before checkpointing is switched on
    return measure_train_step_on(model, *args, setting.gradient_checkpointing), reference


def _row(setting: Setting, step: MeasuredStep, ref: MeasuredLogprob, seconds: float) -> list[str]:
    def mib(n: int) -> str:
        return f"{n / MIB:.1f}"
    return [str(setting.vocab_size), str(setting.hidden_size), str(setting.num_hidden_layers),
            f"{setting.num_key_value_heads}/{setting.hidden_size // 64}", str(setting.micro_batch),
            str(setting.prompt_len), str(setting.completion_len), "on" if setting.gradient_checkpointing else "off",
            setting.dtype.replace("float", "fp").replace("bfloat", "bf") + ("+tied" if setting.tie_word_embeddings else ""),
            mib(step.params_bytes), mib(step.grads_bytes), mib(step.peak_total_bytes),
            mib(step.grads_at_peak_bytes) + ("" if step.peak_in == "backward" else "F"),
            mib(step.peak_activations_bytes), mib(step.saved_after_forward_bytes),
            mib(step.forward_peak_total_bytes), mib(step.logits_peak_bytes), mib(step.logits_peak_no_grad_bytes), mib(ref.peak_activations_bytes),
            f"{seconds:.1f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write every measurement, in bytes, to this file")
    args = parser.parse_args(argv)
    widths = [max(len(c), 8) for c in COLUMNS]
    print(" ".join(c.rjust(w) for c, w in zip(COLUMNS, widths, strict=True)))
    records = []
    for setting in GRID:
        start = time.perf_counter()
        step, ref = measure_setting(setting)
        seconds = time.perf_counter() - start
        print(" ".join(v.rjust(w) for v, w in zip(_row(setting, step, ref, seconds), widths, strict=True)), flush=True)
        records.append({"setting": asdict(setting), "train_step": asdict(step), "logprob_no_grad": asdict(ref)})
    print(LEGEND)
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
