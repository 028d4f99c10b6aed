"""`hang`: the job stopped making progress, and the rank(s) the others waited for.

Two sources. watch's hang reports (supervisor/<host>/hang-N.json), made while the job hung, with
every rank's stack. Without watch, the rank records alone: another rank raised a collective timeout
(gloo's "Timed out waiting 20000ms", NCCL's watchdog) while this rank sat in an open phase without
progress for (nearly) the whole timeout and was stopped (SIGTERM) only afterwards; or nobody
raised, every rank stood still for `min_idle_s` until the job was stopped from outside (a time
limit, Ctrl-C), and this rank was still in a phase that every other rank had completed in that step.

Evidence keys: `source` ("watch" or "event-log"), `culprits` (ranks the others wait for),
`open_phases` ({rank: open phase path}), `steps` ({rank: the step it stopped in}), `max_idle_s` (longest time
without progress). From watch also: `host`, `hang_file`, `odd_ranks` (ranks outside the largest group
of identical stacks, as hang-N.json says; with no culprit named, those waiting in a different
collective from the others: a desync), `stuck_ranks` / `moving_ranks` (second look), `stack_groups`
(one line per group of identical stacks), `culprit_stacks` ({rank: ["function (file:line)", ...]}
innermost first, grpo-doctor's own threads left out), `culprit_code` ({rank: {"in_user_code",
"where", "user_frame"}}), `culprit_kind` ({rank: {"kind", "frame", "caller", "op"}}: what the stack shows
the rank waiting on, "reward", "data-loader", "server-request", "collective" or "unknown", the frame that
hangs and the library frame around it; analysis/culprit_kind.py), `stack_dirs`, `flight_recorder_files`. From the rank records also:
`waiting_ranks`, `idle_s` ({culprit: s}), `timeout_ms`, `waiting_calls` ({rank: {"op", "site", ...}}:
the collective each waiting rank timed out in), `waiting_errors`, `ended` ({culprit: how it ended}).

Where the culprits are (analysis/parallel_layout.py, from the rank headers and `parallel_group` records):
`coordinates` ({rank: {"host", "local_rank", "gpu_index", "gpu_pci_bus_id", "gpu_uuid", "groups"}}),
`fault_domain` ("rank", "host", "group" or "scattered": one rank; all on one machine, or every rank of
several; one group across machines; neither), `fault_hosts`, `fault_group` ({"label", "index", "ranks",
"hosts", ...}); the title names the first culprit's place and the verdict ("drain host X", "check that
group's links", "a code path, not the hardware"), and its remedy leads the hints after the stack's own.

Across hosts: the watches of a job's nodes give one verdict (supervisor/fleet.py), and looks of several
hosts at one hang are merged (analysis/hang_reports.py). Such a hang is one finding on the rank(s) the
others wait for, whatever host they ran on, with `rank_hosts` ({rank: host}), `hosts_merged` (every
host whose ranks it holds) and `fleet` (the verdict's id, decider, nodes merged and nodes missing);
and one finding per host of the ranks there that wait for them (`waiting_for`: the culprits,
`culprit_hosts`, `waiting_call`: the collective they wait in, {"op", "site", ...}), a consequence of
the first (analysis/incidents.py).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.collective_sites import mismatched_sites
from grpo_doctor.analysis.culprit_kind import CulpritKind, classify
from grpo_doctor.analysis.finding_facts import HangFacts
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.hang_stacks import culprit_evidence, hang_captures, main_frames
from grpo_doctor.analysis.launch_settings import differing_settings
from grpo_doctor.analysis.parallel_layout import HINTS as LAYOUT_HINTS
from grpo_doctor.analysis.parallel_layout import place
from grpo_doctor.analysis.rank_progress import collective_failures, completed, rank_positions
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.stack_groups import collective_call
from grpo_doctor.schema.ranks import format_ranks
from grpo_doctor.schema.watch_files import HangRank, HangReport, phase_words

ID = "hang"
READS = {View.FLIGHT_RECORDER, View.PROBE_RESULTS, View.RANK_LOGS, View.RANK_TABLES, View.RANKS, View.WATCH_ARTIFACTS}
MAX_HOSTS_IN_TITLE = 3  # a title names this many hosts, else counts them

HINT_STACKS = ("Compare the stacks of the named ranks with the others' (stack_dirs): the culprits are in a different "
               "collective, still computing, or blocked in user code (a reward function, a data loader, a request "
               "to a rollout server); a collective inside `if rank == 0:` code is the usual different code path.")
# The first remedy where the culprit's stack shows what it waits on (analysis/culprit_kind.py): the
# frame that hangs ({at}) and the library frame around it ({called_by}) are filled in where known.
HINT_REWARD = ("Put a timeout on the reward call: rank {rank} hangs in the reward function{at}{called_by}, and "
               "every other rank waits for it at the next collective. Bound each call of a grader, a sandbox or a "
               "remote reward model (`future.result(timeout=...)` of `concurrent.futures`, "
               "`subprocess.run(..., timeout=...)`, the HTTP client's `timeout=`) and score a call that times out "
               "as 0 instead of waiting.")
HINT_DATA = ("Look at the data loader: rank {rank} waits for a batch{at}{called_by}. With worker processes "
             f"(the DataLoader's num_workers; HF Trainer / {remedies.flags(remedies.TRL, 'dataloader_num_workers')}) "
             "a stuck worker (a sample that never loads from a network file system, a lock, a worker killed by the "
             "OOM killer) leaves the rank waiting: give the DataLoader a `timeout=` in seconds so a stuck worker "
             "raises, `py-spy dump --pid` the worker processes, or run with num_workers=0 to see the sample's "
             "own stack.")
HINT_SERVER = ("Check the server: rank {rank} waits for an answer to a request{at}{called_by}. Look at the "
               "rollout (or reward) server's health and log: is it up, overloaded, or stuck itself (`trl vllm-serve` "
               "answers GET /health)? And put a client timeout on the request (requests' and httpx's `timeout=`, "
               "aiohttp's `ClientTimeout`) so a server that never answers raises instead of holding every rank.")
HINT_COLLECTIVE = ("Rank {rank} waits in a collective{at}{called_by}, where the other ranks are not: the ranks took "
                   "different code paths. Look for rank-conditional code around this collective (`if rank == 0:` / "
                   "`is_main_process` blocks that log, evaluate, save or generate and call a collective inside) and "
                   "for uneven data that gives one rank fewer batches (see collective-mismatch).")
KIND_HINTS = {"reward": HINT_REWARD, "data-loader": HINT_DATA, "server-request": HINT_SERVER,
              "collective": HINT_COLLECTIVE}
HINT_LAUNCH = remedies.LAUNCH_IDENTICAL  # only where the evidence shows settings differing between nodes
HINT_FR = remedies.FLIGHT_RECORDER + " so the NCCL flight recorder names the rank missing from the collective next time."
HINT_TIMEOUT = ("Make a hang end in an error instead of waiting: keep the collective timeout above your longest "
                "legitimate wait (generation, evaluation, checkpoint saving) and not far above it; "
                + remedies.COLLECTIVE_TIMEOUTS + ".")
HINT_PROBE = "Test connectivity between nodes before training (grpo-doctor probe) and scale up from one node."
# For a hang read from the rank records alone: no stacks were taken, so say how to get them.
HINT_NO_STACKS = ("No stacks were taken: run the job under `grpo-doctor watch -- <your launch command>` (it takes "
                  "every rank's py-spy stack when progress stops), or `py-spy dump --pid <pid>` on the named rank "
                  "while it hangs, to see the line it is stuck on: a reward function, a data loader, a request to a "
                  "rollout server, or a collective the others never reach.")
def kind_hint(kind: CulpritKind | None, rank: int | str) -> str | None:
    """The remedy for what the culprit's stack shows it waits on, naming the frame; None for "unknown"."""
    if kind is None or kind.kind not in KIND_HINTS:
        return None
    at = f" at `{kind.frame}`" if kind.frame else ""
    called_by = f", called by `{kind.caller}`" if kind.caller else ""
    return KIND_HINTS[kind.kind].format(rank=rank, at=at, called_by=called_by)


