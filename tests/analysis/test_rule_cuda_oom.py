from pathlib import Path

from rundata import LOGS, common, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import cuda_oom
from grpo_doctor.schema import Error

GIB = 2**30
CASE4 = ("CUDA out of memory. Tried to allocate 1.42 GiB. GPU 7 has a total capacity of 79.35 GiB of which "
         "950.19 MiB is free. Process 48213 has 29.59 GiB memory in use. Process 48377 has 48.83 GiB memory in use. "
         "Of the allocated memory 27.01 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but "
         "unallocated.")


def _findings(*paths):
    return list(cuda_oom.check(load_evidence(list(paths)), cuda_oom.Config()))


def test_case4_other_processes_holding_the_gpu_points_at_vllm_reservation():
    by_gpu = {f.evidence["gpu"]: f for f in _findings(LOGS / "cuda_oom_variants.log") if f.ranks == (7,)}
    f = by_gpu[7]
    assert f.id == "cuda-oom" and f.severity == "critical"
    assert round(f.evidence["requested_bytes"] / GIB, 2) == 1.42 and round(f.evidence["total_bytes"] / GIB, 2) == 79.35
    assert [p["pid"] for p in f.evidence["processes"]] == [48213, 48377]
    assert f.evidence["others_bytes"] > 40 * GIB
    # sleep / offload first, then a smaller share for vLLM, then GPUs of its own (server mode)
    assert f.hints[:3] == (cuda_oom.HINT_OTHERS, cuda_oom.HINT_SHARE, cuda_oom.HINT_RESERVE)
    assert "vllm_enable_sleep_mode=True" in f.hints[0] and "--sleep_level 1" in f.hints[0]
    assert "TRL colocate 0.3" in f.hints[1] and "(e.g. 0.5)" not in f.hints[1]
    assert "NPROC_PER_NODE=N-1 alone no longer" in f.hints[2] and "Duplicate GPU detected" in f.hints[2]
    assert not any("expandable_segments" in h for h in f.hints)  # 1.02 GiB unallocated < 1.42 GiB requested


def test_reserved_but_unallocated_over_the_request_suggests_expandable_segments():
    f = next(f for f in _findings(LOGS / "cuda_oom_variants.log") if f.ranks == (2,))
    assert f.evidence["reserved_unallocated_bytes"] >= f.evidence["requested_bytes"]
    [hint] = [h for h in f.hints if "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in h]
    assert hint.index("sleep mode is off") < hint.index("expandable_segments:True")  # only without sleep mode
    assert "Expandable segments are not compatible with memory pool" in hint


def test_an_oom_of_vllms_sleep_mode_allocator_never_suggests_expandable_segments():
    log = Path(__file__).resolve().parents[1] / "data" / "corpus" / "vllm" / "wake-up-cumem-allocator-oom-72b.log"
    findings = _findings(log)
    assert findings and all(f.evidence["wording"] == "cumem" for f in findings)
    for f in findings:
        assert f.hints[0] == cuda_oom.HINT_CUMEM and "--offload_model true" in f.hints[0]
        assert not any("expandable_segments:True" in h for h in f.hints)


def test_plenty_free_is_said_not_to_be_a_capacity_problem():
    f = next(f for f in _findings(LOGS / "cuda_oom_variants.log") if f.evidence["gpu"] == 1 and not f.ranks)
    assert f.evidence["allowed_bytes"] and "not a capacity problem" in f.hints[0]


def test_an_error_record_with_the_oom_message_is_a_finding_with_its_phase(tmp_path):
    write_rank(tmp_path, 7, [header(7, 8), Error(**common(7, step=3), exc_type="torch.OutOfMemoryError",
                                                 message=CASE4, traceback="", phase="rollout", path="rollout")])
    [f] = _findings(tmp_path)
    assert (f.ranks, f.hosts, f.phase, f.step, f.evidence["gpu"]) == ((7,), ("node-3",), "rollout", 3, 7)
    assert "vllm_enable_sleep_mode" in f.hints[0] and "vllm_gpu_memory_utilization" in f.hints[1]
