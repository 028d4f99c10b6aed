"""The typed part of a finding's evidence: what other code reads of it (analysis/incidents.py), as attributes.

A rule writes its evidence as a dict for findings.json (docs/findings.md names every key); the few
values that another module judges by are also given as one of these, built in the same place from the
same values, so a key renamed in one rule cannot silently break the chain from cause to effect
(incidents.py once read `detail` / `error_code` / `last_error` of nccl-error findings, keys that rule
never wrote). Each field has the name of its evidence key and the same value; tests/analysis/
test_rules_registry.py holds the two equal for every finding the fixtures produce.

Typical use:
    Finding(id="nccl-error", ..., evidence={..., "peer_departed": True}, facts=NcclErrorFacts(peer_departed=True))
    crash_facts(finding).signal                   # "SIGKILL", or None (also for a finding of another kind)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_doctor.analysis.findings import Finding


@dataclass(frozen=True)
class CrashFacts:
    """rank-crash: how the process ended."""

    exc_type: str | None = None
    message: str | None = None
    signal: str | None = None  # "SIGKILL", ...
    exitcode: int | None = None
    cuda_fault: str | None = None  # the CUDA error it died of ("uncorrectable ECC error encountered")
    root_cause: bool | None = None  # torchrun named it "Root Cause (first observed failure)"


@dataclass(frozen=True)
class NcclErrorFacts:
    """nccl-error: whether the peer went away (a remote-peer error or NCCL's own words say so)."""

    peer_departed: bool = False


@dataclass(frozen=True)
class HangFacts:
    """hang: the culprit ranks one host's ranks wait for (empty: this finding names the culprits)."""

    waiting_for: tuple[int, ...] = ()


@dataclass(frozen=True)
class GpuFaultFacts:
    """gpu-fault: the GPU, whether the machine failed, and the CUDA errors and throttling seen on it."""

    host: str | None = None
    gpu: int | None = None
    xids: tuple[int, ...] = ()
    hardware: bool = False
    cuda_errors: tuple[str, ...] = ()
    throttle_reasons: tuple[str, ...] = ()  # the throttling reasons reported (their shares stay in the evidence)


@dataclass(frozen=True)
class GrowthFacts:
    """memory-growth: which memory grew ("gpu" or "host")."""

    memory: str | None = None


Facts = CrashFacts | NcclErrorFacts | HangFacts | GpuFaultFacts | GrowthFacts


def crash_facts(f: Finding) -> CrashFacts:
    return f.facts if isinstance(f.facts, CrashFacts) else CrashFacts()


def nccl_error_facts(f: Finding) -> NcclErrorFacts:
    return f.facts if isinstance(f.facts, NcclErrorFacts) else NcclErrorFacts()


def hang_facts(f: Finding) -> HangFacts:
    return f.facts if isinstance(f.facts, HangFacts) else HangFacts()


def gpu_fault_facts(f: Finding) -> GpuFaultFacts:
    return f.facts if isinstance(f.facts, GpuFaultFacts) else GpuFaultFacts()


def growth_facts(f: Finding) -> GrowthFacts:
    return f.facts if isinstance(f.facts, GrowthFacts) else GrowthFacts()
