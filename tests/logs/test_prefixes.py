"""Prefixes launchers, schedulers and collectors put before log messages, stripped one by one or stacked."""
from __future__ import annotations

import pytest

from grpo_doctor.logs.prefixes import split_prefix


def strip_prefix(line: str) -> tuple[int | None, str]:
    """The rank and message split_prefix gives, the two most of these cases check."""
    parts = split_prefix(line)
    return parts.rank, parts.message

ESC = "\x1b"


@pytest.mark.parametrize(
    ("line", "rank", "message"),
    [
        ("[rank3]: Traceback (most recent call last):", 3, "Traceback (most recent call last):"),
        ("[rank3]:[E1218 10:01:02.123456 123 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught", 3,
         "[Rank 3] Watchdog caught"),
        ("[rank1]:[E1118 20:32:23.955028747 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 1]  failure",
         1, "[PG ID 0 PG GUID 0(default_pg) Rank 1]  failure"),
        ("[rank0]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] x", 0, "x"),  # month without a leading zero
        ("[rank0]:[E ProcessGroupNCCL.cpp:542] old torch", 0, "old torch"),
        ("[default5]:loss 0.1", 5, "loss 0.1"),
        ("10: step 3", 10, "step 3"),
        (" 3: step 3", 3, "step 3"),  # srun pads labels to the widest
        ("(WorkerDict pid=123) loss 0.1", None, "loss 0.1"),
        ("(VllmWorker rank=1 pid=254) torch.OutOfMemoryError: x", 1, "torch.OutOfMemoryError: x"),
        ("(EngineCore_DP0 pid=563) INFO 12-23 23:34:23 [gpu_worker.py:298] Available KV cache memory: 4.50 GiB",
         None, "Available KV cache memory: 4.50 GiB"),
        ("INFO 03-10 04:03:24 worker.py:267] Memory profiling takes 5.61 seconds", None,
         "Memory profiling takes 5.61 seconds"),
        ("  | 2024-08-23T22:22:58.879Z | boom", None, "boom"),
        ("[80746] boom", None, "boom"),
        ("2024-08-23T22:22:58.879Z boom", None, "boom"),
        ("[2024-01-07 03:14:15,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=10", None, "[Rank 0] step=10"),
        ("2024-01-07 03:14:15,123 - INFO - hello", None, "hello"),
        ("E0107 03:14:15.123000 140 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: -6)", None,
         "failed (exitcode: -6)"),
        ("[2024-01-07 03:14:15,123] torch.distributed.elastic.multiprocessing.api: [ERROR] failed", None, "failed"),
        ("WARNING:torch.distributed.run:Setting OMP_NUM_THREADS", None, "Setting OMP_NUM_THREADS"),
        ("[1834121.594190] Out of memory: Killed process 40417", None, "Out of memory: Killed process 40417"),
        ("Jan  7 03:14:15 node-3 kernel: Out of memory: Killed process 1", None, "Out of memory: Killed process 1"),
        ("2024-01-07T03:14:15.123456+00:00 node-3 kernel: Out of memory", None, "Out of memory"),
    ],
)
def test_each_prefix_is_stripped_and_names_its_rank(line, rank, message):
    assert strip_prefix(line) == (rank, message)


def test_stacked_prefixes_are_all_stripped_and_the_most_specific_rank_wins():
    line = ("  | 2024-08-23T22:22:58.879Z | 12: (WorkerDict pid=3490362, ip=10.0.0.7) "
            "[rank13]:[E1118 20:32:23.955028747 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog")
    prefix = split_prefix(line)
    assert prefix.rank == 13  # torchrun's [rankN] beats the Slurm task label and [Rank 1], which is text
    assert prefix.message == "[Rank 1] Watchdog"
    assert prefix.source == "12:(WorkerDict pid=3490362, ip=10.0.0.7)[rank13]"


def test_indentation_after_the_prefix_is_kept_for_tracebacks():
    assert strip_prefix('[rank2]:   File "train.py", line 3, in <module>') == (2, '  File "train.py", line 3, in <module>')
    assert strip_prefix('    return f(x)') == (None, "    return f(x)")


def test_ansi_colours_are_removed_wherever_they_are():
    line = f"{ESC}[36m(WorkerDict pid=12){ESC}[0m [rank0]: {ESC}[1;31mRuntimeError: boom{ESC}[0m"
    assert strip_prefix(line) == (0, "RuntimeError: boom")


def test_a_progress_bar_redrawn_with_carriage_returns_keeps_what_was_drawn_last():
    assert strip_prefix(" 10%|█  | 1/10\r 20%|██ | 2/10\r[rank4]: loss 0.1\n") == (4, "loss 0.1")


def test_a_rank_tag_glued_behind_a_progress_bar_is_found():
    line = ("Epoch 10/10: 240it [05:55,  1.47s/it, loss=5.46][rank0]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632]"
            " [Rank 0] Watchdog caught")
    assert strip_prefix(line) == (0, "[Rank 0] Watchdog caught")


def test_rays_repeat_marker_is_dropped():
    assert strip_prefix("(WorkerDict pid=1) [rank2]: boom [repeated 7x across cluster]") == (2, "boom")


def test_a_task_label_only_counts_as_the_outermost_prefix():
    assert strip_prefix("[rank1]: 12: not a label") == (1, "12: not a label")
    assert strip_prefix("RuntimeError: 12: foo") == (None, "RuntimeError: 12: foo")


def test_plain_messages_and_odd_lines_are_left_alone():
    for line in ["Epoch 3: loss=1", "{'loss': 0.0, 'reward': 1.0}", "node-3:40417:40502 [7] NCCL INFO Bootstrap",
                 "", "   ", "[", "(", "10:", "\x00\x00\ufffd"]:
        assert strip_prefix(line) == (None, line)
    assert strip_prefix("2024-01-07 03:14:15 Epoch 3: loss=1") == (None, "Epoch 3: loss=1")  # not a logger name


def test_lines_of_one_stream_share_a_source_and_other_streams_differ():
    a = split_prefix("(WorkerDict pid=7) [rank1]:[E1118 20:32:23.1 ProcessGroupNCCL.cpp:1] x").source
    b = split_prefix("(WorkerDict pid=7) [rank1]:[E1118 20:32:24.9 ProcessGroupNCCL.cpp:2] y").source
    c = split_prefix("(WorkerDict pid=8) [rank1]: z").source
    assert a == b != c
    assert split_prefix("[2024-01-07 03:14:15,123] x").source == ""  # times are not identity
