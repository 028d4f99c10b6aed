"""What an alert says: the finding as JSON, a short Markdown message, and the exec command's variables.

An alert carries one finding in the shape of findings.json (`id`, `severity`, `title`, `ranks`,
`hosts`, `step`, `phase`, `evidence`, `hints`). At the end of the job it is the report's own finding;
during the job (a hang, a live seed collision) watch has no report yet, so the finding is made here
from what watch holds: the hang report (supervisor/<host>/hang-N.json) or the shared seed.

The webhook body is `{"text": MESSAGE, "grpo_doctor": PAYLOAD}`: Slack and Mattermost incoming
webhooks show `text` (Markdown both render: `*emphasis*`, `code`, emoji shortcodes) and ignore the
other key; any other receiver reads PAYLOAD, the same object the exec command gets on stdin.

Typical use:
    payload = alert_payload("hang", finding_from_hang(report, hang_file), host="node-1", run_dir=run_dir)
    body = webhook_body(payload)               # POST as JSON
    env = exec_environment(payload)            # GRPO_DOCTOR_FINDING_ID=hang, ...
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo_doctor.checks.rng_sharing import GENERATOR_NAMES, REMEDY, SharedRngState
from grpo_doctor.schema.ranks import format_ranks
from grpo_doctor.schema.watch_files import HangReport

EVENTS = ("hang", "finding", "live")  # at a hang; a critical finding at the end; a critical finding live
MAX_TEXT_CHARS = 3000  # a chat message read at a glance (Slack cuts `text` at 40,000)
MAX_EVIDENCE_CHARS = 50_000  # above this the evidence (stacks) stays in the run directory, not the body
HANG_REMEDY = ("Read the stacks of the named ranks against the others' (hang file, stack_dirs): a different "
               "collective, user code (a reward function, a data loader, a request to a rollout server), or "
               "still computing; then run `grpo-doctor report` on the run directory.")
_EVENT_HEADS = {"hang": "detected while the job runs", "finding": "at the end of the job", "live": "seen while the job runs"}


def finding_from_hang(report: HangReport, hang_file: Path | None = None) -> dict[str, Any]:
    """The `hang` finding as watch knows it at the hang, before any report: the ranks the others wait
    for (else the stuck ones, else all), their phase and step, the stack groups."""
    stuck, moving = report.ranks_with_verdict("stuck"), report.ranks_with_verdict("moving")
    named = list(report.culprits or stuck or sorted(report.ranks))
    lead = report.ranks.get(named[0]) if named else None
    phase, step = (lead.open_phase, lead.step) if lead else (None, None)
    where = (f" in {phase}" if phase else "") + (f" at step {step}" if step is not None else "")
    host = report.host or None
    if report.culprits:
        title = f"hang on {host}: the other ranks wait for rank(s) {format_ranks(named)}{where}"
    else:
        title = f"hang on {host}: no progress from rank(s) {format_ranks(named)}{where}"
    return {
        "id": "hang", "severity": "critical", "title": title, "ranks": named, "hosts": [host] if host else [],
        "step": step, "phase": phase,
        "evidence": {"source": "watch", "host": host, "hang_file": str(hang_file) if hang_file else None,
                     "culprits": list(report.culprits), "stuck_ranks": list(stuck), "moving_ranks": list(moving),
                     "open_phases": {str(r): i.open_phase for r, i in sorted(report.ranks.items())},
                     "steps": {str(r): i.step for r, i in sorted(report.ranks.items())},
                     "stack_groups": list(report.groups), "stack_dirs": list(report.stack_dirs)},
        "hints": [HANG_REMEDY], "role": None, "caused_by": None,
    }


def finding_from_seed_collision(shared: SharedRngState, hosts: Mapping[int, str]) -> dict[str, Any]:
    """The `seed-collision` finding as watch sees it live from the ranks' rng records: critical where the
    rollout engine's sampling seed itself is shared, a warning for a torch generator (as the rule says)."""
    on = sorted({hosts[r] for r in shared.ranks if r in hosts})
    shown = f" {shared.value}" if shared.generator == "sampling_seed" else ""
    return {
        "id": "seed-collision", "severity": "critical" if shared.generator == "sampling_seed" else "warning",
        "title": (f"ranks {format_ranks(shared.ranks)} share {GENERATOR_NAMES[shared.generator]}{shown}: "
                  "copies of a prompt sampled there come out identical"),
        "ranks": list(shared.ranks), "hosts": on, "step": shared.step, "phase": None,
        "evidence": {"source": "watch", "generator": shared.generator, "audit_tag": shared.tag,
                     "shared_generators": list(shared.shared_generators)},
        "hints": [REMEDY[0].upper() + REMEDY[1:] + "."], "role": None, "caused_by": None,
    }


