"""Which ranks are where: identical stacks grouped, the odd ones and the culprit named.

In a hang most ranks sit in the same collective waiting for the few that never arrive; those few
are somewhere else. Grouping the main threads' stacks across ranks makes that one line each:
    ranks 0-6: all_reduce (torch/distributed/distributed_c10d.py:3252) <- train_step (train.py:88)
    rank 7: generate (transformers/generation/utils.py:2024) <- rollout (train.py:51)
Two stacks are the same when their Python frames have the same functions, files and lines,
except the line of the innermost frame: ranks spinning in the same loop, or blocked in the same
call reached through the same call sites, belong together, while the same function called from
two different lines of the caller (two different all_reduces: a desync) does not. Native frames
(`--native`) are left out of the comparison, as their addresses differ from process to process.

A second capture a few seconds later tells a stuck rank (the same stack, line for line) from a
slow one that is still moving (`compare_captures`). Works the same on live captures and on
dumps parsed from logs; it depends on `stackdata` only.

Typical use:
    groups = group_stacks(captures)
    for line in describe(groups, rank_context={r: f"step {s}" for r, s in last_step.items()}):
        print(line)
    culprit_ranks(groups)       # [7]: not in a collective while the others wait in one
    compare_captures(captures, capture_stacks(targets, out_dir2))   # {0: "stuck", 7: "moving", ...}
    call = collective_call(captures[7].main_thread().frames)   # also works on traceback_frames(error.traceback)
    call.op, call.site                                          # "broadcast_object_list", "inject.py:190"
"""
from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_doctor.schema.ranks import format_ranks  # noqa: F401  (re-exported)
from grpo_doctor.schema.stacks import Frame, StackCapture, ThreadStack, display_path

# Whole-name tokens that only collectives use; matched anywhere in a function name.
_COLLECTIVE_TOKENS = (
    "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "reducescatter",
    "all_to_all", "alltoall", "barrier", "broadcast",
)
# Array broadcasting (numpy, torch) is computation, not communication.
_NOT_COLLECTIVE = frozenset({"broadcast_to", "broadcast_tensors", "broadcast_shapes", "broadcast_arrays"})
# Names too common to trust outside the communication packages below.
_COMM_NAMES = frozenset({
    "wait", "_wait", "wait_tensor", "send", "recv", "isend", "irecv", "batch_isend_irecv", "reduce",
    "gather", "scatter", "gather_object", "scatter_object_list", "get", "_store_based_barrier",
})
_COMM_PACKAGES = (
    "torch/distributed/", "deepspeed/comm/", "megatron/core/parallel_state", "vllm/distributed/",
    "sglang/srt/distributed/",
)
# torchrun's @record decorator wraps every main(): in torch/distributed, but no communication.
_NOT_COMM = ("torch/distributed/elastic/", "torch/distributed/run.py", "torch/distributed/launch")
# Decorators between user code and the library function it called, skipped when naming the call.
_WRAPPERS = frozenset({
    "wrapper", "wrapped", "inner", "decorate_context", "_call_impl", "_wrapped_call_impl", "_fn", "__call__",
})
_NATIVE_COMM = ("nccl", "gloo", "processgroup", "c10d::")
# Where an idle process waits for work rather than for other ranks (FORMATS.md: not the culprit).
_EVENT_LOOP_FILES = ("selectors.py", "asyncio/", "zmq/", "uvloop/", "tornado/", "ray/_private/worker.py")
_STDLIB_PATH = re.compile(r"/lib/python\d+(?:\.\d+)?t?/")
_DRIVE = re.compile(r"[A-Za-z]:/")
# Packages recognised in py-spy's short filenames, which drop the site-packages part.
_KNOWN_LIBRARIES = frozenset({
    "torch", "torchvision", "transformers", "vllm", "deepspeed", "trl", "accelerate", "peft", "datasets",
    "tokenizers", "safetensors", "huggingface_hub", "ray", "numpy", "triton", "flash_attn", "xformers",
    "megatron", "apex", "zmq", "uvloop", "tornado", "grpo_doctor", "swift", "verl", "sglang", "tqdm",
})


@dataclass(frozen=True)
class StackGroup:
    """Ranks whose main threads are in the same place; `frames` are the first rank's, innermost first."""

    ranks: tuple[int, ...]
    pids: tuple[int, ...]  # in the order of ranks; names the processes of a paste without ranks
    frames: tuple[Frame, ...]
    signature: str  # stable across runs for the same code path
    waiting_in_collective: bool
    idle_in_event_loop: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": list(self.ranks), "pids": list(self.pids), "frames": [f.to_dict() for f in self.frames],
            "signature": self.signature, "waiting_in_collective": self.waiting_in_collective,
            "idle_in_event_loop": self.idle_in_event_loop,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StackGroup:
        return cls(
            ranks=tuple(data["ranks"]), pids=tuple(data.get("pids", ())),
            frames=tuple(Frame.from_dict(f) for f in data["frames"]), signature=data["signature"],
            waiting_in_collective=bool(data.get("waiting_in_collective")),
            idle_in_event_loop=bool(data.get("idle_in_event_loop")),
        )