HINTS = (*(kind_hint(CulpritKind(k), "N") for k in KIND_HINTS),
         HINT_STACKS, HINT_LAUNCH, HINT_FR, HINT_TIMEOUT, HINT_PROBE, HINT_NO_STACKS, *LAYOUT_HINTS)


def hints_for(run: RunView, kind: CulpritKind | None = None, rank: int | None = None, stack_shown: bool = False,
              flight_recorder_files: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The remedies that fit what the tool knows, most specific first:
    - the remedy for what the culprit's stack shows (a reward function, a data loader, a request to a
      server, a collective the others are not in), naming the frame; "compare the stacks" only where the
      stack was not classified or not shown;
    - making every node's launch identical only where the evidence shows a setting differing between nodes;
    - the flight-recorder variables only where they can still help: not for a job on CPU (gloo: no NCCL
      flight recorder), nor for one that watch ended (`--on-hang kill`, before NCCL's timeout could dump)
      without a dump;
    - probing the connectivity between nodes only where the run spans more than one host."""
    first = kind_hint(kind, rank if rank is not None else "N")
    stacks = () if first is not None and stack_shown else (HINT_STACKS,)
    launch = (HINT_LAUNCH,) if differing_settings(run.headers, run.probe) else ()
    fr = (HINT_FR,) if _flight_recorder_can_help(run, flight_recorder_files) else ()
    probe = () if _one_host(run) else (HINT_PROBE,)
    return (*((first,) if first else ()), *stacks, *launch, *fr, HINT_TIMEOUT, *probe)


def _flight_recorder_can_help(run: RunView, files) -> bool:
    headers = list(run.headers.values())
    if headers and all(h.gpu_uuid is None and "nccl" in (h.versions or {}) and not h.versions["nccl"]
                       for h in headers):
        return False  # no CUDA on any rank: gloo, which NCCL's flight recorder does not cover
    dumped = bool(files) or bool(run.flight_dumps) or any(h.flight_recorder_files for h in run.hangs)
    ended_by_watch = any(s.hang_ended_by_watch for s in run.summaries.values())
    return dumped or not ended_by_watch


def _one_host(run: RunView) -> bool:
    """Every rank on one host, as far as the evidence tells (the headers' world and local world sizes,
    the hosts that wrote records, watches and hang reports)."""
    headers = list(run.headers.values())
    hosts = {h.host for h in headers} | set(run.summaries) | {h.host for h in run.hangs if h.host}
    hosts.discard(None)
    hosts.discard("")
    if len(hosts) != 1:
        return False
    return all(h.local_world_size is None or h.local_world_size >= h.world_size for h in headers)


@dataclass(frozen=True)
class Config:
    # From the rank records alone (no watch): a rank is the culprit when, at the moment another rank gave
    # up waiting in a collective, it had made no progress for this fraction of the timeout given up after
    # (it stayed away for the whole wait) ...
    min_idle_frac_of_timeout: float = 0.9
    # ... or for this long where the timeout message names no timeout.
    min_idle_s: float = 60.0
    # The culprit must still have been alive when the others gave up (its end record is not earlier than
    # this before their timeout): the clocks of two hosts may disagree by this much.
    end_slack_s: float = 2.0


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    # watch's hang reports come first: they were made while the job hung, with stacks.
    yield from _from_watch(run)
    if not run.hangs:
        yield from _from_rank_records(run, cfg)


def _from_watch(run: RunView) -> Iterator[Finding]:
    for report in run.hangs:
        ranks_info = report.ranks
        culprits = list(report.culprits)
        stuck, moving = list(report.ranks_with_verdict("stuck")), list(report.ranks_with_verdict("moving"))
        captures = hang_captures(report)
        odd = [] if culprits else _odd_collective_ranks(run, captures, ranks_info)
        named = culprits or odd or stuck or sorted(ranks_info)
        lead = ranks_info.get(named[0], HangRank()) if named else HangRank()
        phase, step = lead.open_phase, lead.step
        idle = [info.idle_s for info in ranks_info.values() if info.idle_s is not None]
        host = report.host or None
        where = f" {phase_words(lead)}" if phase or lead.left_phase else ""
        at = f" at step {step}" if step is not None else ""
        stacks = culprit_evidence(captures, culprits or odd)
        kinds = _culprit_kinds(captures, culprits or odd, ranks_info)
        roles = {r: info.role for r, info in sorted(ranks_info.items()) if info.role}
        hosts_merged = report.hosts if len(report.hosts) > 1 else ()  # several hosts' ranks (supervisor/fleet.py)
        if culprits:
            # A Ray job's culprit is named by its actor too: "rank(s) 1 (ray::PolicyWorker.train_step)".
            role = f" ({roles[culprits[0]]})" if len(culprits) == 1 and culprits[0] in roles else ""
            others = f" (on {_hosts_text(hosts_merged)})" if hosts_merged else ""
            title = (f"hang on {host}: the other ranks{others} wait for rank(s) {format_ranks(culprits)}"
                     f"{_on_hosts(report, culprits) if hosts_merged else ''}{role}{where}{at}")
            title += _code_clause(stacks["culprit_code"])
        elif odd:
            title = (f"hang on {host}: rank(s) {format_ranks(odd)} wait{where}{at} in a different collective from "
                     f"the other ranks (see collective-mismatch)")
        elif not ranks_info and report.actors:
            title = _ray_workers_title(host, report.actors)
        else:
            title = f"hang on {host}: no progress from rank(s) {format_ranks(named)}{where}{at}"
        named_hosts = tuple(dict.fromkeys(report.host_of(r) for r in named)) if hosts_merged else ()
        placed = place(run, culprits or odd, {r: report.host_of(r) for r in ranks_info}, judge=bool(culprits))
        title += placed.clause
        yield Finding(
            id=ID, severity="critical", title=title, ranks=tuple(named),
            hosts=named_hosts or ((host,) if host else ()), step=step, phase=phase,
            evidence={"source": "watch", "host": host, "hang_file": report.file, "culprits": culprits,
                      "odd_ranks": odd or list(report.odd_ranks), "stuck_ranks": stuck, "moving_ranks": moving,
                      "open_phases": {r: info.open_phase for r, info in sorted(ranks_info.items())},
                      "steps": {r: info.step for r, info in sorted(ranks_info.items())},
                      "max_idle_s": max(idle) if idle else None, "stack_groups": list(report.groups),
                      **stacks,
                      "culprit_kind": {r: k.to_dict() for r, k in kinds.items()},
                      "stack_dirs": list(report.stack_dirs),
                      "flight_recorder_files": list(report.flight_recorder_files),
                      **({"ray_roles": roles} if roles else {}),
                      **({"ray_workers_without_rank": list(report.actors)} if report.actors else {}),
                      **_across_hosts(report, hosts_merged), **placed.evidence},
            hints=_watch_hints(run, kinds, stacks["culprit_stacks"], report.flight_recorder_files, placed.hints),
        )
        if hosts_merged and culprits:
            yield from _waiting_on_each_host(report, captures, culprits)


def _across_hosts(report: HangReport, hosts_merged: tuple[str, ...]) -> dict:
    if not hosts_merged:
        return {}
    out = {"hosts_merged": list(hosts_merged), "rank_hosts": {r: report.host_of(r) for r in sorted(report.ranks)}}
    return out | ({"fleet": report.fleet.to_dict()} if report.fleet is not None else {})


def _waiting_on_each_host(report: HangReport, captures: list, culprits: list[int]) -> Iterator[Finding]:
    """The ranks of each host that wait for the culprits, one finding per host: consequences of the hang."""
    calls = {c.rank: call for c in captures if (call := collective_call(main_frames(c))) is not None}
    culprit_hosts = list(dict.fromkeys(report.host_of(r) for r in culprits))
    for host in report.hosts:
        waiting = [r for r in sorted(report.ranks) if report.host_of(r) == host and r not in culprits]
        if not waiting:
            continue
        lead = report.ranks[waiting[0]]
        call = next((calls[r] for r in waiting if r in calls), None)
        how = f" in {call.op} ({call.site})" if call else (f" in {lead.open_phase}" if lead.open_phase else "")
        at = f" at step {lead.step}" if lead.step is not None else ""
        yield Finding(
            id=ID, severity="warning",
            title=(f"rank(s) {format_ranks(waiting)} on {host} wait{how}{at} for rank(s) {format_ranks(culprits)}"
                   f"{_on_hosts(report, culprits)}"),
            ranks=tuple(waiting), hosts=(host,), step=lead.step, phase=lead.open_phase,
            facts=HangFacts(waiting_for=tuple(culprits)),
            evidence={"source": "watch", "host": host, "hang_file": report.file, "waiting_for": list(culprits),
                      "culprit_hosts": culprit_hosts, "waiting_call": call.to_dict() if call else None,
                      "open_phases": {r: report.ranks[r].open_phase for r in waiting},
                      "steps": {r: report.ranks[r].step for r in waiting},
                      "stuck_ranks": [r for r in waiting if report.ranks[r].verdict == "stuck"],
                      "moving_ranks": [r for r in waiting if report.ranks[r].verdict == "moving"]},
            hints=(HINT_STACKS,),
        )


def _on_hosts(report: HangReport, ranks: list[int]) -> str:
    return f" on {_hosts_text(tuple(dict.fromkeys(report.host_of(r) for r in ranks)))}"


def _hosts_text(hosts: tuple[str, ...]) -> str:
    """"node0, node1", or "128 hosts" past MAX_HOSTS_IN_TITLE."""
    return ", ".join(hosts) if len(hosts) <= MAX_HOSTS_IN_TITLE else f"{len(hosts)} hosts"


def _culprit_kinds(captures: list, ranks: list[int], ranks_info: dict[int, HangRank]) -> dict[int, CulpritKind]:
    """What each named rank's stack shows it waiting on (a reward function, a data loader, a server, a collective)."""
    by_rank = {c.rank: c for c in captures}
    return {r: classify(main_frames(by_rank[r]), ranks_info.get(r, HangRank()).open_phase)
            for r in ranks if r in by_rank and main_frames(by_rank[r])}


def _watch_hints(run: RunView, kinds: dict[int, CulpritKind], shown: dict, fr_files,
                 domain_hints: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The first named rank whose stack tells what it waits on leads the remedies; where the culprits
    are (a machine, a group's links, a code path) comes next, or first where the stack tells nothing."""
    rank = next((r for r, k in kinds.items() if k.kind in KIND_HINTS), None)
    hints = hints_for(run, kinds.get(rank) if rank is not None else None, rank, stack_shown=rank in shown,
                      flight_recorder_files=tuple(fr_files))
    lead = 1 if rank is not None else 0
    return (*hints[:lead], *domain_hints, *hints[lead:])


def _ray_workers_title(host: str | None, actors: tuple[dict, ...]) -> str:
    """A Ray job whose ranks watch could not know (RANK set inside the actors, not instrumented)."""
    waited_for = [a for a in actors if a.get("waited_for")]
    if not waited_for:
        return f"hang on {host}: no progress from the job's {len(actors)} Ray worker(s) (no rank known)"
    lead = waited_for[0]
    return (f"hang on {host}: the other Ray workers wait for pid {lead.get('pid')} ({lead.get('role')}), at "
            f"{lead.get('where') or 'no stack'} (no rank known: `watch --instrument` names the ranks)")


def _odd_collective_ranks(run: RunView, captures: list, ranks_info: dict[int, HangRank]) -> list[int]:
    """Ranks that all wait in collectives, called from different places: the side that called the extra one."""
    calls = {c.rank: call for c in captures if (call := collective_call(main_frames(c))) is not None}
    if len(calls) < 2 or len(calls) < len(captures):
        return []
    where = {r: (info.step, info.open_phase) for r, info in ranks_info.items()}
    found = mismatched_sites(run, calls, where)
    return list(found.odd_ranks) if found is not None and found.decided_by != "tie" else []


def _code_clause(code: dict[int, dict]) -> str:
    """'; rank 1 is in user code: _block_forever (inject.py:215)' where the culprit's stack shows it."""
    if not code:
        return ""
    rank, info = next(iter(code.items()))
    kind = "in user code" if info["in_user_code"] else "at"
    return f"; rank {rank} is {kind}: {info['where']}"


def _from_rank_records(run: RunView, cfg: Config) -> Iterator[Finding]:
    """A rank open in a phase for the whole time another rank waited in a collective until it timed out;
    or, where nobody timed out, a job stopped from outside after every rank stood still."""
    positions = rank_positions(run)
    failures = collective_failures(run, positions)
    timeouts = {r: f for r, f in failures.items() if f.kind == "timeout"}
    if not timeouts:
        yield from _stopped_while_hung(run, cfg, positions)
        return
    gave_up_t = min(f.t for f in timeouts.values())
    timeout_values_ms = [f.timeout_ms for f in timeouts.values() if f.timeout_ms]
    need_idle_s = (cfg.min_idle_frac_of_timeout * max(timeout_values_ms) / 1000 if timeout_values_ms
                   else cfg.min_idle_s)
    culprits, idle_s = [], {}
    for rank, pos in positions.items():
        if rank in failures or pos.error is not None or pos.open_path is None or pos.last_progress_t is None:
            continue  # it raised itself, or it was between phases: not held up anywhere we can name
        if pos.end_reason != "signal" or (pos.ended_t or 0.0) < gave_up_t - cfg.end_slack_s:
            # Alive until after the others gave up, then stopped: hung. A log that just stops may be a rank
            # that died (SIGKILL, the OOM killer) and made the others wait: that is rank-crash's to say.
            continue
        if gave_up_t - pos.last_progress_t >= need_idle_s:
            culprits.append(rank)
            idle_s[rank] = round(max(pos.ended_t or gave_up_t, gave_up_t) - pos.last_progress_t, 1)
    if not culprits:
        return
    waiting = sorted(timeouts)
    first = timeouts[waiting[0]]
    what = f" in {first.call.op} ({first.call.site})" if first.call else " in a collective"
    after = f" after {first.timeout_ms} ms" if first.timeout_ms else ""
    yield _event_log_finding(run, positions, culprits, waiting, idle_s,
                             f"rank(s) {format_ranks(waiting)} timed out{after} waiting for it{what}",
                             {"timeout_ms": first.timeout_ms,
                              "waiting_calls": {r: f.call.to_dict() if f.call else None
                                                for r, f in sorted(timeouts.items())},
                              "waiting_errors": {r: f.message[:300] for r, f in sorted(timeouts.items())}})


def _stopped_while_hung(run: RunView, cfg: Config, positions: dict) -> Iterator[Finding]:
    """No rank raised: the job was stopped from outside (a scheduler's time limit, Ctrl-C) after every rank
    had gone `min_idle_s` without progress. The ranks still in a phase that every other rank completed in
    that step are the ones the others waited for."""
    if not positions or any(p.error is not None or p.end_reason in ("exit", "shutdown", "exception")
                            for p in positions.values()):
        return
    if not any(p.end_reason == "signal" for p in positions.values()):
        return  # nothing says the job is over: it may still be running
    idle_s = {r: round(p.ended_t - p.last_progress_t, 1) for r, p in positions.items()
              if p.ended_t is not None and p.last_progress_t is not None}
    if len(idle_s) < len(positions) or min(idle_s.values()) < cfg.min_idle_s:
        return
    culprits = [r for r, p in positions.items() if p.open_path is not None
                and all(completed(run, o, p.open_path, p.step) for o in positions if o != r)]
    if not culprits or len(culprits) == len(positions):
        return
    waiting = sorted(r for r in positions if r not in culprits)
    signals = sorted({p.end_signal or "killed" for p in positions.values()})
    yield _event_log_finding(run, positions, culprits, waiting, {r: idle_s[r] for r in culprits},
                             f"rank(s) {format_ranks(waiting)} waited for it in "
                             f"{', '.join(sorted({positions[r].open_path or '-' for r in waiting}))} until the job "
                             f"was stopped from outside ({', '.join(signals)})",
                             {"timeout_ms": None, "waiting_calls": {}, "waiting_errors": {}})


def _event_log_finding(run: RunView, positions: dict, culprits: list[int], waiting: list[int],
                       idle_s: dict[int, float], what_others_did: str, extra: dict) -> Finding:
    lead = positions[culprits[0]]
    hosts = sorted({h for r in culprits if (h := positions[r].host)})
    placed = place(run, culprits, {r: p.host for r, p in positions.items()})
    return Finding(
        id=ID, severity="critical",
        title=(f"rank(s) {format_ranks(culprits)} stayed in {lead.open_path} at step {lead.step} for "
               f"{idle_s[culprits[0]]:.0f} s without progress; {what_others_did}{placed.clause}"),
        ranks=tuple(culprits), hosts=tuple(hosts), step=lead.step, phase=lead.open_path,
        evidence={"source": "event-log", "culprits": culprits, "waiting_ranks": waiting,
                  "open_phases": {r: p.open_path for r, p in positions.items()},
                  "steps": {r: p.step for r, p in positions.items()},
                  "max_idle_s": max(idle_s.values()), "idle_s": idle_s, **extra,
                  "ended": {r: positions[r].end_signal or positions[r].end_reason or "no end record"
                            for r in culprits}, **placed.evidence},
        hints=(HINT_NO_STACKS, *placed.hints, *(h for h in hints_for(run, _phase_kind(lead.open_path), culprits[0])
                                                if h != HINT_STACKS)),
    )


def _phase_kind(open_path: str | None) -> CulpritKind | None:
    """Without stacks, only a rank open in the trainer's `reward` phase says what it waits on."""
    kind = classify((), open_path)
    return kind if kind.kind == "reward" else None
