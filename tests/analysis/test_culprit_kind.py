"""What a hung rank's stack shows it waiting on (analysis/culprit_kind.py), one kind per test, on real
stacks: py-spy dumps of blocked processes (tests/data/pyspy/culprits/, made by make_captures.py there;
tests/data/pyspy/ for collectives) and the stacks watch took of a real TRL GRPOTrainer job
(tests/data/trl_reward_hang/)."""
import json
from pathlib import Path

from grpo_doctor.analysis.culprit_kind import classify
from grpo_doctor.logs.pyspy import parse_pyspy_text
from grpo_doctor.schema.stacks import Frame

DATA = Path(__file__).resolve().parents[1] / "data"
PYSPY = DATA / "pyspy"
TRL_HANG = DATA / "trl_reward_hang" / "run" / "supervisor" / "vm" / "hang-1.json"


def _dump(name: str, pid: int | None = None) -> tuple[Frame, ...]:
    captures = parse_pyspy_text((PYSPY / name).read_text())
    capture = next(c for c in captures if pid is None or c.pid == pid)
    return capture.main_thread().frames


def _trl_stack(rank: int) -> list[Frame]:
    hang = json.loads(TRL_HANG.read_text())
    return [Frame(f["function"], f["filename"], f["line"]) for f in hang["stacks"][str(rank)]["frames"]]


def test_a_trl_reward_function_that_blocks_is_a_reward_hang_naming_the_function_and_trls_caller():
    kind = classify(_trl_stack(1), open_phase="train-step/reward")
    assert kind.kind == "reward"
    assert kind.frame == "reward (train_grpo.py:33)"
    assert kind.caller == "GRPOTrainer._calculate_rewards (trl/trainer/grpo_trainer.py:1626)"


def test_a_reward_function_not_named_reward_is_found_under_trls_calculate_rewards():
    # The same real stack with the user's function called digit_share: TRL's frame says it is a reward.
    frames = _trl_stack(1)
    frames[0] = Frame("digit_share", frames[0].filename, frames[0].line)
    kind = classify(frames)
    assert (kind.kind, kind.frame) == ("reward", "digit_share (train_grpo.py:33)")
    assert kind.caller.startswith("GRPOTrainer._calculate_rewards (")


def test_the_trainers_reward_phase_alone_makes_a_reward_hang_when_no_frame_tells():
    # A rank computing in a library with no reward in any frame name, open in the trainer's reward phase.
    frames = (Frame("forward", "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125),
              Frame("score", "/home/me/train.py", 40))
    assert classify(frames, open_phase="train-step/reward").kind == "reward"
    assert classify(frames, open_phase="rollout").kind == "unknown"


def test_waiting_in_a_collective_inside_trls_reward_computation_is_a_collective_not_a_reward():
    # Rank 0 of the TRL job: accelerate's gather -> all_gather, inside GRPOTrainer._calculate_rewards.
    kind = classify(_trl_stack(0), open_phase="train-step/reward")
    assert (kind.kind, kind.op) == ("collective", "all_gather")
    assert kind.frame == "all_gather (torch/distributed/distributed_c10d.py:4287)"
    assert kind.caller.startswith("_gpu_gather.<locals>._gpu_gather_one (accelerate/utils/operations.py")


def test_a_rank_in_all_reduce_is_a_collective():
    kind = classify(_dump("plain.txt"))
    assert (kind.kind, kind.op, kind.caller) == ("collective", "all_reduce", "train_step (train.py:88)")


def test_a_dataloader_waiting_for_its_worker_is_a_data_loader_hang_at_the_users_loop():
    kind = classify(_dump("culprits/dataloader_worker.txt"))
    assert kind.kind == "data-loader"
    assert kind.frame == "train_loop (make_captures.py:65)"
    assert kind.caller == "_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:725)"


def test_a_datasets_getitem_that_never_returns_is_a_data_loader_hang_naming_getitem():
    kind = classify(_dump("culprits/dataloader_inline.txt"))
    assert (kind.kind, kind.frame) == ("data-loader", "SlowDataset.__getitem__ (make_captures.py:60)")


def test_trls_vllm_client_waiting_for_a_silent_server_is_a_server_request():
    kind = classify(_dump("culprits/vllm_client_generate.txt"))
    assert kind.kind == "server-request"
    assert kind.frame == "rollout (make_captures.py:31)"
    assert kind.caller == "VLLMClient.generate (trl/generation/vllm_client.py:455)"


def test_a_reward_function_blocked_in_requests_post_is_a_server_request_at_the_reward_function():
    # The innermost kind decides: the server is what does not answer.
    kind = classify(_dump("culprits/requests_in_reward.txt"))
    assert (kind.kind, kind.frame, kind.caller) == ("server-request", "remote_reward (make_captures.py:46)",
                                                   "post (requests/api.py:134)")


def test_generation_in_transformers_is_unknown():
    kind = classify(_dump("torchrun_8_ranks.txt", pid=40417))
    assert kind.kind == "unknown" and kind.frame.startswith("generate (transformers/generation/utils.py")
