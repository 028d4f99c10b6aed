"""`grpo-doctor watch`: launches the job, samples it, detects hangs and takes every rank's stacks."""
