"""`collective-mismatch`: flight-recorder dumps show ranks that did not issue the same collectives.

The dumps of all ranks (run-dir `fr/`, or dump files given directly) are lined up per process group
by collective sequence number (`logs.fr_match`). Two findings, at most one of each per group:

Missing ranks: some members never issued a collective the others did (they wait in it forever).
Evidence keys: `pg` (label), `pg_name`, `pg_desc`, `seq`, `op`, `input_sizes`, `output_sizes`,
`input_dtypes`, `frame` (where the present ranks' code issued it), `ranks_present`, `ranks_missing`,
`ranks_without_dump`, `last_issued` ({rank: seq}), `last_completed` ({rank: seq or None}),
`missing_last_calls` ({missing rank: {"seq", "op", "frame"}}: the last collective it did issue),
`dump_files`.

Op / size / dtype mismatch: at one seq the ranks issued different ops, shapes or dtypes; the first such
seq of the group is reported (after a skipped collective every later one differs too).
Evidence keys: `pg`, `pg_name`, `pg_desc`, `seq`, `kinds` (of "op", "sizes", "dtypes"), `odd_ranks`,
`calls` ({rank: {"op", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "frame"}}),
`num_mismatched_seqs`, `first_mismatched_seqs`, `dump_files`.

From NCCL's watchdog lines in logs (no dumps, no stacks): at one sequence number of one process group
the ranks timed out in different collectives (op or element count); the minority is odd. Evidence
keys: `source` ("watchdog"), `pg`, `seq`, `odd_ranks`, `kinds`, `calls` ({rank: {"op", "numel_in",
"numel_out"}}).

Without dumps (gloo, or NCCL without the flight recorder), from where the ranks' code waits: watch's
stacks at a hang, or the ranks' recorded exceptions (collective timeouts and lost peers), when every
rank waits in a collective but not all called from the same place. The odd ranks are the minority,
or on a tie the ranks still in a phase every other rank already completed that step: they called a
collective the others skipped. Evidence keys: `source` ("stacks" or "tracebacks"), `hang_file`
(stacks), `errors` ({rank: "timeout: ..." or "peer-lost: ..."}, tracebacks), `odd_ranks`,
`decided_by` ("majority", "phase order" or "tie": then every rank is named), `kinds` (["op"] or
["site"]: same op from different lines), `calls` ({rank: {"op", "site" (file:line of the user's call),
"op_frame", "caller", "user_frame", "step", "phase"}}).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.collective_sites import SiteMismatch, mismatched_sites
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.hang_stacks import hang_captures, main_frames
from grpo_doctor.analysis.launch_settings import differing_settings
from grpo_doctor.analysis.rank_progress import collective_failures, rank_positions
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.stack_groups import collective_call
from grpo_doctor.logs.fr_match import Call, CollectiveMismatch, GroupMatch, MissingCollective, match_dumps
from grpo_doctor.logs.kinds import NCCL_TIMEOUT
from grpo_doctor.schema.ranks import format_ranks
from grpo_doctor.schema.watch_files import HangReport

ID = "collective-mismatch"
READS = {View.FLIGHT_RECORDER, View.LOG_SIGNATURES, View.PROBE_RESULTS, View.RANK_LOGS, View.RANK_TABLES, View.RANKS, View.WATCH_ARTIFACTS}

HINT_PATHS = ("The ranks took different code paths: look for rank-conditional code around collectives: `if rank == 0:` "
              "/ `is_main_process` blocks that log, evaluate, save or generate and call all_reduce, gather_object or "
              "barrier inside.")
HINT_LAUNCH = remedies.LAUNCH_IDENTICAL  # only where the evidence shows settings differing between nodes
HINT_DATA = ("Uneven data per rank makes one rank run out of batches first and skip the step's collectives: drop the "
             "last partial batch (" + remedies.flags(remedies.TRL, "dataloader_drop_last") + ", "
             + remedies.flags(remedies.SWIFT, "dataloader_drop_last") + ") and give every rank the same number of "
             "samples (dataset length divisible by world size x per-device batch).")
HINT_STACK = ("Look at the missing rank's stack: the last collective it issued is in missing_last_calls, and under "
              "`grpo-doctor watch` its py-spy stack at the hang shows what it does instead (generation, saving, "
              "evaluation, a data loader, or a different collective).")
HINT_SHAPES = ("Different shapes or dtypes at one collective mean the ranks built different tensors: padding to each "
               "rank's own longest sequence instead of an agreed length, a model sharded differently (DeepSpeed ZeRO "
               "stage or config differs between nodes), or bf16/fp16/fp32 set on some ranks only. Compare the "
               "ranks' configs and the code at the frames shown.")
HINTS = (HINT_PATHS, HINT_LAUNCH, HINT_DATA, HINT_STACK, HINT_SHAPES)


@dataclass(frozen=True)
class Config:
    # Per-rank calls listed in a mismatch's evidence: the odd ranks always, then others up to this many,
    # so a 512-rank job's finding stays readable.
    max_ranks_listed: int = 32
    # Mismatched seqs named besides the first (they are usually the first one's consequences).
    max_seqs_listed: int = 8


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    found = list(_from_flight_recorder(run, cfg))
    yield from found
    if found:
        return  # the dumps name the collectives exactly; stacks and tracebacks would only repeat them
    found = list(_from_stacks_or_tracebacks(run))
    yield from found
    if not found:
        yield from _from_watchdog_lines(run)


def _from_stacks_or_tracebacks(run: RunView) -> Iterator[Finding]:
    for report in run.hangs:
        yield from _from_stacks(run, report)
    if not run.hangs:
        yield from _from_tracebacks(run)


def _from_watchdog_lines(run: RunView) -> Iterator[Finding]:
    """NCCL's watchdog timeouts in the logs: at one sequence number of one process group the ranks
    waited in different collectives (op or element count): the minority called something else."""
    by_group: dict[tuple, dict[int, dict]] = {}
    for row in run.signature_rows:
        f = row["fields"]
        rank = row["rank"] if row["rank"] is not None else f.get("rank")
        if row["kind"] == NCCL_TIMEOUT and rank is not None and f.get("seq") is not None and f.get("op"):
            by_group.setdefault((f.get("pg_desc") or f.get("pg"), f["seq"]), {}).setdefault(int(rank), f)
    for (pg, seq), reports in sorted(by_group.items(), key=lambda item: str(item[0])):
        # A pasted line may cut an op name short ("_ALLGATHER_BA"): a name another one starts with is
        # that one; element counts count only where every rank's line states one.
        ops = {f["op"] for f in reports.values()}
        full = {op: max((o for o in ops if o.startswith(op)), key=len) for op in ops}
        with_numel = all(f.get("numel_in") is not None for f in reports.values())
        calls: dict[tuple, list[int]] = {}
        for rank, f in sorted(reports.items()):
            calls.setdefault((full[f["op"]], f.get("numel_in") if with_numel else None), []).append(rank)
        if len(calls) < 2:
            continue
        majority = max(calls.values(), key=len)
        odd = sorted(r for ranks in calls.values() if ranks is not majority for r in ranks)
        if len(majority) == len(odd):
            odd = sorted(reports)  # a tie: every rank named
        described = "; ".join(f"rank(s) {format_ranks(rs)}: {op}" + (f" of {numel} elements" if numel else "")
                              for (op, numel), rs in calls.items())
        yield Finding(
            id=ID, severity="critical", ranks=tuple(odd), hosts=_hosts(run, tuple(odd), {}),
            title=f"ranks timed out in different collectives at #{seq} of process group {pg if pg is not None else 0}: "
                  f"{described}",
            evidence={"source": "watchdog", "pg": pg, "seq": seq, "odd_ranks": odd,
                      "kinds": ["op"] if len({op for op, _ in calls}) > 1 else ["sizes"],
                      "calls": {r: {"op": f["op"], "numel_in": f.get("numel_in"), "numel_out": f.get("numel_out")}
                                for r, f in sorted(reports.items())}},
            hints=(HINT_PATHS, *_launch(run), HINT_DATA, HINT_SHAPES),
        )
        return  # the first mismatched collective; later ones follow from it


def _from_flight_recorder(run: RunView, cfg: Config) -> Iterator[Finding]:
    if not run.flight_dumps:
        return
    files = sorted(d.path for d in run.flight_dumps)
    host_of = {d.rank: d.host for d in run.flight_dumps if d.host}
    for group in match_dumps(run.flight_dumps).groups:
        if group.mismatches:
            yield _mismatch_finding(run, cfg, group, files, host_of)
        if group.missing is not None:
            yield _missing_finding(run, group, group.missing, files, host_of)


def _from_stacks(run: RunView, report: HangReport) -> Iterator[Finding]:
    """watch's stacks at a hang: every rank waits in a collective, not all at the same call site."""
    if report.culprits:
        return  # some rank is not in a collective at all: a hang, not a mismatch
    captures = hang_captures(report)
    calls = {c.rank: call for c in captures if (call := collective_call(main_frames(c))) is not None}
    if len(calls) < 2 or len(calls) < len(captures):
        return
    where = {r: (i.step, i.open_phase) for r, i in report.ranks.items()}
    found = mismatched_sites(run, calls, where)
    if found is not None:
        yield _sites_finding(run, found, calls, where, {"source": "stacks", "hang_file": report.file})


