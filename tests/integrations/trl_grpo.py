"""A real TRL GRPO training script on CPU, instrumented with grpo-doctor's two lines.

A tiny random Llama and a character tokenizer are built here (nothing is downloaded); the
reward is a rule (the share of digits in the completion). One process, or several under
`accelerate launch` or torchrun (gloo). `--same-seed` reseeds every process alike after the trainer is built, undoing
TRL's per-process seed (`set_seed(seed, device_specific=True)`): the copies of a prompt that
TRL spreads over the processes then come out identical, as in case 2 of CASES.md. `--plain` leaves
the two lines out (the same training without grpo-doctor), `--log-completions` has TRL write each
step's completions, rewards and advantages (out-dir/completions/*.parquet), `--log-history` writes
TRL's logged metrics as JSON, `--report-to tensorboard` has the Trainer's own TensorBoard callback
write them (out-dir/runs/).

Typical use:
    python tests/integrations/trl_grpo.py --run-dir /tmp/run --out-dir /tmp/out
    accelerate launch --multi_gpu --num_processes 2 tests/integrations/trl_grpo.py \
        --run-dir /tmp/run --out-dir /tmp/out --batch 4 --num-generations 8 --same-seed
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, set_seed
from trl import GRPOConfig, GRPOTrainer

from grpo_doctor.rank.integrations.trl import instrument

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789+-*= "
MAX_COMPLETION_LENGTH = 12
TEMPERATURE = 1.0


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<bos>", "<eos>", *CHARS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   padding_side="left")


def build_tiny_model(tokenizer, seed: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    # Seeded alike in every process: all ranks must start from the same weights.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def digit_share(completions, **kwargs) -> list[float]:
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def constant_reward(completions, **kwargs) -> list[float]:
    """A reward function that ignores its input (the case of issue 25): every group's std is 0."""
    return [1.0 for _ in completions]


def slowed(reward, delay_s: float):
    """`reward` taking `delay_s` a call, as a reward model or a verifier does."""
    def call(completions, **kwargs) -> list[float]:
        time.sleep(delay_s)
        return reward(completions, **kwargs)
    call.__name__ = reward.__name__
    return call


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="per_device_train_batch_size")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--same-seed", action="store_true", help="reseed every process alike after TRL seeded them apart")
    p.add_argument("--plain", action="store_true", help="without grpo-doctor: no instrument()")
    p.add_argument("--log-completions", action="store_true", help="TRL's completions parquet files in out-dir")
    p.add_argument("--log-history", default=None, help="write trainer.state.log_history here (JSON)")
    p.add_argument("--report-to", default="none", help="the Trainer's report_to (none, tensorboard)")
    p.add_argument("--reward", choices=("digits", "constant"), default="digits",
                   help="the share of digits, or 1.0 whatever the completion")
    p.add_argument("--reward-delay", type=float, default=0.0, help="seconds each reward call takes")
    args = p.parse_args(argv)

    tokenizer = build_char_tokenizer()
    prompts = [f"{a}+{b}=" for a in range(1, 9) for b in range(1, 9)]
    config = GRPOConfig(
        output_dir=args.out_dir, max_steps=args.steps, per_device_train_batch_size=args.batch,
        num_generations=args.num_generations, max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=TEMPERATURE, logging_steps=1, report_to=args.report_to, use_cpu=True, bf16=False, fp16=False,
        save_strategy="no", seed=args.seed, use_vllm=False, disable_tqdm=True, log_completions=args.log_completions,
    )
    reward = constant_reward if args.reward == "constant" else digit_share
    reward = slowed(reward, args.reward_delay) if args.reward_delay else reward
    trainer = GRPOTrainer(
        model=build_tiny_model(tokenizer, args.seed), processing_class=tokenizer, reward_funcs=[reward],
        args=config, train_dataset=Dataset.from_dict({"prompt": prompts}),
    )
    if not args.plain:
        trainer = instrument(trainer, run_dir=args.run_dir, seed_audit_every=1)
    if args.same_seed:
        set_seed(args.seed)  # the mistake of case 2: one seed for every sampling process
    trainer.train()
    if args.log_history:
        with open(args.log_history, "w") as f:
            json.dump(trainer.state.log_history, f)
    # Without this, a gloo worker thread still finishing the last collective at interpreter exit can
    # abort the process ("terminate called without an active exception", SIGABRT): torch's own teardown
    # race, reproduced without grpo-doctor (issue 15).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