def alert_payload(event: str, finding: Mapping[str, Any], *, host: str, run_dir: Path,
                  report: Path | None = None) -> dict[str, Any]:
    """The object the exec command reads on stdin and the webhook body carries under `grpo_doctor`."""
    finding = dict(finding)
    if len(json.dumps(finding.get("evidence") or {}, default=str)) > MAX_EVIDENCE_CHARS:
        finding["evidence"] = {"omitted": f"over {MAX_EVIDENCE_CHARS} characters; see findings.json"}
    # Absolute: whoever reads the alert is not in the directory watch was started from.
    return {"event": event, "host": host, "run_dir": str(Path(run_dir).absolute()),
            "report": str(Path(report).absolute()) if report else None,
            "finding": finding}


def alert_text(payload: Mapping[str, Any]) -> str:
    """The chat message: verdict, rank(s), host, phase/step, top remedy, run directory."""
    f = payload["finding"]
    lines = [f":rotating_light: *grpo-doctor: {f['severity'].upper()} {f['id']}* {f['title']}"]
    where = [_EVENT_HEADS[payload["event"]], f"rank(s) {format_ranks(f['ranks'])}" if f.get("ranks") else None,
             f"host {', '.join(f['hosts'])}" if f.get("hosts") else f"host {payload['host']}",
             f"phase `{f['phase']}`" if f.get("phase") else None,
             f"step {f['step']}" if f.get("step") is not None else None]
    lines.append(" · ".join(w for w in where if w))
    if f.get("hints"):
        lines.append(f"remedy: {f['hints'][0]}")
    lines.append(f"run dir: `{payload['run_dir']}` on {payload['host']}")
    if payload.get("report"):
        lines.append(f"report: `{payload['report']}`")
    text = "\n".join(lines)
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS - 1] + "…"


def webhook_body(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON a Slack or Mattermost incoming webhook accepts, the finding alongside."""
    return {"text": alert_text(payload), "grpo_doctor": dict(payload)}


def exec_environment(payload: Mapping[str, Any]) -> dict[str, str]:
    """GRPO_DOCTOR_* variables for the exec command (docs/alerts.md lists them); empty when unknown."""
    f = payload["finding"]
    hang_file = (f.get("evidence") or {}).get("hang_file") if payload["event"] == "hang" else None
    return {
        "GRPO_DOCTOR_EVENT": payload["event"],
        "GRPO_DOCTOR_FINDING_ID": f["id"],
        "GRPO_DOCTOR_SEVERITY": f["severity"],
        "GRPO_DOCTOR_TITLE": f["title"],
        "GRPO_DOCTOR_RANKS": ",".join(str(r) for r in f.get("ranks") or ()),
        "GRPO_DOCTOR_HOSTS": ",".join(f.get("hosts") or ()),
        "GRPO_DOCTOR_HOST": payload["host"],
        "GRPO_DOCTOR_PHASE": f.get("phase") or "",
        "GRPO_DOCTOR_STEP": "" if f.get("step") is None else str(f["step"]),
        "GRPO_DOCTOR_REMEDY": (f.get("hints") or [""])[0],
        "GRPO_DOCTOR_RUN_DIR": payload["run_dir"],
        "GRPO_DOCTOR_REPORT": payload.get("report") or "",
        "GRPO_DOCTOR_HANG_FILE": hang_file or "",
        "GRPO_DOCTOR_MESSAGE": alert_text(payload),
    }