def _from_tracebacks(run: RunView) -> Iterator[Finding]:
    """The ranks' recorded exceptions: they timed out (or lost their peer) in collectives called from
    different places."""
    failures = collective_failures(run, rank_positions(run))
    calls = {r: f.call for r, f in failures.items() if f.call is not None}
    if len(calls) < 2:
        return
    where = {r: (f.step, f.path) for r, f in failures.items()}
    found = mismatched_sites(run, calls, where)
    if found is not None:
        extra = {"source": "tracebacks",
                 "errors": {r: f"{f.kind}: {f.message[:200]}" for r, f in sorted(failures.items()) if r in calls}}
        yield _sites_finding(run, found, calls, where, extra)


def _sites_finding(run: RunView, found: SiteMismatch, calls: dict, where: dict, extra: dict) -> Finding:
    odd = list(found.odd_ranks)
    others = sorted(r for r in calls if r not in odd)

    def at(rank: int) -> str:
        step, path = where.get(rank, (None, None))
        context = ", ".join(x for x in (path, f"step {step}" if step is not None else None) if x)
        return f"{calls[rank].op} at {calls[rank].site}" + (f" ({context})" if context else "")

    if found.decided_by == "tie":
        title = ("ranks wait in different collectives: "
                 + "; ".join(f"rank(s) {format_ranks(rs)}: {at(rs[0])}" for rs in found.sites.values()))
    else:
        title = (f"rank(s) {format_ranks(odd)} called {at(odd[0])}, a collective rank(s) {format_ranks(others)} "
                 f"never joined: they wait in {at(others[0])}")
    step, path = where.get(odd[0], (None, None))
    return Finding(
        id=ID, severity="critical", title=title, ranks=tuple(odd), hosts=_hosts(run, tuple(odd), {}),
        step=step, phase=path,
        evidence={**extra, "odd_ranks": odd, "decided_by": found.decided_by,
                  "kinds": ["op"] if len({c.op for c in calls.values()}) > 1 else ["site"],
                  "calls": {r: {**calls[r].to_dict(), "step": where.get(r, (None, None))[0],
                                "phase": where.get(r, (None, None))[1]} for r in sorted(calls)}},
        hints=(HINT_PATHS, *_launch(run), HINT_DATA),
    )


