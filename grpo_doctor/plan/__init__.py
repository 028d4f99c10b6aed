"""`grpo-doctor plan`: will a GRPO job fit in GPU memory, and the cheapest change if not.

Command readers (commands/) turn a launch command into a `Job`; model_shape reads the model's
config.json; trainer_memory and engine_memory give each part's bytes; estimate adds them per GPU
and phase; fixes ranks the changes that free enough; render prints the table and the JSON. Stdlib
only, so watch (beside training) and report can run a plan too. docs/plan.md: the model and its limits.
"""