def group_stacks(captures: Iterable[StackCapture]) -> list[StackGroup]:
    """Groups of the successful captures, largest first (ties: lowest rank first).

    Failed captures are in no group; the caller reports their `error`s.
    """
    members: dict[str, list[tuple[StackCapture, ThreadStack | None]]] = {}
    for cap in captures:
        if cap.ok:
            main = cap.main_thread()
            members.setdefault(stack_signature(main), []).append((cap, main))
    groups = []
    for signature, caps in members.items():
        caps.sort(key=lambda cm: (cm[0].rank, cm[0].pid))
        main = caps[0][1]
        groups.append(StackGroup(
            ranks=tuple(c.rank for c, _ in caps), pids=tuple(c.pid for c, _ in caps),
            frames=main.frames if main else (), signature=signature,
            waiting_in_collective=main is not None and is_waiting_in_collective(main),
            idle_in_event_loop=main is not None and is_idle_in_event_loop(main),
        ))
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks))
    return groups


def stack_signature(thread: ThreadStack | None) -> str:
    """A short hash of the thread's Python frames, the innermost frame's line left out."""
    frames = thread.python_frames if thread else ()
    key = [(f.function, f.filename, 0 if i == 0 else f.line) for i, f in enumerate(frames)]
    return hashlib.sha1(repr(key).encode()).hexdigest()[:12]


def odd_ranks(groups: list[StackGroup]) -> list[int]:
    """Ranks outside the largest group; empty when all agree."""
    return sorted(r for g in groups[1:] for r in g.ranks)


def culprit_ranks(groups: list[StackGroup]) -> list[int]:
    """Ranks doing something else while others wait in a collective: those the others wait for.

    Empty when no rank waits in a collective, or when all do (then look at `odd_ranks`: ranks in
    a different collective point to a desync). Ranks idle in an event loop are waiting for work,
    not holding anyone up, and are not named.
    """
    if not any(g.waiting_in_collective for g in groups):
        return []
    return sorted(r for g in groups if not (g.waiting_in_collective or g.idle_in_event_loop) for r in g.ranks)


def compare_captures(first: Iterable[StackCapture], second: Iterable[StackCapture]) -> dict[int, str]:
    """rank -> "stuck" (main thread's Python frames identical, lines included), "moving", or
    "unknown" (a capture failed, or the rank is in only one of them)."""
    before = {c.rank: c for c in first}
    after = {c.rank: c for c in second}
    verdicts = {}
    for rank in sorted(before.keys() | after.keys()):
        a, b = before.get(rank), after.get(rank)
        main_a = a.main_thread() if a is not None and a.ok else None
        main_b = b.main_thread() if b is not None and b.ok else None
        if main_a is None or main_b is None:
            verdicts[rank] = "unknown"
        else:
            verdicts[rank] = "stuck" if main_a.python_frames == main_b.python_frames else "moving"
    return verdicts


def is_waiting_in_collective(thread: ThreadStack) -> bool:
    """True if any frame of the thread is a collective or a wait inside a communication library."""
    for frame in thread.frames:
        name = frame.function.rsplit(".", 1)[-1].lower()
        if frame.is_native:
            if any(token in frame.function.lower() or token in frame.filename.lower() for token in _NATIVE_COMM):
                return True
        elif any(token in name for token in _COLLECTIVE_TOKENS) and name not in _NOT_COLLECTIVE:
            return True
        elif name in _COMM_NAMES and _is_comm(frame):
            return True
    return False


def is_idle_in_event_loop(thread: ThreadStack) -> bool:
    """True if the thread is idle with its innermost Python frame in an event loop or poller."""
    frames = thread.python_frames
    return not thread.active and bool(frames) and display_path(frames[0].filename).startswith(_EVENT_LOOP_FILES)


def describe(groups: list[StackGroup], *, rank_context: Mapping[int, str] | None = None) -> list[str]:
    """One line per group: who, the innermost frame worth showing, and the user code that called it.

    `rank_context` adds what the caller knows per rank (say "step 17"): once when the group agrees.
    """
    lines = []
    for group in groups:
        if all(r >= 0 for r in group.ranks):
            label = f"{'rank' if len(group.ranks) == 1 else 'ranks'} {format_ranks(group.ranks)}"
        else:
            label = f"{'pid' if len(group.pids) == 1 else 'pids'} {','.join(str(p) if p >= 0 else '?' for p in group.pids)}"
        lines.append(f"{label}: {headline(group.frames)}{_context(group.ranks, rank_context or {})}")
    return lines


