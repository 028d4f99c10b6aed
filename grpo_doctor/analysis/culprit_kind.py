"""What a hung rank was waiting on, read from its stack: the hang's remedies start from it.

watch names the rank the others wait for and takes its py-spy stack; this module says what kind of
place that stack is in, so that the first remedy is the one for that place rather than "compare the
stacks":

- "collective": waiting in a collective (all_reduce, gather, barrier, ...) while the others are
  elsewhere or in another one: the ranks took different code paths (collective-mismatch).
- "data-loader": inside torch.utils.data (a DataLoader's worker queue, a `__getitem__` it called).
- "server-request": a request to a server: requests, urllib3, http.client, urllib.request,
  aiohttp, httpx, grpc, or a vLLM client (TRL's `trl/extras/vllm_client.py`, `VLLMClient`).
- "reward": under a reward frame: a function whose name says reward (the user's `reward_fn`, TRL's
  `GRPOTrainer._calculate_rewards`, a `RewardModel.forward`), or, where no frame tells, a rank whose
  open phase is the trainer's `reward` phase.
- "unknown": none of these (still computing, generating, saving).

The innermost frame of one of these kinds decides: a reward function blocked in `requests.post` is a
request to a server (the server is what does not answer), a data loader feeding a collective is a
collective only where the collective is the innermost. `frame` is the frame that hangs, as
`function (file:line)`: the user's own innermost frame at or inside the frame that decided (the
reward function itself, the `__getitem__` a DataLoader called), else the user's line that called
into the library (`requests.post`, a DataLoader's `__next__`); `caller` the library frame of that
kind around it (TRL's `_calculate_rewards`, requests' `post`). For a collective, `frame` is the
collective and `caller` the frame that called it.
Standard library and checks/ only.

Typical use:
    kind = classify(main_frames(capture), open_phase="train-step/reward")
    kind.kind, kind.frame, kind.caller
    # "reward", "reward (train_grpo.py:33)", "GRPOTrainer._calculate_rewards (trl/trainer/grpo_trainer.py:1626)"
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grpo_doctor.checks.stack_groups import collective_call, format_frame, frame_kind, headline
from grpo_doctor.schema.stacks import Frame, display_path

KINDS = ("collective", "data-loader", "server-request", "reward", "unknown")

# Paths as py-spy shows them (display_path): the package root, or the stdlib module's path.
_DATA_PATHS = ("torch/utils/data/",)
_DATA_NAMES = ("dataloader",)  # _MultiProcessingDataLoaderIter._next_data, a DataLoader subclass
_REQUEST_PACKAGES = frozenset({"requests", "urllib3", "aiohttp", "httpx", "httpcore", "grpc", "openai"})
_REQUEST_PATHS = ("http/client.py", "urllib/request.py", "xmlrpc/client.py")
_REQUEST_NAMES = ("vllmclient",)  # TRL's VLLMClient, ms-swift's VLLMClient
_REQUEST_FILES = ("vllm_client.py",)  # trl/extras/vllm_client.py, swift/.../vllm_client.py
_REWARD_WORD = "reward"


@dataclass(frozen=True)
class CulpritKind:
    kind: str  # one of KINDS
    frame: str | None = None  # the frame that hangs, "function (file:line)"
    caller: str | None = None  # the frame of the kind that called it, where it is not `frame`
    op: str | None = None  # for "collective": the collective's name, "all_gather"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "frame": self.frame, "caller": self.caller, "op": self.op}


def classify(frames: Sequence[Frame], open_phase: str | None = None) -> CulpritKind:
    """The kind of place `frames` (innermost first, as py-spy and hang_stacks give them) wait in."""
    python = [f for f in frames if not f.is_native]
    hits: list[tuple[int, str]] = []
    call = collective_call(python)
    if call is not None:
        hits.append((python.index(call.op_frame), "collective"))
    for kind, test in _TESTS.items():
        at = next((i for i, f in enumerate(python) if test(f)), None)
        if at is not None:
            hits.append((at, kind))
    if hits:
        at, kind = min(hits)
        if kind == "collective" and call is not None:
            caller = call.caller or call.user_frame
            return CulpritKind("collective", format_frame(call.op_frame), format_frame(caller) if caller else None,
                               op=call.op)
        return _with_frames(kind, python, at)
    if open_phase and any(_REWARD_WORD in part.lower() for part in open_phase.split("/")):
        user = next((f for f in python if _is_user(f)), None)
        return CulpritKind("reward", format_frame(user) if user else (headline(python) if python else None))
    return CulpritKind("unknown", headline(python) if python else None)


def _with_frames(kind: str, python: list[Frame], at: int) -> CulpritKind:
    """`frame`: the user's innermost frame at or inside the deciding one (the reward function, the
    dataset's `__getitem__`), else the user's line that called into the library (a `requests.post`, a
    DataLoader's `__next__`); `caller`: the library frame of the kind around it (TRL's
    `_calculate_rewards`, requests' `post`)."""
    test = _TESTS[kind]
    inside = next((f for f in python[:at + 1] if _is_user(f)), None)
    if inside is not None:
        outer = python[python.index(inside) + 1:]
        caller = next((f for f in outer if test(f) and not _is_user(f)), None)
        if inside is not python[at]:
            caller = _outermost_of_kind(python, at, test)
        return CulpritKind(kind, format_frame(inside), format_frame(caller) if caller else None)
    site = next((f for f in python[at + 1:] if _is_user(f)), None)
    library = _outermost_of_kind(python, at, test)
    if site is None:
        return CulpritKind(kind, format_frame(python[at]), None if library is python[at] else format_frame(library))
    return CulpritKind(kind, format_frame(site), format_frame(library))


def _outermost_of_kind(python: list[Frame], at: int, test) -> Frame:
    """requests' `post` rather than the socket read under it: the call the code made."""
    last = at
    for i in range(at + 1, len(python)):
        if _is_user(python[i]) or not (test(python[i]) or frame_kind(python[i]) == "stdlib"):
            break
        if test(python[i]):
            last = i
    return python[last]


def _is_data(frame: Frame) -> bool:
    path = display_path(frame.filename).replace("\\", "/")
    return path.startswith(_DATA_PATHS) or any(n in frame.function.lower() for n in _DATA_NAMES)


def _is_request(frame: Frame) -> bool:
    path = display_path(frame.filename).replace("\\", "/")
    top = path.split("/", 1)[0]
    return (top in _REQUEST_PACKAGES or path.startswith(_REQUEST_PATHS) or path.endswith(_REQUEST_FILES)
            or any(n in frame.function.lower() for n in _REQUEST_NAMES))


def _is_reward(frame: Frame) -> bool:
    return _REWARD_WORD in frame.function.lower()


_TESTS = {"data-loader": _is_data, "server-request": _is_request, "reward": _is_reward}


def _is_user(frame: Frame) -> bool:
    """The user's own code: not a library, and not one of the client libraries above, which py-spy's
    short names ("urllib3/connection.py") do not mark as installed packages."""
    return frame_kind(frame) == "user" and not (_is_request(frame) or _is_data(frame))
