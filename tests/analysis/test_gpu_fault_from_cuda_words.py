"""A CUDA error that names a hardware fault leads as `gpu-fault`, with the crash it caused after it, in
every wording CUDA and PyTorch used (lines from the corpus's real cases: sources in their .json)."""
import pytest

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules

LINES = {
    # PyTorch with CUDA 12: the error, then where to read about it, on one line
    "search-for": "CUDA error: uncorrectable ECC error encountered Search for `cudaErrorECCUncorrectable' in "
                  "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
    # PyTorch before 1.0 (THC)
    "thc": "RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered at "
           "/pytorch/aten/src/THC/THCCachingHostAllocator.cpp:265",
    "runtime-error": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
}


@pytest.mark.parametrize("wording", sorted(LINES))
def test_an_uncorrectable_ecc_error_is_the_root_cause_of_the_crash_it_ends(tmp_path, wording):
    log = tmp_path / "train.log"
    log.write_text(LINES[wording] + "\n")
    findings = run_rules(load_evidence([log]))[0]
    assert [(f.id, f.role) for f in findings] == [("gpu-fault", "root-cause"), ("rank-crash", "consequence")]
    assert findings[0].evidence["cuda_errors"] == ["uncorrectable ECC error encountered"]
