"""watch's live findings: the report's rollout rules judged while the job runs, said once, cleared once.

Each round of watch's loop hands the new rank records (ProgressTracker.poll) here, and the tee threads
hand the job's output (`submit_output`); step_feed.py turns both into logged steps, one source at a
time (the event log; the printed metric lines only while the event log holds no metric), and
live_rules.py judges each step with the report's thresholds (checks/rollout_rules.py). A finding that
comes to stand is said in one line, once:

    grpo-doctor: live: CRITICAL constant-reward at step 1 (rank records): the reward is 1.0 for every ...

and, when a later step breaks it, one more line (`live: cleared ...`). A finding that stands again later
is said again, with its new step. The seed collisions watch's SeedCheck prints are kept with them.

Memory that grows toward an OOM (`memory-growth`, live_memory.py) is judged the same way from the
ranks' Memory records and, for a host whose ranks record none, from watch's samples (`check(records,
samples)`): said once as a warning, said again when its projected OOM comes near (critical), cleared
when the growth stops.

Everything said is in `supervisor/<host>/live-findings.json` (schema/live_findings.py), rewritten when
something changes, which `grpo-doctor summary` prints. With --alert-live, each critical finding goes to
the webhooks and --on-finding-exec once per id, as it is said (Alerter.send("live", ...)): at the end of
the job, the report's finding of an id already posted is not posted again.

Typical use:
    sentinels = Sentinels(host, out_path, write=files.write, alert=alerter.send if live else None, seeds=seeds)
    tee = OutputTee(..., on_lines=lambda b: sentinels.submit_output("stdout", b))
    for line in sentinels.check(records): console.note(line)     # each round
    for line in sentinels.finish(late_records): console.note(line)
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from grpo_doctor.checks.memory_trend import MemoryGrowthConfig
from grpo_doctor.schema.live_findings import live_findings_json
from grpo_doctor.schema.safe_write import write_file
from grpo_doctor.supervisor.alert_payload import finding_from_seed_collision
from grpo_doctor.supervisor.live_memory import JUDGE_BUDGET_S, MEMORY_SOURCE, LiveMemory
from grpo_doctor.supervisor.live_rules import LiveConfigs, SourceRules
from grpo_doctor.supervisor.seeds import SeedCheck
from grpo_doctor.supervisor.step_feed import EVENT_LOG_SOURCE, LoggedStep, StepFeed

MAX_KEPT = 200  # findings kept in the file (said and cleared); one per rule, source and episode
MEMORY_ORIGINS = {"event-log": "rank memory records", "watch-samples": "watch's samples"}
SOURCE_NAMES = {EVENT_LOG_SOURCE: "rank records", "trl": "TRL's printed metrics", "ms-swift": "ms-swift's printed "
                "metrics", "verl": "verl's printed metrics", "openrlhf": "OpenRLHF's printed metrics"}


class Sentinels:
    def __init__(self, host: str, out_path: Path, *, write: Callable[[str, Callable[[], None]], bool],
                 alert: Callable[[str, dict[str, Any]], None] | None = None, seeds: SeedCheck | None = None,
                 configs: LiveConfigs | None = None, memory_config: MemoryGrowthConfig | None = None) -> None:
        self.host = host
        self.out_path = out_path
        self._write = write  # (what, fn) -> bool: runs fn, a failure said once (watch's RunFiles.write)
        self._alert = alert
        self._seeds = seeds
        self._configs = configs
        self.feed = StepFeed()
        self.memory = LiveMemory(host, memory_config)
        self.sources: dict[str, SourceRules] = {}
        self.standing: dict[tuple, dict[str, Any]] = {}  # key -> the entry of live-findings.json
        self.kept: list[dict[str, Any]] = []  # every entry, said and cleared, in the order said
        self.alerted_ids: set[str] = set()
        self._console_sources: set[str] = set()  # printed sources judged (the event log had no metric)

    def submit_output(self, stream: str, chunk: bytes) -> None:
        """Whole lines of the job's output, from a tee thread: never blocks it, never raises."""
        try:
            self.feed.submit_output(stream, chunk)
        except Exception:  # noqa: BLE001 - a parser bug costs live findings, never the job's output
            pass

    def check(self, records: Iterable[object], samples: Iterable[object] = ()) -> list[str]:
        """The lines to print for what these records, watch's new samples and the output since the last
        call brought."""
        records = list(records)
        lines = self._judge(self.feed.records(records) + self.feed.output())
        return lines + self._judge_memory(self.memory.add_records(records) | self.memory.add_samples(samples))

    def finish(self, records: Iterable[object] = ()) -> list[str]:
        """At the end of the job: the last records and output, every step still open judged; the file is
        written even when nothing was said (the rules ran, and found nothing)."""
        records = list(records)
        lines = self._judge(self.feed.records(records) + self.feed.finish())
        self.memory.add_records(records)
        lines += self._judge_memory(self.memory.finish(), final=True)
        self._save()
        return lines

    def _judge_memory(self, fresh: bool, final: bool = False) -> list[str]:
        """memory-growth (live_memory.py), judged again when a memory series got a point: within a time
        budget while the job runs, all of it at the end."""
        if not fresh:
            return []
        lines = self._compare(MEMORY_SOURCE, self.memory.last_step, self.memory.standing(None if final else JUDGE_BUDGET_S))
        if lines or any(k[1] == MEMORY_SOURCE for k in self.standing):
            self._save()  # said, cleared, or the projection moved
        return lines

    def _judge(self, steps: list[LoggedStep]) -> list[str]:
        """Each step judged in turn, so that a finding is said at the step that made it stand (a round of
        watch's loop may bring several)."""
        lines, touched = [], set()
        for s in steps:
            if s.source != EVENT_LOG_SOURCE and self.feed.event_log_has_metrics:
                continue  # the report judges the event log alone then (analysis/load.py)
            rules = self.sources.get(s.source)
            if rules is None:
                rules = self.sources[s.source] = SourceRules(s.source, self._configs)
            rules.update(s)
            touched.add(s.source)
            lines += self._compare(s.source, s.step, rules.standing())
        if self._seed_collisions() or lines or any(k[1] in touched for k in self.standing):
            self._save()  # said, cleared, or a standing run went on
        return lines

    def _compare(self, source: str, step: int | None, now: dict[tuple, dict[str, Any]]) -> list[str]:
        lines = []
        for key in [k for k in self.standing if k[1] == source and k not in now]:
            entry = self.standing.pop(key)
            entry.update(state="cleared", cleared_at_step=step, cleared_t=time.time())
            lines.append(f"live: cleared {entry['id']}{_at(step)} ({_named(source, entry)}): said{_at(entry['said_at_step'])}: "
                         f"{entry['title']}")
        for key, finding in now.items():
            entry = self.standing.get(key)
            if entry is not None:  # the run goes on: its last step, its length, a projection that moved
                raised = finding["severity"] == "critical" and entry["severity"] != "critical"
                entry.update({k: v for k, v in finding.items() if k != "hosts"})
                if raised:  # a warning whose projected OOM came near
                    entry.update(critical_at_step=step, critical_t=time.time())
                    lines.append(f"live: CRITICAL {entry['id']}{_at(entry['step'])} ({_named(source, entry)}, a warning "
                                 f"since {_since(entry)}): {entry['title']}")
                    self._send(finding)
                continue
            entry = {**finding, "hosts": finding["hosts"] or sorted({self.feed.hosts[r] for r in finding["ranks"]
                                                                     if r in self.feed.hosts}) or [self.host],
                     "state": "standing", "said_at_step": step, "said_t": time.time(),
                     "cleared_at_step": None, "cleared_t": None}
            self.standing[key] = entry
            self.kept.append(entry)
            lines.append(f"live: {entry['severity'].upper()} {entry['id']}{_at(entry['step'])} "
                         f"({_named(source, entry)}): {entry['title']}")
            self._send(finding)
        return lines

    def _seed_collisions(self) -> bool:
        """The collisions SeedCheck said and withdrew (it prints its own lines), kept and alerted as live
        findings; whether anything changed."""
        if self._seeds is None:
            return False
        changed = False
        for shared in self._seeds.collisions:
            key = ("seed-collision", "rng", tuple(shared.ranks))
            if key in self.standing or any(e["id"] == "seed-collision" and tuple(e["ranks"]) == key[2]
                                           for e in self.kept):
                continue
            finding = finding_from_seed_collision(shared, self._seeds.hosts)
            entry = {**finding, "state": "standing", "said_at_step": shared.step, "said_t": time.time(),
                     "cleared_at_step": None, "cleared_t": None}
            self.standing[key] = entry
            self.kept.append(entry)
            self._send(finding)
            changed = True
        for ranks in self._seeds.withdrawn:
            entry = self.standing.pop(("seed-collision", "rng", tuple(ranks)), None)
            if entry is not None:
                entry.update(state="cleared", cleared_t=time.time())
                changed = True
        return changed

    def _send(self, finding: dict[str, Any]) -> None:
        if self._alert is not None and finding["severity"] == "critical" and finding["id"] not in self.alerted_ids:
            self.alerted_ids.add(finding["id"])
            self._alert("live", finding)

    def _save(self) -> None:
        del self.kept[:-MAX_KEPT]
        data = live_findings_json(self.host, self.kept, time.time())
        self._write(self.out_path.name, lambda: write_file(self.out_path, json.dumps(data, indent=2, default=str)))


def _named(source: str, finding: dict[str, Any] | None = None) -> str:
    if source == MEMORY_SOURCE and finding is not None:
        return MEMORY_ORIGINS.get(finding["evidence"].get("source"), source)
    return SOURCE_NAMES.get(source, source)


def _since(entry: dict[str, Any]) -> str:
    if entry["said_at_step"] is not None:
        return f"step {entry['said_at_step']}"
    return time.strftime("%H:%M:%S", time.localtime(entry["said_t"]))


def _at(step: int | None) -> str:
    return f" at step {step}" if step is not None else ""
