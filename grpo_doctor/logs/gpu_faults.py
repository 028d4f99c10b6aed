"""GPU faults the NVIDIA driver writes to the kernel log (dmesg, `journalctl -k`, /var/log/syslog).

Read, one signature per line (wordings from public issues: NVIDIA/gpu-operator, NVIDIA/nvidia-docker,
NVIDIA/open-gpu-kernel-modules, NVIDIA/NVSentinel, leptonai/gpud):
    NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) ...
    NVRM: Xid (PCI:0000:61:00): 119, pid=905052, name=python, Timeout waiting for RPC from GSP! Expected ...
    NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.          (no pid: the whole GPU is gone)
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: ...     (MIG: the GPU instance after the bus id)
    NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.                  (the same event, without its Xid)
    NVRM: GPU at 0000:01:00.0 has fallen off the bus.                    (older drivers)
    NVRM: The NVIDIA GPU 0000:b3:00.0 / NVRM: (PCI ID: 10de:26b5) installed in this system has /
        NVRM: fallen off the bus and is not responding to commands.  (three lines, joined by the scanner)
behind any prefix: dmesg's uptime "[ 1843.308145] ", `dmesg -T`'s "[Mon Mar  6 21:37:31 2023] ", syslog's
and journalctl's "Dec  2 11:38:47 worker4 kernel: " (whose host the scanner keeps as `node`).

`XIDS` says what each Xid that matters in training calls for, from NVIDIA's Xid catalog.

Typical use:
    parse_gpu_fault("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.")
    # {"xid": 79, "pci_bus_id": "0000:3b:00", "pid": 1234, "process": "python", ...}
    XIDS[79].action   # "RESTART_BM"
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# The pre-check's spellings (detectors.KEYWORDS): each holds an anchor byte (chunk_keywords.RARE_BYTES).
KEYWORDS = ("Xid (PCI", "fallen off the bus", "The NVIDIA GPU")
# The first line of the three-line "fallen off the bus" report of newer drivers; the scanner joins it.
FALLEN_START = "NVRM: The NVIDIA GPU"
FALLEN_WORDS = ("fallen off the bus", "not responding to commands")

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?"
                  r"(?: ([^)]*))?\): (\d+), ?(.*)")
_PID = re.compile(r"^pid=(?:'?<?(?:unknown|N/A)>?'?|(\d+)),\s*")
_NAME = re.compile(r"^name=(<unknown>|[^,\s]+),\s*")
_BUS_ID = re.compile(r"\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\b")
# syslog / journalctl: "Dec  2 11:38:47 worker4 kernel: ...", "2024-01-07T03:14:15+0000 node-3 kernel: ...".
_NODE = re.compile(r"\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+([A-Za-z0-9][\w.-]*)\s+kernel(?:\[\d+\])?: ")


@dataclass(frozen=True)
class XidInfo:
    mnemonic: str  # NVIDIA's name for it
    action: str  # the catalog's "Resolution Bucket (Immediate Action)"
    cause: str  # "application", "follow-up", "memory", "nvlink", "gpu" (hardware / firmware / driver)
    what: str  # in a few words
    calls_for: str  # what to do about it, in a sentence


# The Xids that matter in training. Mnemonics and immediate actions: NVIDIA's Xid catalog
# (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, "Resolution Bucket (Immediate
# Action)"), as NVIDIA ships it in NVIDIA/NVSentinel's distros/kubernetes/nvsentinel/charts/
# gpu-health-monitor/xiderrorsmapping.csv; 48/63/64/94/95 as described in NVIDIA's "GPU Memory Error
# Management" (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/user-visible-statistics.html:
# 48 an uncorrectable ECC error, 94 contained, 95 uncontained, 63 a row remapping recorded, 64 its
# recording failed; a pending remapping takes effect at the next GPU reset). Xids not listed here are
# reported with their number only.
_RESET = "drain the GPU's jobs and reset it (nvidia-smi -r -i <gpu>, or reboot the node); if it recurs, take the GPU out of service"
XIDS: dict[int, XidInfo] = {
    13: XidInfo("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", "application", "graphics engine exception",
                "usually the application's own fault (an out-of-range access in a kernel): restart it, and rerun "
                "with CUDA_LAUNCH_BLOCKING=1 to find the kernel"),
    31: XidInfo("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "application", "GPU memory page fault",
                "usually the application's own illegal memory access: restart it, and rerun with "
                "CUDA_LAUNCH_BLOCKING=1 to find the kernel"),
    43: XidInfo("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", "application", "GPU stopped processing",
                "the application's channel was stopped after its own fault: look at its error, the GPU is fine"),
    45: XidInfo("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", "follow-up", "channels torn down",
                "a follow-up: the process ended or another Xid came first; act on that one"),
    46: XidInfo("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", "gpu", "GPU stopped processing", _RESET),
    48: XidInfo("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "memory", "uncorrectable (double-bit) ECC error",
                _RESET),
    62: XidInfo("PMU_HALT_ERROR", "RESET_GPU", "gpu", "PMU halted", _RESET),
    63: XidInfo("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "memory", "row remapping recorded",
                "a bad memory row was marked for remapping: it takes effect at the next GPU reset (reset the GPU "
                "when its jobs are drained)"),
    64: XidInfo("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "memory", "row remapping failed", _RESET),
    74: XidInfo("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "nvlink", "NVLink error",
                "check the GPU's NVLink connections (nvidia-smi nvlink -s / -e), drain and reset the GPU; a link "
                "that keeps failing needs service"),
    79: XidInfo("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "gpu", "GPU has fallen off the bus",
                "drain the node and power-cycle it; check the GPU's power, temperature and seating (lspci, the "
                "BMC's logs); if it recurs, take the GPU out of service"),
    92: XidInfo("EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "memory", "many corrected (single-bit) ECC errors",
                "corrected errors only: watch the GPU's ECC counters (nvidia-smi -q -d ECC)"),
    94: XidInfo("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "memory", "contained uncorrectable ECC error",
                "the process that hit the bad memory was ended and the page retired: restart the job; the "
                "remapping takes effect at the next GPU reset"),
    95: XidInfo("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "memory", "uncontained uncorrectable ECC error",
                _RESET),
    109: XidInfo("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "gpu", "context switch timeout", _RESET),
    119: XidInfo("GSP_RPC_TIMEOUT", "RESET_GPU", "gpu", "GSP firmware RPC timeout", _RESET),
    120: XidInfo("GSP_ERROR", "RESET_GPU", "gpu", "GSP firmware error", _RESET),
    136: XidInfo("ALI_TRAINING_FAIL", "RESET_GPU", "nvlink", "NVLink link training failed", _RESET),
    140: XidInfo("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", "memory", "unrecoverable ECC error", _RESET),
    **{xid: XidInfo(name, "WORKFLOW_NVLINK5_ERR", "nvlink", f"NVLink {part} error",
                    "check the NVLink fabric (nvidia-smi nvlink -e, the fabric manager's log); drain and reset "
                    "the GPU, or the node when several GPUs report it")
       for xid, name, part in ((144, "NVLINK_SAW_ERROR", "SAW"), (145, "NVLINK_RLW_ERROR", "RLW"),
                               (146, "NVLINK_TLW_ERROR", "TLW"), (147, "NVLINK_TREX_ERROR", "TREX"),
                               (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLPW"), (149, "NVLINK_NETIR_ERROR", "NETIR"),
                               (150, "NVLINK_MSE_ERROR", "MSE"))},
    154: XidInfo("GPU_RECOVERY_ACTION_CHANGED", "Follow guidance as it applies to another Xid", "follow-up",
                 "GPU recovery action changed", "a follow-up: act on the Xid it follows (and NVML's recovery action)"),
}
# Causes whose Xid says the machine failed (not the application, not a note after another Xid).
HARDWARE_CAUSES = ("gpu", "memory", "nvlink")


def parse_gpu_fault(text: str) -> dict[str, Any] | None:
    """An Xid event, or a GPU that fell off the bus; None for any other line."""
    if "Xid (" in text:
        m = _XID.search(text)
        if m is not None:
            rest, pid, process = m.group(4).strip(), None, None
            pid_m = _PID.match(rest)
            if pid_m:
                pid = int(pid_m.group(1)) if pid_m.group(1) else None
                rest = rest[pid_m.end():]
                name_m = _NAME.match(rest)
                if name_m:
                    process = None if name_m.group(1) == "<unknown>" else name_m.group(1)
                    rest = rest[name_m.end():]
            return {"xid": int(m.group(3)), "pci_bus_id": normalize_bus_id(m.group(1)), "pid": pid,
                    "process": process, "detail": rest.strip()[:300] or None, "instance": m.group(2) or None,
                    "wording": "xid"}
    if "fallen off the bus" in text:
        bus = _BUS_ID.search(text)
        return {"xid": 79, "pci_bus_id": normalize_bus_id(bus.group(1)) if bus else None, "pid": None,
                "process": None, "detail": "GPU has fallen off the bus", "instance": None, "wording": "fallen-off-bus"}
    return None


def normalize_bus_id(bus_id: str | None) -> str | None:
    """"0000:3b:00" from the kernel's "PCI:0000:3B:00", "0000:3b:00.0" or NVML's "00000000:3B:00.0": one
    spelling, so that a kernel line and an NVML sample of the same GPU compare equal."""
    if not bus_id:
        return None
    m = _BUS_ID.search(bus_id)
    if m is None:
        return None
    domain, bus, device = m.group(1).split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}"


def node_of(line: str) -> str | None:
    """The host a syslog or journalctl line names before "kernel:" (None for dmesg's own output)."""
    m = _NODE.search(line) if "kernel" in line else None
    return m.group(1) if m else None


def starts_fallen(text: str) -> bool:
    return FALLEN_START in text and not any(word in text for word in FALLEN_WORDS)


def fallen_complete(text: str) -> bool:
    return any(word in text for word in FALLEN_WORDS)
