"""`hang`: watch saw the job stop making progress (from supervisor/<host>/hang-N.json).

Evidence keys: `host`, `hang_file`, `culprits` (ranks the others wait for, from grouped stacks),
`stuck_ranks` / `moving_ranks` (second look), `open_phases` ({rank: open phase path}),
`steps` ({rank: last step}), `max_idle_s` (longest time without progress), `stack_groups`
(one line per group of identical stacks), `stack_dirs`, `flight_recorder_files`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.rankset import format_ranks

ID = "hang"

HINTS = (
    "Compare the stacks of the named ranks with the others' (stack_dirs): the culprits are in a different "
    "collective or still computing; a rank in a different code path usually means launch settings differ "
    "between nodes: make NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT, CUDA_VISIBLE_DEVICES and use_vllm "
    "identical everywhere.",
    "Set TORCH_FR_BUFFER_SIZE=2000 (torch < 2.9: TORCH_NCCL_TRACE_BUFFER_SIZE) and TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
    "(grpo-doctor watch sets both) so the NCCL flight recorder names "
    "the rank missing from the collective next time.",
    "Make a hang fail fast instead of waiting the default 30 min: lower the collective timeout "
    "(ms-swift/TRL --ddp_timeout 600; torch init_process_group(timeout=timedelta(minutes=10))).",
    "Test connectivity between nodes before training (grpo-doctor probe) and scale up from one node.",
)


@dataclass(frozen=True)
class Config:
    pass  # every hang report watch wrote is a finding; watch's own thresholds decided it was one


def check(run: Evidence, cfg: Config) -> Iterator[Finding]:
    for report in run.hangs:
        ranks_info = {int(r): info for r, info in (report.get("ranks") or {}).items()}
        culprits = [int(r) for r in report.get("culprits") or []]
        stuck = [r for r, info in ranks_info.items() if info.get("verdict") == "stuck"]
        moving = [r for r, info in ranks_info.items() if info.get("verdict") == "moving"]
        named = culprits or stuck or sorted(ranks_info)
        lead = ranks_info.get(named[0], {}) if named else {}
        phase, step = lead.get("open_phase"), lead.get("step")
        idle = [info["idle_s"] for info in ranks_info.values() if isinstance(info.get("idle_s"), int | float)]
        host = report.get("host")
        where = f" in {phase}" if phase else ""
        at = f" at step {step}" if step is not None else ""
        if culprits:
            title = f"hang on {host}: the other ranks wait for rank(s) {format_ranks(culprits)}{where}{at}"
        else:
            title = f"hang on {host}: no progress from rank(s) {format_ranks(named)}{where}{at}"
        yield Finding(
            id=ID, severity="critical", title=title, ranks=tuple(named), hosts=(host,) if host else (),
            step=step, phase=phase,
            evidence={"host": host, "hang_file": report.get("file"), "culprits": culprits, "stuck_ranks": stuck,
                      "moving_ranks": moving,
                      "open_phases": {r: info.get("open_phase") for r, info in sorted(ranks_info.items())},
                      "steps": {r: info.get("step") for r, info in sorted(ranks_info.items())},
                      "max_idle_s": max(idle) if idle else None, "stack_groups": list(report.get("groups") or []),
                      "stack_dirs": list(report.get("stack_dirs") or []),
                      "flight_recorder_files": list(report.get("flight_recorder_files") or [])},
            hints=HINTS,
        )
