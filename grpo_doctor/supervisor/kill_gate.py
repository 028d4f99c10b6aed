"""Whether a hang watch found warrants `--on-hang kill`: never end a job that is only slow.

A stall is declared from the ranks' records alone; the two looks at the stacks then say whether the
ranks are stuck (the same stack both times) or still moving. Between two wrapped phases the timeout
is learned from whole steps (progress.py), so an unmarked checkpoint save or evaluation longer than
the steps seen so far is a stall too: watch investigates it, and `--on-hang kill` must not end it.
The job is ended only when some rank is stuck and none of the stuck ranks is writing a checkpoint.
Where no stack could be taken (ptrace denied), the records are all there is: the stall stands.

Typical use:
    reason = reason_to_spare(report)
    if reason is None: end the job
    else: console.note(f"not ending the job (--on-hang kill): {reason}")
"""
from __future__ import annotations

from grpo_doctor.schema.stacks import Frame
from grpo_doctor.schema.watch_files import HangReport

# Functions and files of a checkpoint being written: torch.save, safetensors, HF's save_pretrained and
# Trainer._save_checkpoint, DeepSpeed's save_checkpoint, torch.distributed.checkpoint.
SAVE_FUNCTIONS = ("save_pretrained", "_save_checkpoint", "save_checkpoint", "save_model", "_save", "save_file")
SAVE_FILES = ("torch/serialization.py", "safetensors/", "torch/distributed/checkpoint/")


def reason_to_spare(report: HangReport) -> str | None:
    """None when the job may be ended; else why not, in a few words for watch's line."""
    stuck = report.ranks_with_verdict("stuck")
    moving = report.ranks_with_verdict("moving")
    if not stuck and moving:
        return "every rank's stack moved between the two looks: slow, not stuck; watching on"
    saving = [r for r in stuck if r in report.stacks and any(_is_saving(f) for f in report.stacks[r].frames)]
    if saving:
        return f"rank(s) {', '.join(map(str, saving))} are writing a checkpoint; watching on"
    return None


def _is_saving(frame: Frame) -> bool:
    filename = frame.filename.replace("\\", "/")
    return frame.function in SAVE_FUNCTIONS or any(part in filename for part in SAVE_FILES)
