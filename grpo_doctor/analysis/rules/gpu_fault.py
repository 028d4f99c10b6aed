"""`gpu-fault`: a GPU failed under the job (the NVIDIA driver's Xid events, uncorrectable ECC errors,
NVLink errors, row remapping, NVML's recovery action, hardware throttling), and the ranks that ran on it.

Sources:
- watch's GPU samples (supervisor/<host>/samples.jsonl): per GPU of each host, the Xid events NVML
  reported, the rise of its uncorrected ECC errors and of its NVLink error totals during the run, a row
  remapping that failed or waits for a reset, the recovery action the driver asks for (other than
  "none"), and hardware throttling (thermal, power brake) in at least `min_throttle_frac` of its samples.
- the kernel log given as a raw log (dmesg, `journalctl -k`, syslog): the driver's "NVRM: Xid (PCI:...)"
  and "GPU has fallen off the bus" lines (logs/gpu_faults.py); the host from a syslog prefix.
- a CUDA error naming a hardware fault, in a log or a rank's error record: "uncorrectable ECC error
  encountered", "uncorrectable NVLink error detected during the execution".
A kernel line and the samples of the same GPU (its PCI bus id, on the same host or a log naming none)
are one finding.

The ranks that ran on the GPU: a rank whose pid NVML listed on it (by its header's pid or watch's
process samples of that host), whose header names the GPU's UUID, or whose pid the kernel line names
(a rank header's pid, or torchrun's report of a failed worker); for a CUDA error, the rank it came from.

Severity: critical for a machine fault (`hardware`: an Xid of the catalog's gpu / memory / NVLink
causes, rising uncorrectable ECC errors, a failed row remapping, a recovery action); warning for NVLink
errors, a pending row remapping, throttling, Xid 63 / 92; info for Xids that are the application's own
fault (13, 31, 43) or follow another event (45, 154), which are never the root cause of anything.
What each Xid calls for is logs/gpu_faults.py's XIDS, from NVIDIA's Xid catalog.

Evidence keys: `host`, `gpu` (NVML index; None when only a log named the GPU), `pci_bus_id`
("0000:3b:00"), `uuid`, `xids` (the Xid numbers, distinct, in order), `xid_details` ([{"xid",
"mnemonic", "what", "action" (the catalog's immediate action), "calls_for"}]), `hardware` (bool),
`pids` (processes the driver or NVML named on the GPU), `ecc_errors_delta` (uncorrected ECC errors
added during the run), `nvlink_errors_delta` ({"replay", "recovery", "crc"}: added during the run),
`remapped_rows_pending`, `remapped_rows_failure`, `recovery_action` (NVML's, the last one sampled),
`throttle_reasons` ({reason: fraction of the GPU's samples}), `sources` ("watch", "kernel-log",
"cuda-error"), `logs` (files read), `first_t` (wall s of the first sample that showed it), `cuda_errors`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from grpo_doctor.analysis.finding_facts import GpuFaultFacts
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.logs.gpu_faults import HARDWARE_CAUSES, XIDS, normalize_bus_id
from grpo_doctor.logs.kinds import CHILD_FAILED, CUDA_FAULT, GPU_FAULT
from grpo_doctor.schema.human_text import short_host
from grpo_doctor.schema.ranks import format_ranks

ID = "gpu-fault"
READS = {View.LOG_SIGNATURES, View.RANK_LOGS, View.RANKS, View.WATCH_ARTIFACTS}

HINT_DRAIN = ("Take the node out of scheduling before rerunning (Slurm: `scontrol update nodename=<node> state=drain "
              "reason=xid`; Kubernetes: `kubectl cordon <node>`) and resume from the last checkpoint elsewhere: a job "
              "restarted on the same GPU fails the same way. `nvidia-smi -q -i <gpu>` shows the GPU's state, "
              "`dmesg -T | grep -i xid` the driver's reports.")
HINT_ECC = ("Uncorrectable ECC errors: the GPU's memory returned bad data. `nvidia-smi -q -d ECC,ROW_REMAPPER -i <gpu>` "
            "shows the counts and whether a row remapping waits for a reset (it takes effect only then); drain the "
            "GPU and reset it, and take it out of service if the errors recur.")
HINT_NVLINK = ("NVLink errors rose during the run: `nvidia-smi nvlink -e -i <gpu>` shows them per link and `nvidia-smi "
               "nvlink -s` the links' state; replays and CRC errors that keep rising mean a bad link (reseat, service), "
               "and a collective over it can stall or fail (NCCL timeouts on the ranks of that node).")
HINT_THROTTLE = ("The GPU slowed its own clocks to protect the hardware (thermal slowdown, power brake): check its "
                 "cooling, the inlet temperature and the power supply (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE`); "
                 "a throttled GPU makes its rank a straggler that every collective waits for.")
HINT_RECOVERY = ("NVML's recovery action is what the driver says the GPU needs: gpu-reset -> `nvidia-smi -r -i <gpu>` "
                 "with no process on it; drain-and-reset -> stop the GPU's jobs first, then reset it; drain-p2p -> stop "
                 "peer-to-peer (NVLink) traffic to it first; node-reboot / system-reboot -> reboot the node.")
HINT_APPLICATION = ("Xid 13, 31 and 43 are the application's own fault on a healthy GPU (an illegal address in a "
                    "kernel): read the rank's CUDA error and rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel.")
HINTS = (HINT_DRAIN, HINT_ECC, HINT_NVLINK, HINT_THROTTLE, HINT_RECOVERY, HINT_APPLICATION)

# CUDA's own words for a hardware fault (cudaErrorECCUncorrectable, cudaErrorNvlinkUncorrectable).
CUDA_HARDWARE_ERRORS = {"uncorrectable ECC error encountered": "memory",
                        "uncorrectable NVLink error detected during the execution": "nvlink"}
_NVLINK_COLUMNS = (("replay", "nvlink_replay_errors"), ("recovery", "nvlink_recovery_errors"),
                   ("crc", "nvlink_crc_errors"))
_WARNING_XIDS = (63, 92)  # a row remapping recorded, corrected errors: worth knowing, nothing failed


@dataclass(frozen=True)
class Config:
    min_nvlink_errors: int = 1  # NVLink errors (replay + recovery + CRC) added during the run to report
    min_throttle_frac: float = 0.2  # share of a GPU's samples with hardware throttling to report it
    min_throttle_samples: int = 3  # and at least this many such samples


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    gpus = _from_samples(run, cfg)
    _add_kernel_lines(run, gpus)
    _add_cuda_errors(run, gpus)
    pid_ranks = _ranks_of_pid(run)
    for gpu in gpus.values():
        if not gpu["faults"]:
            continue
        ranks = set(gpu["ranks"])
        for pid in gpu["pids"]:
            ranks |= {rank for rank, host in pid_ranks.get(pid, []) if _same_host(host, gpu["host"])}
        yield _finding(gpu, tuple(sorted(ranks)))


def _new_gpu(host: str | None, index: int | None, bus_id: str | None, uuid: str | None) -> dict[str, Any]:
    return {"host": host, "index": index, "bus_id": bus_id, "uuid": uuid, "xids": [], "pids": set(), "ranks": set(),
            "faults": [], "severity": "info", "hardware": False, "sources": [], "logs": [], "first_t": None,
            "ecc_delta": None, "nvlink_delta": None, "pending": None, "failure": None, "recovery": None,
            "throttle": {}, "cuda_errors": []}


def _fault(gpu: dict[str, Any], what: str, severity: str, hardware: bool, source: str) -> None:
    gpu["faults"].append(what)
    order = ("info", "warning", "critical")
    if order.index(severity) > order.index(gpu["severity"]):
        gpu["severity"] = severity
    gpu["hardware"] = gpu["hardware"] or hardware
    if source not in gpu["sources"]:
        gpu["sources"].append(source)


def _add_xid(gpu: dict[str, Any], xid: int, source: str) -> None:
    if xid in gpu["xids"]:
        if source not in gpu["sources"]:
            gpu["sources"].append(source)
        return
    gpu["xids"].append(xid)
    info = XIDS.get(xid)
    cause = info.cause if info else "gpu"  # an Xid outside the table: the driver says the GPU failed
    hardware = cause in HARDWARE_CAUSES and xid not in _WARNING_XIDS
    severity = "critical" if hardware else "warning" if xid in _WARNING_XIDS else "info"
    _fault(gpu, f"Xid {xid} ({info.what})" if info else f"Xid {xid}", severity, hardware, source)


# --- watch's samples


def _from_samples(run: RunView, cfg: Config) -> dict[tuple, dict[str, Any]]:
    gpus: dict[tuple, dict[str, Any]] = {}
    samples = run.samples
    if samples.empty or "index" not in samples or "kind" not in samples:
        return gpus
    rows = samples[samples["kind"] == "gpu"]
    if rows.empty:
        return gpus
    procs = samples[samples["kind"] == "proc"]
    header_ranks = _header_ranks(run)
    for (host, index), group in rows.sort_values("t").groupby(["host", "index"], sort=True):
        uuid = _last(group, "uuid")
        gpu = gpus[(host, int(index))] = _new_gpu(host, int(index), normalize_bus_id(_last(group, "pci_bus_id")), uuid)
        for processes in group.get("processes", ()):
            gpu["pids"] |= {p["pid"] for p in processes or () if isinstance(p, dict) and isinstance(p.get("pid"), int)}
        for t, xids in zip(group["t"], group.get("xid_events", [()] * len(group)), strict=True):
            for xid in xids or ():
                if isinstance(xid, int):
                    _add_xid(gpu, xid, "watch")
                    gpu["first_t"] = t if gpu["first_t"] is None else min(gpu["first_t"], t)
        _sampled_counters(gpu, group, cfg)
        # ranks: processes watch sampled on this host with a pid NVML listed on the GPU; headers by UUID or pid
        if not procs.empty and "pid" in procs:
            on_host = procs[(procs["host"] == host) & procs["pid"].isin(list(gpu["pids"]))]
            gpu["ranks"] |= {int(r) for r in on_host["rank"].dropna()}
        gpu["ranks"] |= {rank for rank, (h, pid, gpu_uuid) in header_ranks.items()
                         if _same_host(h, host) and ((uuid and gpu_uuid == uuid) or pid in gpu["pids"])}
    return gpus


def _sampled_counters(gpu: dict[str, Any], group: pd.DataFrame, cfg: Config) -> None:
    ecc = _rise(group.get("ecc_errors"))
    if ecc:
        gpu["ecc_delta"] = ecc
        _fault(gpu, f"{ecc} uncorrectable ECC error(s)", "critical", True, "watch")
    nvlink = {name: _rise(group.get(column)) for name, column in _NVLINK_COLUMNS}
    if any(v is not None for v in nvlink.values()):
        gpu["nvlink_delta"] = {k: v or 0 for k, v in nvlink.items()}
        if sum(gpu["nvlink_delta"].values()) >= cfg.min_nvlink_errors:
            _fault(gpu, "NVLink errors (" + ", ".join(f"{v} {k}" for k, v in gpu["nvlink_delta"].items() if v) + ")",
                   "warning", False, "watch")
    pending, failure = _last(group, "remapped_rows_pending"), _last(group, "remapped_rows_failure")
    gpu["pending"], gpu["failure"] = pending, failure
    if failure is True:
        _fault(gpu, "a row remapping failed", "critical", True, "watch")
    elif pending is True:
        _fault(gpu, "a row remapping waits for a GPU reset", "warning", False, "watch")
    action = _last(group, "recovery_action")
    gpu["recovery"] = action
    if isinstance(action, str) and action != "none":
        _fault(gpu, f"NVML asks for {action}", "critical", True, "watch")
    if "throttle_reasons" in group:
        reasons = [tuple(r) if isinstance(r, (list, tuple)) else () for r in group["throttle_reasons"]]
        throttled = sum(bool(r) for r in reasons)
        if throttled >= cfg.min_throttle_samples and throttled >= cfg.min_throttle_frac * len(reasons):
            counts: dict[str, int] = {}
            for names in reasons:
                for name in names:
                    counts[name] = counts.get(name, 0) + 1
            gpu["throttle"] = {name: round(n / len(reasons), 3) for name, n in sorted(counts.items())}
            _fault(gpu, "hardware throttling (" + ", ".join(gpu["throttle"]) + ")", "warning", False, "watch")


def _rise(column: pd.Series | None) -> int | None:
    """How much a counter that only grows rose over the samples (a reset to a lower value starts again);
    None when no sample had it."""
    if column is None:
        return None
    values = [int(v) for v in column if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
    if not values:
        return None
    return sum(b - a for a, b in zip(values, values[1:], strict=False) if b > a)


def _last(group: pd.DataFrame, column: str) -> Any:
    if column not in group:
        return None
    values = [v for v in group[column] if v is not None and v == v]
    return values[-1] if values else None


# --- the kernel log, and CUDA's own words


def _add_kernel_lines(run: RunView, gpus: dict[tuple, dict[str, Any]]) -> None:
    rows = [r for r in run.signature_rows if r["kind"] == GPU_FAULT]
    # "GPU has fallen off the bus" without its Xid line repeats an Xid 79 of the same GPU in the same log
    with_xid = {(r["source"], r["fields"].get("pci_bus_id")) for r in rows if r["fields"].get("wording") == "xid"
                and r["fields"].get("xid") == 79}
    for row in rows:
        f = row["fields"]
        bus_id = normalize_bus_id(f.get("pci_bus_id"))
        if f.get("wording") == "fallen-off-bus" and (row["source"], f.get("pci_bus_id")) in with_xid:
            continue
        host = f.get("node") or row["host"]
        gpu = next((g for g in gpus.values() if bus_id and g["bus_id"] == bus_id and _same_host(g["host"], host)), None)
        if gpu is None:
            gpu = gpus.setdefault(("log", host, bus_id), _new_gpu(host, None, bus_id, None))
        if gpu["host"] is None:
            gpu["host"] = host
        _add_xid(gpu, f["xid"], "kernel-log")
        if isinstance(f.get("pid"), int):
            gpu["pids"].add(f["pid"])
        if row["source"] not in gpu["logs"]:
            gpu["logs"].append(row["source"])


def _add_cuda_errors(run: RunView, gpus: dict[tuple, dict[str, Any]]) -> None:
    found: list[tuple[int | None, str | None, str, str]] = []  # rank, host, error, log
    for row in run.signature_rows:
        if row["kind"] == CUDA_FAULT and row["fields"].get("error") in CUDA_HARDWARE_ERRORS:
            found.append((row["rank"], row["host"], row["fields"]["error"], row["source"]))
    for rank_number, rank_log in sorted(run.rank_logs.items()):
        for err in rank_log.errors:
            error = next((e for e in CUDA_HARDWARE_ERRORS if e in err.message), None)
            if error:
                found.append((rank_number, run.host_of(rank_number), error, "event-log"))
    for rank, host, error, log in found:
        # the rank's GPU when the samples named it; else one finding per host and kind of error
        gpu = next((g for g in gpus.values() if rank is not None and rank in g["ranks"]), None)
        if gpu is None:
            gpu = gpus.setdefault(("cuda", host, error), _new_gpu(host, None, None, None))
        if rank is not None:
            gpu["ranks"].add(rank)
        if error not in gpu["cuda_errors"]:
            gpu["cuda_errors"].append(error)
            _fault(gpu, f"CUDA: {error}", "critical", True, "cuda-error")
        if log not in gpu["logs"]:
            gpu["logs"].append(log)


# --- which rank ran where


def _header_ranks(run: RunView) -> dict[int, tuple[str | None, int, str | None]]:
    return {rank: (h.host, h.pid, h.gpu_uuid) for rank, h in run.headers.items()}


def _ranks_of_pid(run: RunView) -> dict[int, list[tuple[int, str | None]]]:
    """pid -> [(rank, host)]: every header of every rank (restarts too) and torchrun's failed workers."""
    found: dict[int, list[tuple[int, str | None]]] = {}
    for rank, log in run.rank_logs.items():
        for header in log.headers:
            found.setdefault(header.pid, []).append((rank, header.host))
    for row in run.signature_rows:
        f = row["fields"]
        if row["kind"] == CHILD_FAILED and isinstance(f.get("pid"), int) and f.get("rank") is not None:
            found.setdefault(f["pid"], []).append((f["rank"], f.get("host") or row["host"]))
    return found


