"""How trl_probe was made: a real TRL GRPOTrainer run on CPU (TRL 1.16), instrumented by grpo-doctor.

Like make_trl_fixtures.py (a tiny random Llama, a character tokenizer, one process,
`log_completions=True`), but with two reward functions, one of which returns None for the
samples it does not score, and `grpo_doctor.rank.integrations.trl.instrument`, which adds the
zero-weight probe `grpo_doctor_rollouts` (a column of NaN in the completions table). Only
checkpoint-N/trainer_state.json and completions/completions_*.parquet were kept.

    python make_trl_probe_fixture.py OUT 3      # -> trl_probe
"""
import string
import sys

import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from grpo_doctor.rank.integrations.trl import instrument


def main(out: str, steps: int) -> None:
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **{c: i + 3 for i, c in enumerate(string.digits + "+-*= ")}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0,
                         eos_token_id=1, bos_token_id=2)
    torch.manual_seed(0)
    model_dir = out + "_model"  # TRL loads the reference model by path
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    data = Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(8) for b in range(8)])

    def accuracy(completions, answer, **kwargs):
        return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer, strict=True)]

    def digits_only(completions, **kwargs):
        # None: not scored (an empty completion), which TRL reads as NaN
        return [None if not c.strip() else 0.5 if c.strip().isdigit() else 0.0 for c in completions]

    args = GRPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=4, max_completion_length=6,
                      max_steps=steps, logging_steps=1, learning_rate=1e-3, beta=0.04, report_to=[],
                      save_strategy="steps", save_steps=steps, log_completions=True, use_cpu=True, seed=0, bf16=False)
    trainer = GRPOTrainer(model=model_dir, reward_funcs=[accuracy, digits_only], args=args, train_dataset=data,
                          processing_class=tokenizer)
    instrument(trainer, run_dir=out + "_run")
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
