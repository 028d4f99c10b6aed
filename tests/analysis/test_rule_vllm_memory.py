from rundata import LOGS

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import vllm_memory

GIB = 2**30
V0_START = """\
INFO 03-10 04:03:20 model_runner.py:1115] Loading model weights took 14.9889 GB
INFO 03-10 04:03:24 worker.py:267] Memory profiling takes 5.61 seconds
INFO 03-10 04:03:24 worker.py:267] the current vLLM instance can use total_gpu_memory (79.15GiB) x \
gpu_memory_utilization ({util:.2f}) = 55.41GiB
INFO 03-10 04:03:24 worker.py:267] model weights take 14.99GiB; non_torch_memory takes 0.14GiB; PyTorch activation \
peak memory takes 36.28GiB; the rest of the memory reserved for KV Cache is 4.00GiB.
INFO 03-10 04:03:25 executor_base.py:110] # cuda blocks: 2048, # CPU blocks: 4681
INFO 03-10 04:03:25 executor_base.py:115] Maximum concurrency for 32768 tokens per request: 1.00x
"""
WEIGHTS_TOO_BIG = """\
INFO 03-10 04:03:20 model_runner.py:1115] Loading model weights took 61.03 GB
INFO 03-10 04:03:24 worker.py:267] the current vLLM instance can use total_gpu_memory (79.15GiB) x \
gpu_memory_utilization (0.50) = 39.58GiB
INFO 03-10 04:03:24 worker.py:267] model weights take 61.03GiB; non_torch_memory takes 0.14GiB; PyTorch activation \
peak memory takes 1.45GiB; the rest of the memory reserved for KV Cache is -23.04GiB.
ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing \
the engine.
"""


def _findings(*paths):
    findings = list(vllm_memory.check(load_evidence(list(paths)), vllm_memory.Config()))
    assert all(f.id == "vllm-memory" for f in findings)
    return findings


def _log(tmp_path, text):
    path = tmp_path / "vllm.log"
    path.write_text(text)
    return path


def test_engines_without_room_for_a_kv_cache_are_critical_and_healthy_ones_silent():
    negative, too_long = _findings(LOGS / "vllm_memory.log")
    # The negative KV cache, the 0 GPU blocks and the ValueError are one failed engine start.
    assert (negative.severity, negative.evidence["line_numbers"]) == ("critical", [13, 14, 15])
    assert round(negative.evidence["kv_cache_bytes"] / GIB, 2) == -1.25 and negative.evidence["num_gpu_blocks"] == 0
    assert "no memory for the KV cache" in negative.title and "-1.25 GiB" in negative.title
    assert negative.hints[0] == vllm_memory.HINT_RAISE
    assert any("NPROC_PER_NODE=N-1" in h for h in negative.hints)
    # max_model_len beyond what the cache holds: lowering it comes first.
    assert (too_long.severity, too_long.evidence["max_model_len"], too_long.evidence["kv_cache_tokens"]) == (
        "critical", 32768, 20000)
    assert too_long.hints[0] == vllm_memory.HINT_MAX_LEN and "vllm_max_model_len" in too_long.hints[0]


def test_a_kv_cache_for_one_max_length_request_is_a_throughput_warning_with_the_engines_figures(tmp_path):
    [f] = _findings(_log(tmp_path, V0_START.format(util=0.7)))
    ev = f.evidence
    assert f.severity == "warning" and ev["line_numbers"] == [1, 3, 4, 5, 6]  # one engine start, one finding
    assert (ev["gpu_memory_utilization"], ev["max_model_len"], ev["max_concurrency"]) == (0.7, 32768, 1.0)
    assert (ev["num_gpu_blocks"], round(ev["kv_cache_bytes"] / GIB, 2)) == (2048, 4.0)
    assert round(ev["weights_bytes"] / GIB, 2) == 14.99 and round(ev["activation_peak_bytes"] / GIB, 2) == 36.28
    assert ev["budget_bytes"] == int(ev["total_gpu_bytes"] * 0.7) and not ev["no_cache_memory"]
    assert "1.00 requests" in f.title and "32768" in f.title
    assert f.hints == (vllm_memory.HINT_THROUGHPUT,) and "0.85-0.9" in f.hints[0]


def test_no_advice_to_raise_utilization_that_is_already_high(tmp_path):
    [f] = _findings(_log(tmp_path, V0_START.format(util=0.9)))
    assert f.severity == "warning"
    assert not any("gpu_memory_utilization" in h for h in f.hints)
    assert f.hints[0] == vllm_memory.HINT_MAX_LEN


def test_weights_larger_than_vllms_share_point_at_tensor_parallelism(tmp_path):
    [f] = _findings(_log(tmp_path, WEIGHTS_TOO_BIG))
    assert f.severity == "critical" and f.evidence["weights_bytes"] > f.evidence["budget_bytes"]
    assert f.hints[0] == vllm_memory.HINT_TP and "vllm_tensor_parallel_size" in f.hints[0]
    assert vllm_memory.HINT_RAISE in f.hints  # 0.5 leaves room to raise


def test_concurrency_above_the_threshold_gives_no_finding(tmp_path):
    text = V0_START.format(util=0.9).replace("1.00x", "12.50x").replace("4.00GiB", "50.00GiB")
    assert _findings(_log(tmp_path, text)) == []
    assert _findings(LOGS / "nccl_errors.log") == []


def test_engines_of_different_ranks_are_kept_apart(tmp_path):
    text = ("[rank0]: INFO 12-23 23:34:23 [gpu_worker.py:298] Available KV cache memory: -0.50 GiB\n"
            "[rank1]: INFO 12-23 23:34:23 [gpu_worker.py:298] Available KV cache memory: 6.00 GiB\n"
            "[rank1]: INFO 12-23 23:34:23 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per "
            "request: 2.00x\n")
    by_rank = {f.ranks: f for f in _findings(_log(tmp_path, text))}
    assert by_rank[(0,)].severity == "critical" and by_rank[(0,)].title.startswith("rank 0: ")
    assert by_rank[(1,)].severity == "warning" and by_rank[(1,)].evidence["max_concurrency"] == 2.0