def _same_host(a: str | None, b: str | None) -> bool:
    # short_host: "gpu-a67" is "gpu-a67.cluster", but 10.0.0.1 is not 10.0.0.2 (cut at a dot, both were "10")
    return a is None or b is None or short_host(a) == short_host(b)


# --- the finding


def _finding(gpu: dict[str, Any], ranks: tuple[int, ...]) -> Finding:
    details = [{"xid": x, "mnemonic": XIDS[x].mnemonic, "what": XIDS[x].what, "action": XIDS[x].action,
                "calls_for": XIDS[x].calls_for} if x in XIDS else {"xid": x, "mnemonic": None, "what": None,
                                                                   "action": None, "calls_for": None}
               for x in gpu["xids"]]
    which = f"GPU {gpu['index']}" if gpu["index"] is not None else "a GPU"
    if gpu["bus_id"]:
        which += f" ({gpu['bus_id']})"
    where = f" on {gpu['host']}" if gpu["host"] else ""
    who = f": rank(s) {format_ranks(list(ranks))} ran on it" if ranks else ""
    title = f"{which[0].upper()}{which[1:]}{where} reported {', '.join(gpu['faults'][:3])}{who}"
    return Finding(
        id=ID, severity=gpu["severity"], title=title, ranks=ranks, hosts=(gpu["host"],) if gpu["host"] else (),
        evidence={"host": gpu["host"], "gpu": gpu["index"], "pci_bus_id": gpu["bus_id"], "uuid": gpu["uuid"],
                  "xids": list(gpu["xids"]), "xid_details": details, "hardware": gpu["hardware"],
                  "pids": sorted(gpu["pids"]), "ecc_errors_delta": gpu["ecc_delta"],
                  "nvlink_errors_delta": gpu["nvlink_delta"], "remapped_rows_pending": gpu["pending"],
                  "remapped_rows_failure": gpu["failure"], "recovery_action": gpu["recovery"],
                  "throttle_reasons": gpu["throttle"], "sources": list(gpu["sources"]), "logs": list(gpu["logs"]),
                  "first_t": gpu["first_t"], "cuda_errors": list(gpu["cuda_errors"])},
        facts=GpuFaultFacts(host=gpu["host"], gpu=gpu["index"], xids=tuple(gpu["xids"]), hardware=gpu["hardware"],
                            cuda_errors=tuple(gpu["cuda_errors"]), throttle_reasons=tuple(gpu["throttle"])),
        hints=_hints(gpu, details),
    )


