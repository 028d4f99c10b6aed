"""How trl_probe was made: a real TRL GRPOTrainer run on CPU (TRL 1.16), instrumented by grpo-doctor.

Like make_trl_fixtures.py (a tiny random Llama, a character tokenizer, one process,
`log_completions=True`), but with two reward functions, one of which returns None for the
samples it does not score, and `grpo_doctor.rank.integrations.trl.instrument`, which adds the
zero-weight probe `grpo_doctor_rollouts` (a column of NaN in the completions table). Only
checkpoint-N/trainer_state.json and completions/completions_*.parquet were kept.

    python make_trl_probe_fixture.py OUT 3      # -> trl_probe
"""
import sys

from make_trl_fixtures import tiny_model  # run from this directory, as the docstring says
from trl import GRPOConfig, GRPOTrainer

from grpo_doctor.rank.integrations.trl import instrument


def main(out: str, steps: int) -> None:
    model_dir, tokenizer, data = tiny_model(out)

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
