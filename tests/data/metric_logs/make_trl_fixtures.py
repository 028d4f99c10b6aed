"""How the trl_* fixtures were made: a real TRL GRPOTrainer run on CPU (TRL 1.16, transformers 5.x).

A tiny random Llama and a character tokenizer built here; one process; `log_completions=True`.
Only checkpoint-N/trainer_state.json and a few completions/completions_*.parquet were kept.

    python make_trl_fixtures.py OUT healthy 12 0.04     # -> trl_healthy
    python make_trl_fixtures.py OUT constant 10 0.04    # -> trl_constant_reward (reward always 1.0)
    python make_trl_fixtures.py OUT healthy 8 0.0       # -> trl_beta0 (TRL logs no kl when beta = 0)
"""
import string
import sys

import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer


def tiny_model(out: str) -> tuple[str, PreTrainedTokenizerFast, Dataset]:
    """A tiny random Llama saved beside OUT (TRL loads the reference model by path), its character
    tokenizer, and a dataset of sums with their answers."""
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **{c: i + 3 for i, c in enumerate(string.digits + "+-*= ")}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0,
                         eos_token_id=1, bos_token_id=2)
    torch.manual_seed(0)
    model_dir = out + "_model"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    data = Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(8) for b in range(8)])
    return model_dir, tokenizer, data


def main(out: str, mode: str, steps: int, beta: float) -> None:
    model_dir, tokenizer, data = tiny_model(out)

    def reward(completions, answer, **kwargs):
        if mode == "constant":
            return [1.0] * len(completions)
        return [1.0 if c.strip() == a else 0.1 if c.strip().isdigit() else 0.0 for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=4, max_completion_length=6,
                      max_steps=steps, logging_steps=1, learning_rate=1e-3, beta=beta, report_to=[],
                      save_strategy="steps", save_steps=steps, log_completions=True, use_cpu=True, seed=0, bf16=False)
    GRPOTrainer(model=model_dir, reward_funcs=[reward], args=args, train_dataset=data,
                processing_class=tokenizer).train()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