def _hints(gpu: dict[str, Any], details: list[dict[str, Any]]) -> tuple[str, ...]:
    hints = [f"Xid {d['xid']} ({d['mnemonic']}): {d['calls_for']}." for d in details if d["calls_for"]]
    if gpu["hardware"]:
        hints.append(HINT_DRAIN)
    if gpu["ecc_delta"] or gpu["pending"] or gpu["failure"] or any(x in (48, 63, 64, 94, 95) for x in gpu["xids"]) \
            or any("ECC" in e for e in gpu["cuda_errors"]):
        hints.append(HINT_ECC)
    if gpu["nvlink_delta"] and any(gpu["nvlink_delta"].values()) or any("NVLink" in e for e in gpu["cuda_errors"]) \
            or any(XIDS.get(x) and XIDS[x].cause == "nvlink" for x in gpu["xids"]):
        hints.append(HINT_NVLINK)
    if isinstance(gpu["recovery"], str) and gpu["recovery"] != "none":
        hints.append(HINT_RECOVERY)
    if gpu["throttle"]:
        hints.append(HINT_THROTTLE)
    if any(XIDS.get(x) and XIDS[x].cause == "application" for x in gpu["xids"]):
        hints.append(HINT_APPLICATION)
    return tuple(dict.fromkeys(hints))
