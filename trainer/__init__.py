"""The reference GRPO trainer: a small, real, instrumented GRPO loop with fault injection.

It exists so grpo-doctor has a training job to watch whose failures are known in advance:
every case in CASES.md can be produced on demand with `--inject`.

Typical use:
    torchrun --nproc-per-node 2 -m grpo_doctor_trainer.train --model tiny --steps 6 --run-dir runs/demo
    torchrun --nproc-per-node 2 -m grpo_doctor_trainer.train --engine deepspeed --zero-stage 3 \\
        --inject hang:rank=1,phase=forward,step=2 --dist-timeout-s 30
"""
