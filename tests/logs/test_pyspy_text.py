"""py-spy text dumps as they are pasted into logs: prefixes, --native, several processes, cut pastes."""
from __future__ import annotations

from pathlib import Path

from grpo_doctor.checks.stack_groups import culprit_ranks, describe, group_stacks, odd_ranks
from grpo_doctor.logs.pyspy import format_pyspy_text, parse_pyspy_text
from grpo_doctor.schema.stacks import Frame, StackCapture, ThreadStack

DATA = Path(__file__).resolve().parents[1] / "data" / "pyspy"


def _read(name: str) -> list[StackCapture]:
    return parse_pyspy_text((DATA / name).read_text())


def test_a_plain_dump_reads_as_process_threads_and_frames():
    [cap] = _read("plain.txt")  # shell lines around the dump are not part of it
    assert (cap.rank, cap.pid, cap.command, cap.error) == (-1, 6866, "/usr/bin/python3 -u train.py", None)
    main, pin = cap.threads
    assert (main.thread_id, main.name, main.active) == (6866, "MainThread", False)
    assert main.frames[0] == Frame("all_reduce", "torch/distributed/distributed_c10d.py", 3252)
    assert main.frames[-1] == Frame("<module>", "train.py", 150)
    assert pin.name == "Thread-1 (_pin_memory_loop)" and len(pin.frames) == 6


def test_rank_prefixes_are_stripped_and_name_the_rank_even_when_dumps_interleave():
    caps = _read("torchrun_8_ranks.txt")
    assert [(c.rank, c.pid) for c in caps] == [(r, 40410 + r) for r in range(8)]
    for cap in caps[:7]:
        assert [len(t.frames) for t in cap.threads] == [7, 4]
        assert not cap.main_thread().active
    # rank 7's lines arrive interleaved with rank 6's and still make up rank 7's own dump
    assert [len(t.frames) for t in caps[7].threads] == [8, 4]
    assert caps[7].main_thread().active  # "(active+gil)"
    assert caps[7].main_thread().frames[0].function == "_sample"


def test_a_pasted_log_names_the_odd_rank_as_a_live_capture_would():
    groups = group_stacks(_read("torchrun_8_ranks.txt"))
    assert describe(groups, rank_context={r: "step 17" for r in range(8)}) == [
        "ranks 0-6: all_reduce (torch/distributed/distributed_c10d.py:3252) <- backward (train.py:88) at step 17",
        "rank 7: generate (transformers/generation/utils.py:2255) <- rollout (train.py:51) at step 17",
    ]
    assert odd_ranks(groups) == [7]
    assert culprit_ranks(groups) == [7]


def test_native_frames_timestamps_and_locals_in_two_dumps():
    engine, trainer = _read("native_two_processes.txt")
    assert (engine.pid, trainer.pid) == (5120, 5121)
    assert engine.command == "python -m vllm.entrypoints.worker --rank 0"
    assert engine.main_thread().thread_id == 0x7F4A1B2C3740  # older py-spy prints pthread ids in hex
    functions = [f.function for f in engine.main_thread().frames]
    assert functions == ["__GI___poll", "zmq::signaler_t::wait", "poll", "run_busy_loop", "run_engine_core",
                         "run", "<module>", "_start"]  # the --locals lines under poll are skipped
    assert engine.main_thread().frames[1] == Frame("zmq::signaler_t::wait", "libzmq-a430b4ce.so.5.2.5", 0)
    assert [f.is_native for f in engine.main_thread().frames[:3]] == [True, True, False]
    assert [t.name for t in trainer.threads] == ["MainThread", "Thread-3"]  # the INFO line after is not a frame
    assert [f.function for f in trainer.main_thread().python_frames] == ["wait", "sync_weights", "train", "<module>"]


def test_an_engine_idle_in_its_event_loop_is_not_the_culprit():
    engine, trainer = sorted(group_stacks(_read("native_two_processes.txt")), key=lambda g: g.pids)
    assert engine.idle_in_event_loop and not engine.waiting_in_collective
    assert trainer.waiting_in_collective
    assert culprit_ranks([trainer, engine]) == []
    assert describe([trainer]) == [
        "pid 5121: wait (torch/distributed/distributed_c10d.py:2501) <- sync_weights (grpo/weight_sync.py:77)"]


def test_a_paste_cut_at_both_ends_yields_what_it_has():
    orphan, cut = _read("cut_mid_dump.txt")
    # Starts after its Process line: the threads are kept, the process unknown.
    assert (orphan.pid, orphan.rank) == (-1, -1)
    [monitor] = orphan.threads
    assert monitor.name == "Thread-2 (_monitor)"
    assert [f.function for f in monitor.frames] == ["wait", "_monitor", "run"]  # the WARN line ends it
    # Cut off inside a frame line: the frames before it are kept.
    assert cut.pid == 9001
    assert [f.function for f in cut.main_thread().frames] == ["generate_rollout", "rollout"]
    assert describe(group_stacks([orphan])) == ["pid ?: _monitor (grpo/heartbeat.py:31)"]


def test_a_rendered_capture_reads_back_with_its_rank_prefix():
    cap = StackCapture(rank=5, pid=77, host="n1", captured_t=None, threads=(
        ThreadStack(77, "MainThread", True, (
            Frame("clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0),
            Frame("broadcast", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 2400),
            Frame("sync", "/work/train.py", 12))),
        ThreadStack(78, "Thread-1", False, ())), command="python train.py")
    text = format_pyspy_text(cap)
    assert "    broadcast (torch/distributed/distributed_c10d.py:2400)\n" in text
    assert "    clock_nanosleep (libc.so.6)\n" in text
    [back] = parse_pyspy_text("".join(f"[rank5]: {line}\n" for line in text.splitlines()))
    assert (back.rank, back.pid, back.command) == (5, 77, "python train.py")
    assert [(t.thread_id, t.name, t.active) for t in back.threads] == [(77, "MainThread", True), (78, "Thread-1", False)]
    assert [(f.function, f.line) for f in back.threads[0].frames] == [(f.function, f.line) for f in cap.threads[0].frames]


def test_log_lines_that_merely_mention_a_process_are_not_dumps():
    text = (
        "CUDA out of memory. Process 1234 has 3.00 GiB memory in use. Process 99: exited with 1\n"
        "Sending process 40417 closing signal SIGTERM\n"
        "    at foo (bar.py:3)\n"
    )
    assert parse_pyspy_text(text) == []
