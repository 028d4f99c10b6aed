"""The policy: a tiny Llama and a character tokenizer built in code, or a local checkpoint.

Nothing is downloaded. The tiny model is a real `LlamaForCausalLM` and the tokenizer a real
`PreTrainedTokenizerFast`, so `generate`, `save_pretrained`, vLLM and TRL all accept them.
Weights come from a seeded initialisation, identical on every rank.

Typical use:
    tokenizer = build_char_tokenizer()
    policy = build_tiny_model(tokenizer, seed=0)
    save_model(policy, tokenizer, "/tmp/tiny")          # vLLM loads models from a path
    policy, tokenizer = load_model("/tmp/tiny")
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from .config import UsageError

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
CHARS = "0123456789+-*= "


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character of CHARS, plus pad/bos/eos; prompts are left-padded for generation."""
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, *CHARS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()  # join characters back without the spaces WordLevel would insert
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS, padding_side="left"
    )


def build_tiny_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        # head_dim 64: vLLM's attention kernels do not take every head size; 64 they all do.
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    # Seeded with the run seed, not the rank: every rank must start from the same weights.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def load_model(path: str | os.PathLike):
    """A local checkpoint (model + tokenizer); UsageError when `path` is not one."""
    path = Path(path)
    if not (path / "config.json").is_file():
        why = "does not exist" if not path.exists() else "has no config.json"
        raise UsageError(f"--model {str(path)!r} {why}",
                         "pass a local Hugging Face checkpoint directory (config.json, weights, tokenizer), "
                         "or --model tiny")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def build_policy_and_reference(name: str, seed: int):
    """(policy, frozen reference copy, tokenizer) for --model tiny or a checkpoint path."""
    if name == "tiny":
        tokenizer = build_char_tokenizer()
        policy, reference = build_tiny_model(tokenizer, seed), build_tiny_model(tokenizer, seed)
    else:
        policy, tokenizer = load_model(name)
        reference, _ = load_model(name)
    reference.requires_grad_(False)
    reference.eval()
    return policy, reference, tokenizer


def save_model(model, tokenizer, directory: str | os.PathLike) -> Path:
    """Write a checkpoint loadable by `load_model`, AutoModelForCausalLM and vLLM."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