def _missing_finding(run: RunView, group: GroupMatch, missing: MissingCollective, files: list[str],
                     host_of: dict) -> Finding:
    call = missing.call
    op = call.op if call else "collective"
    title = (f"rank(s) {format_ranks(list(missing.ranks_missing))} never issued {op} #{missing.seq} of process group "
             f"{group.label}; rank(s) {format_ranks(list(missing.ranks_present))} wait in it")
    last_calls = {r: {"seq": group.progress[r].last_issued, "op": _op(group.progress[r].last_call),
                      "frame": _frame(group.progress[r].last_call)} for r in missing.ranks_missing}
    return Finding(
        id=ID, severity="critical", title=title, ranks=missing.ranks_missing,
        hosts=_hosts(run, missing.ranks_missing, host_of),
        evidence={"pg": group.label, "pg_name": group.pg_name, "pg_desc": group.pg_desc, "seq": missing.seq,
                  "op": call.op if call else None, "input_sizes": _sizes(call.input_sizes) if call else None,
                  "output_sizes": _sizes(call.output_sizes) if call else None,
                  "input_dtypes": list(call.input_dtypes) if call else None, "frame": _frame(call),
                  "ranks_present": list(missing.ranks_present), "ranks_missing": list(missing.ranks_missing),
                  "ranks_without_dump": list(group.ranks_without_dump),
                  "last_issued": {r: p.last_issued for r, p in group.progress.items()},
                  "last_completed": {r: p.last_completed for r, p in group.progress.items()},
                  "missing_last_calls": last_calls, "dump_files": files},
        hints=(HINT_STACK, HINT_PATHS, *_launch(run), HINT_DATA),
    )


