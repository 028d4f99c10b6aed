"""A real TRL GRPOTrainer job whose reward function blocks on rank 1 (the case of issue 23).

The tiny random Llama, the character tokenizer and the prompts are those of
tests/integrations/trl_grpo.py (nothing is downloaded); the reward is the share of digits, but on
rank 1, from its third call on, it waits for a grader that never answers. Recorded with:

    grpo-doctor watch --run-dir RUN --hang-floor 5 --hang-factor 3 --second-look 1 --on-hang kill -- \
        python -m accelerate.commands.launch --multi_gpu --num_processes 2 --num_machines 1 \
        --mixed_precision no --dynamo_backend no --main_process_port 0 \
        tests/data/trl_reward_hang/train_grpo.py --run-dir RUN --out-dir OUT
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integrations"))
from trl_grpo import build_char_tokenizer, build_tiny_model  # noqa: E402, I001

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_doctor.rank.integrations.trl import instrument  # noqa: E402

CALLS = {"n": 0}
HANG_MARK = os.environ.get("HANG_MARK")  # a file the hung rank writes the time it started hanging to


def reward(completions, **kwargs) -> list[float]:
    CALLS["n"] += 1
    if os.environ.get("RANK") == "1" and CALLS["n"] >= 3:
        if HANG_MARK:
            Path(HANG_MARK).write_text(repr(time.time()))
        while True:  # a grader that never answers
            time.sleep(1.0)
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--without-trl-lines", action="store_true", help="leave out grpo-doctor's two TRL lines")
    args = p.parse_args()
    tokenizer = build_char_tokenizer()
    prompts = [f"{a}+{b}=" for a in range(1, 9) for b in range(1, 9)]
    config = GRPOConfig(
        output_dir=args.out_dir, max_steps=6, per_device_train_batch_size=4, num_generations=8,
        max_completion_length=12, logging_steps=1, report_to="none", use_cpu=True, bf16=False, fp16=False,
        save_strategy="no", seed=0, use_vllm=False, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=build_tiny_model(tokenizer, 0), processing_class=tokenizer, reward_funcs=[reward],
                          args=config, train_dataset=Dataset.from_dict({"prompt": prompts}))
    if not args.without_trl_lines:
        trainer = instrument(trainer, run_dir=args.run_dir)
    trainer.train()


if __name__ == "__main__":
    main()
