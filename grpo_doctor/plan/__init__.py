"""`grpo-doctor plan`: will a GRPO job fit in GPU memory, and the cheapest change if not.

Command readers (commands/) turn a launch command into a `Job`; model_shape reads the model's
config.json; trainer_memory and engine_memory give each part's bytes; estimate adds them per GPU
and phase; fixes ranks the changes that free enough; render prints the table and the JSON; make ties
them together. Stdlib only (yaml for YAML configs, NVML through host/), so watch (beside training)
and report can run a plan too. docs/plan.md: the model and its limits.

Typical use:
    job = job_from_command(["swift", "rlhf", "--rlhf_type", "grpo", "--model", "Qwen/Qwen2.5-7B"], Hardware(8, 1, 80 * GIB))
    result = plan_job(job)
    result.plan.fits, result.plan.worst.peak_bytes, result.cheapest_fit.flag
"""