def _mismatch_finding(run: RunView, cfg: Config, group: GroupMatch, files: list[str], host_of: dict) -> Finding:
    mismatches = group.mismatches
    first = mismatches[0]
    listed = list(first.odd_ranks) + [r for r in first.calls if r not in first.odd_ranks]
    listed = sorted(listed[:max(cfg.max_ranks_listed, len(first.odd_ranks))])
    what = {"op": "ops", "sizes": "shapes", "dtypes": "dtypes"}
    title = (f"ranks issued collective #{first.seq} of process group {group.label} with different "
             f"{' and '.join(what[k] for k in first.kinds)}: "
             + "; ".join(f"rank(s) {format_ranks(rs)}: {desc}" for desc, rs in list(_variants(first).items())[:3]))
    hints = ((HINT_PATHS, *_launch(run), HINT_DATA, HINT_STACK) if first.kinds == ("op",)
             else (HINT_SHAPES, HINT_PATHS, *_launch(run)))
    return Finding(
        id=ID, severity="critical", title=title, ranks=first.odd_ranks, hosts=_hosts(run, first.odd_ranks, host_of),
        evidence={"pg": group.label, "pg_name": group.pg_name, "pg_desc": group.pg_desc, "seq": first.seq,
                  "kinds": list(first.kinds), "odd_ranks": list(first.odd_ranks),
                  "calls": {r: _call(first.calls[r]) for r in listed}, "num_mismatched_seqs": len(mismatches),
                  "first_mismatched_seqs": [m.seq for m in mismatches[:cfg.max_seqs_listed]], "dump_files": files},
        hints=hints,
    )


def _launch(run: RunView) -> tuple[str, ...]:
    return (HINT_LAUNCH,) if differing_settings(run.headers, run.probe) else ()


def _variants(m: CollectiveMismatch) -> dict[str, list[int]]:
    """One short description per distinct call, with the ranks that made it."""
    out: dict[str, list[int]] = {}
    for rank, c in m.calls.items():
        dtypes = ",".join(sorted(set(c.input_dtypes) | set(c.output_dtypes)))
        out.setdefault(f"{c.op} {_sizes(c.input_sizes)} {dtypes}".strip(), []).append(rank)
    return out


def _call(c: Call) -> dict:
    return {"op": c.op, "input_sizes": _sizes(c.input_sizes), "output_sizes": _sizes(c.output_sizes),
            "input_dtypes": list(c.input_dtypes), "output_dtypes": list(c.output_dtypes), "frame": c.frame}


def _sizes(sizes: tuple[tuple[int, ...], ...]) -> list[list[int]]:
    return [list(s) for s in sizes]


def _op(c: Call | None) -> str | None:
    return c.op if c else None


def _frame(c: Call | None) -> str | None:
    return c.frame if c else None


def _hosts(run: RunView, ranks: tuple[int, ...], host_of: dict) -> tuple[str, ...]:
    return tuple(sorted({h for h in (host_of.get(r) or run.host_of(r) for r in ranks) if h}))
