"""The plan's activations and logits against the reference trainer's measured peaks on this CPU.

Each setting is a real micro-step of the reference trainer (grpo_doctor_trainer's token_logprobs and
grpo_loss, forward and backward) on a random-init Llama, measured by torch's MemTracker
(tests/plan/measure.py). The step measured is an accumulation step after the first, so every
gradient already exists (as under gradient accumulation and DeepSpeed's persistent buffers): what
the peak holds beyond parameters and gradients is the activations' and the logits'. The plan (the
reference trainer's job: sliced-fp32 log-probs) must come within 20 % of it, and of the reference /
old-policy pass (no gradients). The grid spans fp32 and bf16, gradient checkpointing on and off,
vocabularies of 32,000 and 151,936, micro-batches of 1-4 and completions of 64-1,024 tokens;
docs/benchmarks.md tables the ratios (`python -m tests.plan.test_measured_peaks`).

Typical use:
    .venv/bin/python -m pytest -q tests/plan/test_measured_peaks.py
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from grpo_doctor.plan.job import SLICED_FP32, Job  # noqa: E402
from grpo_doctor.plan.model_shape import shape_from_config  # noqa: E402
from grpo_doctor.plan.trainer_memory import activation_bytes, inference_activation_bytes, logits_bytes  # noqa: E402
from tests.plan.measure import GRID, Setting, build_model, measure_logprob_no_grad_on, measure_train_step_on  # noqa: E402

TOLERANCE = 0.20
# Four of the grid's settings in the suite (about 40 s on 2 cores): checkpointing on and off, fp32 and
# bf16, a long completion, a large vocabulary; `python -m tests.plan.test_measured_peaks` runs all twelve.
IN_SUITE = (GRID[3], GRID[4], GRID[7], GRID[10])


def planned(setting: Setting) -> tuple[Job, object]:
    config = {**setting.model_config(), "model_type": "llama"}
    shape = shape_from_config(config, "measured", "tests/plan/measure.py")
    job = Job(framework="grpo-doctor-trainer", model="measured", gpu_memory_bytes=1, micro_batch=setting.micro_batch,
              max_prompt_len=setting.prompt_len, max_completion_len=setting.completion_len,
              gradient_checkpointing=setting.gradient_checkpointing,
              dtype_bytes=4 if setting.dtype == "float32" else 2, logprob_style=SLICED_FP32)
    return job, shape


def ratios(setting: Setting) -> dict[str, float]:
    """Planned / measured for the training step's and the reference pass's peaks above the model states."""
    model = build_model(setting.model_config(), getattr(torch, setting.dtype))
    args = (setting.micro_batch, setting.prompt_len, setting.completion_len)
    reference = measure_logprob_no_grad_on(model, *args)
    step = measure_train_step_on(model, *args, setting.gradient_checkpointing, accumulating=True)
    job, shape = planned(setting)
    training = activation_bytes(shape, job) + logits_bytes(shape, job, training=True)
    no_grad = inference_activation_bytes(shape, job) + logits_bytes(shape, job, training=False)
    return {"training": training / step.peak_activations_bytes,
            "reference pass": no_grad / reference.peak_activations_bytes,
            "logits (no grad)": logits_bytes(shape, job, training=False) / step.logits_peak_no_grad_bytes}


@pytest.mark.parametrize("setting", IN_SUITE, ids=lambda s: f"V{s.vocab_size}-H{s.hidden_size}-L{s.num_hidden_layers}"
                         f"-B{s.micro_batch}-C{s.completion_len}-{'ckpt' if s.gradient_checkpointing else 'full'}-{s.dtype}")
def test_planned_activations_and_logits_come_within_20_percent_of_the_measured_peaks(setting):
    for what, ratio in ratios(setting).items():
        assert abs(ratio - 1) <= TOLERANCE, (what, round(ratio, 3))


if __name__ == "__main__":
    print("| V | H | L | B | prompt | completion | ckpt | dtype | training | reference pass | logits (no grad) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in GRID:
        r = ratios(s)
        print(f"| {s.vocab_size} | {s.hidden_size} | {s.num_hidden_layers} | {s.micro_batch} | {s.prompt_len} | "
              f"{s.completion_len} | {'on' if s.gradient_checkpointing else 'off'} | {s.dtype} | "
              f"{r['training']:.2f} | {r['reference pass']:.2f} | {r['logits (no grad)']:.2f} |")