def headline(frames: Sequence[Frame]) -> str:
    """Where a stack is, in one line: the collective or library call and the user code that led there."""
    python = [f for f in frames if not f.is_native]
    if not python:
        return "no Python frames"
    # The innermost frames are mostly plumbing (threading.py, c10d_logger's wrapper). What tells
    # a person where a rank is: the collective it is in, or the library call the user's code
    # made, followed by the user's code that led there.
    kinds = [frame_kind(f) for f in python]
    comm = next((i for i, f in enumerate(python) if _is_comm(f)), None)
    user = next((i for i, k in enumerate(kinds) if k == "user"), None)
    if comm is not None and (user is None or comm < user):
        shown = comm
    elif user is not None:
        entry = user - 1
        while entry > 0 and python[entry].function.rsplit(".", 1)[-1] in _WRAPPERS:
            entry -= 1
        if entry >= 0 and kinds[entry] == "library":
            return f"{_format_frame(python[entry])} <- {_format_frame(python[user])}"
        shown = user
    else:
        shown = 0
    caller = next((python[i] for i in range(shown + 1, len(python)) if kinds[i] == "user"), None)
    text = _format_frame(python[shown])
    return f"{text} <- {_format_frame(caller)}" if caller else text


@dataclass(frozen=True)
class CollectiveCall:
    """The collective a stack waits in: `op_frame` the outermost communication-library frame
    (broadcast_object_list, not the broadcast it calls), `caller` the frame that called it, and
    `user_frame` the first frame of the user's own code on the way out (None where there is none)."""

    op_frame: Frame
    caller: Frame | None
    user_frame: Frame | None

    @property
    def op(self) -> str:
        return self.op_frame.function.rsplit(".", 1)[-1]

    @property
    def site(self) -> str:
        """The call site as file:line: the user's code where known, else the immediate caller."""
        frame = self.user_frame or self.caller or self.op_frame
        return f"{display_path(frame.filename)}:{frame.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "site": self.site, "op_frame": format_frame(self.op_frame),
                "caller": format_frame(self.caller) if self.caller else None,
                "user_frame": format_frame(self.user_frame) if self.user_frame else None}


def collective_call(frames: Sequence[Frame]) -> CollectiveCall | None:
    """The collective the innermost-first `frames` wait in, with its call site; None when they are in none.

    Works on py-spy stacks and on the frames of a Python traceback alike, so two ranks that failed
    (or hang) in different collectives can be told apart by where their code called them.
    """
    python = [f for f in frames if not f.is_native]
    first = next((i for i, f in enumerate(python) if _is_comm(f) and _names_collective(f)), None)
    if first is None:
        return None
    last = first
    for i in range(first + 1, len(python)):
        if not _is_comm(python[i]):
            break
        if python[i].function.rsplit(".", 1)[-1] not in _WRAPPERS:
            last = i
    outer = python[last + 1:]
    caller = next((f for f in outer if f.function.rsplit(".", 1)[-1] not in _WRAPPERS), None)
    user = next((f for f in outer if frame_kind(f) == "user"), None)
    return CollectiveCall(python[last], caller, user)


def _names_collective(frame: Frame) -> bool:
    name = frame.function.rsplit(".", 1)[-1].lower()
    return (any(token in name for token in _COLLECTIVE_TOKENS) and name not in _NOT_COLLECTIVE) or name in _COMM_NAMES


def innermost_user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the user's own code (a reward function, a data loader, a sleep in a loop)."""
    return next((f for f in frames if frame_kind(f) == "user"), None)


def format_frame(frame: Frame) -> str:
    """`function (file:line)`, the file as py-spy shows it."""
    return _format_frame(frame)


def _context(ranks: tuple[int, ...], rank_context: Mapping[int, str]) -> str:
    by_context: dict[str, list[int]] = {}
    for r in ranks:
        if r in rank_context:
            by_context.setdefault(rank_context[r], []).append(r)
    if not by_context:
        return ""
    if len(by_context) == 1 and sum(map(len, by_context.values())) == len(ranks):
        return f" at {next(iter(by_context))}"
    return " (" + "; ".join(f"{format_ranks(rs)}: {ctx}" for ctx, rs in by_context.items()) + ")"


def _format_frame(frame: Frame) -> str:
    return f"{frame.function} ({display_path(frame.filename)}:{frame.line})"


def _is_comm(frame: Frame) -> bool:
    path = display_path(frame.filename)
    return path.startswith(_COMM_PACKAGES) and not path.startswith(_NOT_COMM)


def frame_kind(frame: Frame) -> str:
    """"native", "stdlib", "library" (an installed package) or "user", from a full or a short path."""
    name = frame.filename.replace("\\", "/")
    if frame.is_native:
        return "native"
    if name.startswith("<"):
        return "stdlib"  # <frozen importlib._bootstrap>, <string>
    if "/site-packages/" in name or "/dist-packages/" in name or "/grpo_doctor/" in name:
        return "library"  # grpo_doctor too: `watch --instrument`'s wrappers are never the user's code
    if _STDLIB_PATH.search(name):
        return "stdlib"
    if name.startswith("/") or _DRIVE.match(name):
        return "user"  # any other full path is the user's own code
    # A short name as py-spy prints it ("threading.py", "torch/nn/modules/module.py", "train.py"):
    # the top-level package tells.
    top = name.split("/", 1)[0].removesuffix(".py")
    if top in sys.stdlib_module_names:
        return "stdlib"
    return "library" if top in _KNOWN_LIBRARIES else "user"
