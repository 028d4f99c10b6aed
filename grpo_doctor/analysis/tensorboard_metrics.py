"""Step metrics from a TensorBoard event file, read with the `tensorboard` package's own reader.

The trainers write scalars with torch.utils.tensorboard's SummaryWriter: the Hugging Face Trainer (TRL,
ms-swift; report_to tensorboard) under train/<name>, verl (trainer.logger=[tensorboard]) under its own names,
OpenRLHF (--use_tensorboard) under train/<name>. Each scalar's step is the event's step. Both the scalar
summaries (simple_value) and TF2's tensor summaries (a 0-d tensor) are read; eval/ and validation tags are
left out, and the framework is told from the names (metric_names.framework_of). A file is recognised by its
content: a TFRecord whose first event names its format `brain.Event:` (torch and TensorFlow write the same).

Reading needs the tensorboard package (pip install tensorboard, or grpo-doctor[tensorboard]); without it
the file is left out with a warning saying so.

Typical use:
    log = read_event_file(Path("runs/Jun10_12-00-00_node1/events.out.tfevents.1718000000.node1.123.0"))
    log.format, log.steps[-1]["entropy"]        # "tensorboard", 0.002
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_doctor.analysis.metric_logs import MetricLog, add_steps
from grpo_doctor.analysis.metric_names import framework_entry, framework_of, logged_name

EVENT_MAGIC = b"brain.Event:"


def is_event_file(head: bytes) -> bool:
    """Whether a file starting with `head` is an event file: the first record (a 12-byte length header, then
    the Event) holds the file_version string within its first few dozen bytes."""
    return EVENT_MAGIC in head[:64]


def read_event_file(path: Path) -> MetricLog:
    log = MetricLog(path=path, source="", format="tensorboard")
    try:
        from tensorboard.backend.event_processing import event_accumulator
        from tensorboard.util import tensor_util
    except ImportError:
        log.warnings.append(f"{path}: a TensorBoard event file; reading it needs the tensorboard package "
                            "(pip install tensorboard); left out")
        return log
    # 0: keep every event (the default samples 1,000 scalars a tag: a NaN between two kept ones would be lost)
    accumulator = event_accumulator.EventAccumulator(
        str(path), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    try:
        accumulator.Reload()
    except Exception as exc:  # a truncated or corrupt record: tensorboard raises its own error types
        log.warnings.append(f"{path}: the event file cannot be read whole ({type(exc).__name__}: {exc})")
    by_step: dict[int, dict[str, Any]] = {}
    tags = accumulator.Tags()
    for tag in tags.get("scalars", []):
        name = logged_name(tag)
        if name is not None:
            for event in accumulator.Scalars(tag):
                by_step.setdefault(event.step, {})[name] = _as_logged(event.value)
    for tag in tags.get("tensors", []):
        name = logged_name(tag)
        if name is None:
            continue
        for event in accumulator.Tensors(tag):
            value = tensor_util.make_ndarray(event.tensor_proto)
            if value.ndim == 0 and value.dtype.kind in "fiu":
                by_step.setdefault(event.step, {})[name] = _as_logged(float(value))
    log.source = framework_of({name for metrics in by_step.values() for name in metrics})
    add_steps(log, [framework_entry({**metrics, "step": step}, log.source) for step, metrics in sorted(by_step.items())])
    return log


def _as_logged(value: float) -> float:
    """Scalars are stored as float32: 0.1 comes back as 0.10000000149; 7 significant digits give the number logged."""
    return float(f"{value:.7g}")
