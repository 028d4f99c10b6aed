"""Rollouts: sample completions for this rank's prompts with HF `generate` or colocated vLLM.

Both return `Completions`: left-padded prompt ids, completion ids padded after the first
EOS, and the mask the loss uses (1 up to and including that EOS).

Both engines hold their own copy of the weights, pushed from the policy before each rollout
(`sync_weights`), and expose it (`engine_weights`, `name_map`) for grpo-doctor's weight-sync
check: `HFRollout` a rollout copy of the policy for `generate` (which also returns the
log-probabilities it sampled with, for the trainer's `logprob_diff`), `VLLMRollout` the engine's model.

The vLLM path follows TRL's GRPOTrainer colocate mode: one `vllm.LLM` per rank in the
training process (`distributed_executor_backend="external_launcher"`), weights pushed from
the policy with the model's own `load_weights` before each rollout. vllm is imported only here.

Typical use:
    with engine.generation_model() as model:
        out = generate_hf(model, tokenizer, ["12+7=", "12+7="], cfg, device)
    print(out.texts, out.completion_mask.sum(1))
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import TrainConfig, UsageError

# Arithmetic prompts ("<bos>12*17=") are well under this with a character or BPE tokenizer.
_MAX_PROMPT_TOKENS = 16


@dataclass
class Completions:
    prompt_ids: torch.Tensor  # [B, P], left padded
    prompt_mask: torch.Tensor  # [B, P]
    completion_ids: torch.Tensor  # [B, C], pad after the first EOS
    completion_mask: torch.Tensor  # [B, C], 1 up to and including the first EOS
    texts: list[str]  # decoded without special tokens
    ended_with_eos: list[bool]
    logprobs: torch.Tensor | None = None  # [B, C]: the rollout engine's log-probability of each completion token

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


def suppressed_token_ids(tokenizer) -> list[int]:
    """pad and bos are never a sensible next token; eos must stay samplable even when pad == eos."""
    ids = {tokenizer.pad_token_id, tokenizer.bos_token_id} - {tokenizer.eos_token_id, None}
    return sorted(ids)


def finish_completions(prompt_ids, prompt_mask, completion_ids, tokenizer, logprobs=None) -> Completions:
    eos = completion_ids == tokenizer.eos_token_id
    has_eos = eos.any(dim=1)
    length = torch.where(has_eos, eos.int().argmax(dim=1) + 1, completion_ids.shape[1])
    positions = torch.arange(completion_ids.shape[1], device=completion_ids.device)
    mask = (positions.unsqueeze(0) < length.unsqueeze(1)).long()
    completion_ids = completion_ids.masked_fill(mask == 0, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return Completions(prompt_ids, prompt_mask, completion_ids, mask, texts, has_eos.tolist(), logprobs)


def generate_hf(model, tokenizer, prompts: list[str], cfg: TrainConfig, device) -> Completions:
    enc = tokenizer(prompts, padding=True, return_tensors="pt").to(device)
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=cfg.temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=cfg.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            suppress_tokens=suppressed_token_ids(tokenizer) or None,
            # A policy whose weights went NaN keeps sampling (uniformly) instead of dying in
            # torch.multinomial, so a NaN loss shows up step after step, as in real runs.
            remove_invalid_values=True,
            return_dict_in_generate=True,
            output_logits=True,  # raw, before the sampler's processors: as the trainer computes them
        )
    completion_ids = out.sequences[:, enc.input_ids.shape[1] :]
    # [B, C, V], the size of the training forward's logits: log-probabilities at the sampler's temperature.
    logits = torch.stack(out.logits, dim=1).float() / cfg.temperature
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    return finish_completions(enc.input_ids, enc.attention_mask, completion_ids, tokenizer, logprobs)


class HFRollout:
    """HF `generate` from a rollout copy of the policy, made before the training engine wraps it (ZeRO-3
    partitions the policy): the weights are pushed into it before each rollout, as into a colocated vLLM,
    so a push that goes wrong is real here too. Costs one more copy of the weights on the device."""

    engine_name = "hf-copy"
    name_map = None  # the copy's names are the policy's

    def __init__(self, policy, tokenizer, cfg: TrainConfig, device) -> None:
        self.model = copy.deepcopy(policy).to(device).requires_grad_(False)
        self.tokenizer = tokenizer
        self.cfg = cfg

    def sync_weights(self, named_params, skip: bool = False) -> None:
        """Copy the policy's weights into the copy; `skip` walks them and copies nothing (a sync that
        silently skips; every rank still walks the list: ZeRO-3 gathers)."""
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in named_params:
                if not skip:
                    params[name].copy_(tensor)

    def engine_weights(self):
        return self.model.named_parameters()

    def generate(self, prompts: list[str], device) -> Completions:
        return generate_hf(self.model, self.tokenizer, prompts, self.cfg, device)


class VLLMRollout:
    """A colocated vLLM engine on this rank's GPU, seeded per sampling rank."""

    engine_name = "vllm-colocate"

    def __init__(self, model_dir: Path, tokenizer, cfg: TrainConfig, seed: int, name_map=None) -> None:
        self.name_map = name_map  # policy names -> vLLM's fused ones (rank/weight_sync.py: vllm_name_map)
        if not torch.cuda.is_available():
            raise UsageError("vLLM rollouts need a CUDA GPU and this machine has none", "use --rollout hf")
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise UsageError(f"--rollout vllm: vllm cannot be imported ({exc})",
                             "pip install 'grpo-doctor[vllm]', or use --rollout hf") from None
        self.tokenizer = tokenizer
        # As TRL's ensure_master_addr_port: vLLM's external launcher reads these even when the
        # process group exists already; a lone process (no torchrun) has none.
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        # The engine core must live in this process for its model (and load_weights) to be reachable.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.llm = LLM(
            model=str(model_dir),
            tensor_parallel_size=1,
            gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
            distributed_executor_backend="external_launcher",
            seed=seed,
            dtype="bfloat16",  # vLLM's attention kernels do not take float32
            max_model_len=_MAX_PROMPT_TOKENS + cfg.max_new_tokens,
            enforce_eager=True,  # CUDA graphs would take longer to capture than this model runs
            # Token ids in, token ids out: vLLM never needs the tokenizer, whose saved format
            # depends on the transformers version that wrote it.
            skip_tokenizer_init=True,
        )
        vocab = range(len(tokenizer))
        banned = set(suppressed_token_ids(tokenizer))
        self.sampling = SamplingParams(
            n=1,
            temperature=cfg.temperature,
            max_tokens=cfg.max_new_tokens,
            stop_token_ids=[tokenizer.eos_token_id],
            allowed_token_ids=[i for i in vocab if i not in banned],
            detokenize=False,
        )

    def sync_weights(self, named_params, skip: bool = False) -> None:
        """Copy the policy's current weights into the engine (every rank must call: ZeRO-3 gathers);
        `skip` walks them and loads nothing (a sync that silently skips)."""
        for name, tensor in named_params:
            if not skip:
                self._load_weights([(name, tensor)])
        self.llm.reset_prefix_cache()

    def engine_weights(self):
        """The engine model's (name, tensor) pairs, read in this process (the weight-sync check)."""
        try:
            return self.llm.llm_engine.model_executor.driver_worker.model_runner.model.named_parameters()
        except AttributeError:
            if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":
                raise RuntimeError("the vLLM engine core runs in another process: its weights cannot be read here") \
                    from None
            # Newer vLLM: the worker is in this process; apply_model hands back its tensors, not copies.
            return [pair for named in self.llm.apply_model(lambda m: list(m.named_parameters())) for pair in named]

    def _load_weights(self, weights) -> None:
        try:
            # TRL's colocate path; vLLM keeps the executor in-process with the external launcher.
            model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        except AttributeError:
            # Newer vLLM: run the load inside the worker through the public API.
            self.llm.apply_model(lambda m: m.load_weights(weights))
            return
        model.load_weights(weights)

    def generate(self, prompts: list[str], device) -> Completions:
        enc = self.tokenizer(prompts, padding=True, return_tensors="pt")
        requests = [{"prompt_token_ids": self.tokenizer(p).input_ids} for p in prompts]
        outputs = self.llm.generate(requests, sampling_params=self.sampling, use_tqdm=False)
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        rows = []
        for out in outputs:
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            if sample.finish_reason == "stop" and (not ids or ids[-1] != eos):
                ids.append(eos)  # some vLLM versions drop the EOS that stopped the sequence
            rows.append(ids)
        width = max(len(r) for r in rows)
        completion_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
        return finish_completions(enc.input_ids.to(device), enc.attention_mask.to(device), completion_ids,
                                  self.tokenizer)
