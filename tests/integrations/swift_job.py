"""What a real `swift rlhf --rlhf_type grpo` run on CPU needs, built here: a tiny random Llama, a
character tokenizer over printable ASCII (ms-swift's templates add a system prompt and newlines),
and a dataset of sums. Run with the Python of the ms-swift environment (.venv-swift).

Typical use:
    .venv-swift/bin/python tests/integrations/swift_job.py /tmp/job   # writes /tmp/job/{model,data.jsonl}
"""
from __future__ import annotations

import json
import string
import sys
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *sorted(set(string.printable))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", padding_side="left")


def build_job(directory: Path) -> None:
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, architectures=["LlamaForCausalLM"],
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "model")
    rows = [{"messages": [{"role": "user", "content": f"{a}+{b}="}], "solution": str(a + b)}
            for a in range(1, 9) for b in range(1, 9)]
    (directory / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    build_job(Path(sys.argv[1]))
