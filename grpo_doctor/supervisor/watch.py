"""The supervisor loop behind `grpo-doctor watch -- CMD...`.

Starts the command, tees and scans its output, follows the ranks' event logs, samples GPUs
and rank processes, and when every running rank has stalled, takes all stacks and says which
rank the others wait for. At the end — normal exit, crash, hang, Ctrl-C — it writes the run's
summary and prints the last word on every rank.

On a job of several nodes (one watch per node, docs/clusters.md) the watches form a fleet
(supervisor/fleet.py): the hang is judged over every rank of every node by the live watch with the
lowest node id, every watch prints that one verdict and, with --on-hang kill, ends its own node's
processes; a watch that hears no other node judges its node alone and says so.

Typical use:
    status = Watch(WatchOptions(command=["torchrun", ...], run_dir=Path("runs/x"))).run()
"""
from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from grpo_doctor._version import __version__
from grpo_doctor.host.cluster_env import cluster_lines, read_cluster_env
from grpo_doctor.plan.commands import PLAN_ENV
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.ranks import format_ranks
from grpo_doctor.schema.run_info import RunInfo, WatchHost
from grpo_doctor.schema.safe_write import write_file
from grpo_doctor.schema.watch_files import HangReport
from grpo_doctor.supervisor.alert_payload import finding_from_hang
from grpo_doctor.supervisor.alerts import Alerter, AlertSettings
from grpo_doctor.supervisor.childenv import child_environment
from grpo_doctor.supervisor.console import Console
from grpo_doctor.supervisor.discovery import discover_ranks, is_alive
from grpo_doctor.supervisor.fail_slow import FailSlow, FailSlowSettings
from grpo_doctor.supervisor.fleet import Fleet, FleetSettings, FleetView
from grpo_doctor.supervisor.fleet_channel import store_address
from grpo_doctor.supervisor.fleet_verdict import build_verdict, fleet_stall, stall_name
from grpo_doctor.supervisor.guardian import TOKEN_ENV, Guardian
from grpo_doctor.supervisor.hang import hang_lines, investigate
from grpo_doctor.supervisor.kill_gate import reason_to_spare
from grpo_doctor.supervisor.launch import ProcessTree
from grpo_doctor.supervisor.live_scan import LiveScan
from grpo_doctor.supervisor.memory_plan import plan_at_start
from grpo_doctor.supervisor.output import OutputTee
from grpo_doctor.supervisor.progress import HangPolicy, ProgressTracker
from grpo_doctor.supervisor.ray_processes import RayWorkers, actor_of
from grpo_doctor.supervisor.run_files import RunFiles
from grpo_doctor.supervisor.sampler import Sampler, shows_work
from grpo_doctor.supervisor.seeds import SeedCheck
from grpo_doctor.supervisor.sentinels import Sentinels
from grpo_doctor.supervisor.stall import StallSchedule
from grpo_doctor.supervisor.summary import build_summary, summary_lines, watched_ranks

HANG_EXIT = 124  # the job hung and watch ended it (--on-hang kill), as timeout(1) reports
LOOP_S = 0.5  # event-log poll; a stall is judged in seconds, so this costs little latency
DISCOVER_EVERY_S = 1.0
QUIET_GONE_S = 1.5  # a job's ranks end within moments of each other (its last collective); its launcher just after
PIPE_BYTES = 2**20  # the job's output pipes: 20 ms of output at 50 MB/s, so a busy watch thread never stalls it
SWITCH_INTERVAL_S = 0.0005  # the tee threads get the GIL back from the scanner within this
FLEET_STACKS_WAIT_S = 10.0  # past the second look: how long the decider waits for the other nodes' stacks
FLEET_ACK_WAIT_S = 3.0  # how long the decider waits for the other watches to read a kill verdict before its own kill
FLEET_END_WAIT_S = 30.0  # at the end, how long the report's writer waits for the other nodes' watches to finish


@dataclass(frozen=True)
class WatchOptions:
    command: list[str]
    run_dir: Path
    policy: HangPolicy = field(default_factory=HangPolicy)
    uninstrumented_timeout_s: float = 600.0  # no event log: output silence and idle CPUs this long
    on_hang: str = "report"  # report | kill
    second_look_s: float = 5.0
    native: bool = False
    sample_interval_s: float = 1.0
    grace_s: float = 15.0  # between SIGTERM and SIGKILL when ending the tree
    gpu_memory_bytes: int | None = None  # for the memory plan at start where NVML is absent
    instrument: bool = False  # --instrument: zero-code phases and steps (grpo_doctor/rank/auto/)
    alerts: AlertSettings = field(default_factory=AlertSettings)  # --notify, --on-hang-exec, ...
    fleet: str = "auto"  # --fleet: how the watches of several nodes meet (fleet.py's CHANNELS)
    fleet_port: int | None = None  # --fleet-port: the TCPStore's port (default MASTER_PORT + 11)
    fail_slow: FailSlowSettings = field(default_factory=FailSlowSettings)  # --fail-slow-every, --fail-slow-rounds


class Watch:
    def __init__(self, opts: WatchOptions, console: Console | None = None) -> None:
        self.opts = opts
        self.paths = RunPaths(opts.run_dir)
        self.host = socket.gethostname()
        self.sup_dir = self.paths.supervisor_host(self.host)
        self.watch_files = self.paths.watch_files(self.host)
        self.cluster = read_cluster_env(os.environ)  # recorded in run.json; the job's environment is untouched
        self.console = console or Console(node=self.cluster.label)
        self.tracker = ProgressTracker(self.paths, opts.policy)
        self.seeds = SeedCheck()
        self.files = RunFiles(self.paths, self.sup_dir, note=self.console.note)
        self.live_scan = LiveScan(self.watch_files.signatures, write=self.files.write, note=self.console.note)
        self.rank_pids: dict[int, int] = {}
        self.gone: dict[int, str] = {}
        self.gone_t: dict[int, float] = {}  # wall s: the order ranks left in names the first
        # Ranks without records (not instrumented) that left: no end record can say how. Said live only
        # if the job still runs QUIET_GONE_S later; at a clean end the launcher's status 0 says they did.
        self.unrecorded_gone: dict[int, float] = {}
        self.unrecorded_said: set[int] = set()
        self.ray = RayWorkers()  # Ray actors of the job: their titles, ranked or not
        self.hangs: list[HangReport] = []
        # The cli sends the end-of-job findings through it too, then closes it (a bounded wait).
        self.alerter = Alerter(opts.alerts, host=self.host, run_dir=opts.run_dir, out_path=self.watch_files.alerts,
                               note=self.console.note, on_spawn=lambda pid: self.tree.outside.add(pid))
        # The report's rollout rules, live: said once, cleared once, alerted with --alert-live (sentinels.py)
        self.sentinels = Sentinels(self.host, self.watch_files.live_findings, write=self.files.write,
                                   alert=self.alerter.send if opts.alerts.live else None, seeds=self.seeds)
        self._late_records: list = []  # read once the job ended: its last steps
        self._interrupts = 0
        self._last_output_mono = time.monotonic()
        self._last_busy_mono = time.monotonic()  # last time a rank used CPU or was not yet measured
        self.stalls = StallSchedule()
        self._internal_errors: set[type] = set()
        self.fleet: Fleet | None = None
        self.writes_report = True  # False: another node's watch writes the report of this shared run directory
        self._look: _Look | None = None  # as the deciding watch: the look being gathered
        self._answered: str | None = None  # the last look of the decider this watch sent its stacks for
        self._applied: set[str] = set()  # the fleet verdicts this watch printed
        self._kill_after: tuple[str, float] | None = None  # as the decider: (verdict, monotonic deadline)
        self._num_verdicts = 0
        self._alone_said = False
        # A job that moves, but slowly: stack rounds, and the rank the others keep waiting for (fail_slow.py)
        self.fail_slow = FailSlow(opts.fail_slow, self.host, self.watch_files.fail_slow, write=self.files.write,
                                  fleet=bool(self.cluster.nnodes and self.cluster.nnodes > 1))

    # -- main loop ------------------------------------------------------------------------

    def run(self) -> int:
        env, added = child_environment(os.environ, self.opts.run_dir, instrument=self.opts.instrument)
        # A run directory that cannot be written (read-only, full, missing parent we may not create)
        # costs supervision its records, never the job its start.
        dir_made = self.files.write("the run directory", lambda: self.sup_dir.mkdir(parents=True, exist_ok=True))
        self.files.claim()
        self.files.write(self.paths.run_json.name, lambda: self._write_run_json(added))
        self._plan_memory(env)
        # Every process the job starts inherits the token; the guardian ends them if watch is SIGKILLed.
        env[TOKEN_ENV] = f"{os.getpid()}-{secrets.token_hex(8)}"
        # The job's output pipes are made here so that the guardian holds their read ends too: if watch is
        # SIGKILLed, the job runs on and the guardian reads its output (guardian.py).
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        self.guardian = Guardian.start(env[TOKEN_ENV], grace_s=self.opts.grace_s,
                                       outputs=[(out_r, "stdout", self.watch_files.stdout_log),
                                                (err_r, "stderr", self.watch_files.stderr_log)])
        if self.guardian is None:
            self.console.note("could not start the guardian process: if watch is SIGKILLed, the job ends with it")
        try:
            self.tree = ProcessTree.start(self.opts.command, env, stdout=out_w, stderr=err_w,
                                          die_with_watch=self.guardian is None)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        outputs = (os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0))
        if self.guardian is not None:
            self.tree.outside.add(self.guardian.proc.pid)
            self.guardian.job_started(self.tree.pid)
        self.console.note(f"watching pid {self.tree.pid}; run directory {self.paths.root}")
        for line in cluster_lines(self.cluster):
            self.console.note(line)
        self._start_fleet()
        for pipe in outputs:
            _widen_pipe(pipe.fileno())
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.live_scan.start()
        tees = [
            OutputTee(outputs[0], self.watch_files.stdout_log, write=lambda b: self._child_output("stdout", b),
                      on_lines=lambda b: self._output_lines("stdout", b), note=self.console.note),
            OutputTee(outputs[1], self.watch_files.stderr_log, write=lambda b: self._child_output("stderr", b),
                      on_lines=lambda b: self._output_lines("stderr", b), note=self.console.note),
        ]
        for tee in tees:
            tee.start()
        # Without a run directory (said once above) the samples go nowhere rather than failing each round.
        self.sampler = Sampler(self.watch_files.samples if dir_made else Path(os.devnull),
                               interval_s=self.opts.sample_interval_s,
                               notify=self.console.note)
        self.sampler.start()
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        hang_ended = False
        try:
            status = None
            next_discovery = 0.0
            while status is None:
                status = self.tree.wait(LOOP_S)
                try:
                    now = time.monotonic()
                    records = self.tracker.poll(now)
                    for line in self.seeds.feed(records) + self.sentinels.check(records, self.sampler.drain()):
                        self.console.note(line)
                    if now >= next_discovery:
                        self._discover()
                        next_discovery = now + DISCOVER_EVERY_S
                    self._say_unrecorded_gone(now)
                    self._update_panel(now)
                    self._fail_slow_step(now)
                    if status is None and self._hang_step(now):
                        hang_ended = True
                        status = self.tree.wait(1.0)
                except Exception as exc:  # supervision failing must never be what ends the job
                    self._internal_error(exc)
        finally:
            if self.fleet is not None:  # the job's end: a store lost from now on is not its host's death
                self.fleet.job_ended()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.tree.end(self.opts.grace_s)  # nothing of the tree outlives watch
            self.fail_slow.close()
            if self.guardian is not None:
                self.guardian.close()
            for tee in tees:
                if (line := tee.finish(timeout_s=5.0)) is not None:
                    self.console.note(line)
            self.sampler.stop(timeout_s=2.0)
            self.live_scan.stop(timeout_s=10.0)
            self._late_records = self.tracker.poll(time.monotonic())
            self.console.close()
        hang_ended = self._late_verdict() or hang_ended
        exit_status = HANG_EXIT if hang_ended else _shell_status(status)
        self._finish(status, exit_status, hang_ended)
        self._end_fleet()
        return exit_status

    # -- pieces -----------------------------------------------------------------------------

    def _plan_memory(self, env: dict[str, str]) -> None:
        """Before the job starts: will it fit in GPU memory? A warning, never a delay or a stop."""
        lines, data = plan_at_start(self.opts.command, env, self.opts.gpu_memory_bytes)
        for line in lines:
            self.console.note(line)
        if data is not None:
            self.files.write(self.watch_files.memory_plan.name, lambda: write_file(
                self.watch_files.memory_plan, json.dumps(data, indent=2) + "\n"))

    def _internal_error(self, exc: Exception) -> None:
        # Never raises: an error while reporting an error (a full disk) must not reach the loop's
        # `finally`, which would end the job.
        self.files.write(self.watch_files.errors_log.name, lambda: self._append_error(exc))
        if type(exc) not in self._internal_errors:
            self._internal_errors.add(type(exc))
            self.console.note(f"internal error, supervision goes on and the job is untouched "
                              f"({type(exc).__name__}: {exc}; details in {self.watch_files.errors_log})")

    def _append_error(self, exc: Exception) -> None:
        with self.watch_files.errors_log.open("a") as f:
            f.write("".join(traceback.format_exception(exc)) + "\n")

    def _output_lines(self, stream: str, lines: bytes) -> None:
        """Whole lines of the job's output (a tee thread): the failure scan, and the printed metrics."""
        self.live_scan.submit(lines)
        self.sentinels.submit_output(stream, lines)

    def _child_output(self, stream: str, data: bytes) -> None:
        self._last_output_mono = time.monotonic()
        self.fail_slow.feed_output(data)
        self.console.write_child(stream, data)

    def _discover(self) -> None:
        self.tree.reap_orphans()
        tree = self.tree.descendants()
        in_tree = {p.pid for p in tree}
        found = {r: p.pid for r, p in discover_ranks(tree).items()}
        self.ray.update(tree)
        for rank, progress in self.tracker.ranks.items():
            # A reused run directory holds pids of an earlier job: follow only processes of ours.
            if progress.host == self.host and progress.pid in in_tree and rank not in found and progress.ended is None:
                found[rank] = progress.pid
        for rank, pid in list(self.rank_pids.items()):
            if rank not in self.gone and not is_alive(pid):
                self._rank_gone(rank, pid)
        for rank, pid in found.items():
            if rank in self.gone and pid != self.rank_pids.get(rank):
                del self.gone[rank]  # restarted (torchrun --max-restarts): a new process for that rank
                self.gone_t.pop(rank, None)
                self.unrecorded_gone.pop(rank, None)
                self.unrecorded_said.discard(rank)
            if rank not in self.gone:
                self.rank_pids[rank] = pid
        live = {r: p for r, p in self.rank_pids.items() if r not in self.gone}
        self.ray.set_ranks(live)
        self.sampler.set_targets(live)

    def _rank_gone(self, rank: int, pid: int) -> None:
        progress = self.tracker.ranks.get(rank)
        if progress is not None and progress.ended is not None and progress.error is None:
            self.gone[rank] = f"ended ({progress.ended})"
            return
        last = self.sampler.latest(rank)
        rss = f", last RSS {last.rss_bytes / 2**20:.0f} MiB" if last and last.rss_bytes else ""
        phase = f" in {progress.open_path or 'no phase'} at step {progress.step}" if progress else ""
        how = progress.error if progress and progress.error else "without an end record (killed: SIGKILL or the OOM killer?)"
        actor = actor_of(self.ray.role(rank))  # the method last seen may be stale by now; the class is not
        who = f"pid {pid}{f' ({actor})' if actor else ''}"
        self.gone_t[rank] = time.time()
        if progress is None:
            self.gone[rank] = f"{who} exited (not instrumented: no end record says how){rss}"
            self.unrecorded_gone[rank] = time.monotonic()
            return
        self.gone[rank] = f"{who} gone {how}{phase}{rss}"
        self.console.note(f"rank {rank} {self.gone[rank]}")

    def _say_unrecorded_gone(self, now: float) -> None:
        """An unrecorded rank that left while other ranks run on is worth a line; one of a job ending is not."""
        if not any(r not in self.gone for r in self.rank_pids):
            return  # every rank has left: the job is ending, and the launcher's status will say how
        for rank, t in self.unrecorded_gone.items():
            if now - t >= QUIET_GONE_S and rank not in self.unrecorded_said and rank in self.gone:
                self.console.note(f"rank {rank} {self.gone[rank]} while other ranks run on")
                self.unrecorded_said.add(rank)

    def _fail_slow_step(self, now: float) -> None:
        """Stack rounds while the job moves: started once its steps are under way, when its pace falls, or
        when another node's watch started them (its beat); none while every rank has stalled."""
        joined = None
        # Only links between the job's hosts are judged (checks/slow_links.py): the master address and the
        # fleet's beats' addresses say which they are; a service outside the job never names a "slow host".
        job_addrs = {self.cluster.master_addr} if _is_ip(self.cluster.master_addr) else set()
        if self.fleet is not None:
            self.fleet.set_beat(survey=self.fail_slow.token)
            beats = self.fleet.view().beats
            joined = next((b.survey for _, b in sorted(beats.items()) if b.survey), None)
            job_addrs |= {b.addr for b in beats.values() if b.addr}
            store = self.fleet.settings.store
            job_addrs |= {store[0]} if store and _is_ip(store[0]) else set()
        self.fail_slow.job_addrs = frozenset(job_addrs)
        pids = {r: p for r, p in self.rank_pids.items() if r not in self.gone}
        stalled = bool(pids) and self._stall_state(now)[0] == "stalled"
        for line in self.fail_slow.tick(now, pids, stalled=stalled, joined=joined):
            self.console.note(line)

    def _hung(self, now: float) -> bool:
        """Every running rank has stalled, and this stall is due a look (see stall.StallSchedule)."""
        state, key, idle_s = self._stall_state(now)
        return state == "stalled" and self.stalls.due(key, idle_s)

    def _stall_state(self, now: float) -> tuple[str, Hashable | None, float]:
        """("stalled", the stall's key, idle s) when every running rank has stalled; ("progress", ...) when
        one has not; ("idle", ...) with no rank or worker running (not started yet, or ended)."""
        running = [r for r in self.tracker.running() if r not in self.gone]
        if running:
            stalled = self.tracker.stalled(now)
            if not all(r in stalled for r in running):
                return "progress", None, 0.0
            # Records are the progress of an instrumented rank: one that stalls but keeps printing
            # is the same stall, looked at again only as it grows.
            key = tuple(sorted((r, p.num_records) for r, p in self.tracker.ranks.items()))
            return "stalled", key, min(stalled.values())
        live = [r for r in self.rank_pids if r not in self.gone]
        if not live and not self.ray.unranked():
            return "idle", None, 0.0
        # Silence counts from the last sign of work: output, or a rank (or, with no ranks known, a
        # Ray worker) using CPU. A rank the sampler has not measured yet (just discovered, still
        # importing torch) counts as busy, so a slow start is never taken for a hang.
        if any(shows_work(self.sampler.latest(r)) for r in live) or (not live and self.ray.busy()):
            self._last_busy_mono = now
        quiet_since = max(self._last_output_mono, self._last_busy_mono)
        idle_s = now - quiet_since
        if idle_s >= self.opts.uninstrumented_timeout_s:
            return "stalled", ("quiet", quiet_since), idle_s
        return "progress", None, idle_s

    def _hang_step(self, now: float) -> bool:
        """Judges a hang, alone or with the other nodes' watches; True when it ended the job."""
        if self.fleet is None:
            return self._hung(now) and self._alone(self._investigate())
        state, key, idle_s = self._stall_state(now)
        own = (state, stall_name(key), round(idle_s, 1))
        self.fleet.set_beat(state=state, stall=own[1], idle_s=own[2] if state == "stalled" else None,
                            ranks=self._beat_ranks(now), on_hang=self.opts.on_hang)
        view = self.fleet.view()
        if self._kill_after is not None:
            return self._kill_when_read(view, now)
        if not view.connected and self._look is None:
            # No other node's watch is heard (none started one, or they cannot be reached): today's
            # behaviour, this node judged alone.
            if state != "stalled" or not self.stalls.due(key, idle_s):
                return False
            if not self._alone_said:
                self._alone_said = True
                silent = "; ".join(f"node {n}: {why}" for n, why in sorted(view.silent.items()) if n != view.me)
                self.console.note(f"fleet: no other node's watch heard from through the {view.channel or 'channel'} "
                                  f"({silent or 'none'}); this hang is judged on this node alone")
            return self._alone(self._investigate())
        if view.deciding:
            return self._decide(view, own, now)
        self._look = None  # a decider again later starts its own look
        if view.look and view.look != self._answered:
            self._answered = view.look
            self.fleet.answer(view.look, self._investigate(fleet_look=view.look))
        if view.verdict is not None and view.verdict[0] not in self._applied:
            return self._apply(*view.verdict, deciding=False, now=now)
        return False

    def _decide(self, view: FleetView, own: tuple[str, str | None, float], now: float) -> bool:
        """As the deciding watch: ask for a look when the whole job stalled, then merge the answers."""
        if self._look is None:
            stall = fleet_stall(view, own)
            if stall is None or not self.stalls.due(stall.key, stall.idle_s):
                return False
            self._num_verdicts += 1
            look = _Look(f"{self.host}-{self._num_verdicts}", now)
            self._look = look
            self.fleet.ask(look.id)
            look.own = self._investigate(fleet_look=look.id)
            self.fleet.answer(look.id, look.own)
            return False
        look = self._look
        reports = {n: report for n, (look_id, report) in view.stacks.items() if look_id == look.id and n in view.live}
        reports[view.me] = look.own
        waiting = [n for n in view.live if n not in reports]
        wait_s = self.opts.second_look_s + FLEET_STACKS_WAIT_S
        if waiting and now - look.started_mono < wait_s:
            return False
        missing = dict(view.silent) | {n: f"no stacks within {wait_s:.0f} s" for n in waiting}
        verdict = build_verdict(look.id, reports, view, missing, decider_host=self.host,
                                nnodes=self.fleet.settings.nnodes, action=self.opts.on_hang)
        if verdict.fleet is not None and verdict.fleet.action == "kill" and (spare := reason_to_spare(verdict)):
            self.console.note(f"not ending the job (--on-hang kill): {spare}")
            verdict = replace(verdict, fleet=replace(verdict.fleet, action="report"))
        self._look = None
        self.fleet.decide(look.id, verdict)
        return self._apply(look.id, verdict, deciding=True, now=now)

    def _apply(self, verdict_id: str, report: HangReport, *, deciding: bool, now: float) -> bool:
        """Every watch: print the fleet's verdict, keep it as this node's hang-N.json, end this node's
        processes when it says so. Only the decider alerts."""
        self._applied.add(verdict_id)
        hang_file = self._keep(report)
        for line in hang_lines(report):
            self.console.note(line)
        if deciding:
            self.alerter.send("hang", finding_from_hang(report, hang_file))
        else:
            self.alerter.notified_ids.add("hang")  # the decider alerted: not again with this node's report
            self.fleet.applied(verdict_id)
        if report.fleet is None or report.fleet.action != "kill":
            return False
        if deciding:  # its own processes once the others read it: a node whose ranks die first ends on its own
            self._end_job("ending the job (--on-hang kill; each node's watch ends its own processes)", tree=False)
            self._kill_after = (verdict_id, now + FLEET_ACK_WAIT_S)
            return self._kill_when_read(self.fleet.view(), now)
        return self._end_job(f"ending the job (--on-hang kill of {report.fleet.decider}'s watch; each node's watch "
                             "ends its own processes)")

    def _kill_when_read(self, view: FleetView, now: float) -> bool:
        verdict_id, deadline = self._kill_after
        unread = [n for n in view.live if n != view.me and getattr(view.beats.get(n), "seen", None) != verdict_id]
        if unread and now < deadline:
            return False
        self._kill_after = None
        self.tree.end(self.opts.grace_s)
        return True

    def _alone(self, report: HangReport) -> bool:
        """This node judged alone (today's behaviour): the report is printed, alerted and kept."""
        hang_file = self._keep(report)
        for line in hang_lines(report):
            self.console.note(line)
        self.alerter.send("hang", finding_from_hang(report, hang_file))  # in the background: never a delay
        if self.opts.on_hang != "kill":
            return False
        if spare := reason_to_spare(report):
            self.console.note(f"not ending the job (--on-hang kill): {spare}")
            return False
        return self._end_job("ending the job (--on-hang kill)")

    def _end_job(self, line: str, *, tree: bool = True) -> bool:
        """Says so and ends this node's process tree (`tree`; the decider of a fleet a moment later)."""
        self.console.note(line)
        self.live_scan.end_of_job()  # its tracebacks now are our doing: not evidence
        self.console.fold_child_output()  # nor shown: torchrun's SignalException traceback would bury the verdict
        if tree:
            self.tree.end(self.opts.grace_s)
        return True

    def _keep(self, report: HangReport) -> Path:
        self.hangs.append(report)
        hang_file = self.watch_files.hang_report(len(self.hangs))
        self.files.write(hang_file.name, lambda: write_file(hang_file, json.dumps(report.to_dict(), indent=2, default=str)))
        return hang_file

    def _investigate(self, fleet_look: str | None = None) -> HangReport:
        """This node's ranks' stacks, twice (hang.py). For a fleet's look they go to the decider, not to
        the console as a verdict."""
        self.fail_slow.quiesce()  # one investigation's py-spys at a time: a stack round in flight ends first
        pids = {r: p for r, p in self.rank_pids.items() if r not in self.gone}
        actors = self.ray.unranked()
        whose = f"rank(s) {format_ranks(pids)}" if pids else "no rank"
        why = f"look {fleet_look}: every node's ranks stalled" if fleet_look else "no progress from any running rank"
        self.console.note(f"{why}; taking the stacks of {whose}"
                          + (f" and of {len(actors)} Ray worker(s) with no rank" if actors else ""))
        return investigate(
            pids, self.tracker, self.paths,
            second_look_s=self.opts.second_look_s, native=self.opts.native, gpus=self.sampler.latest_gpus(),
            roles={r: self.ray.role(r) for r in pids if self.ray.role(r)}, actors=actors,
        )

    def _beat_ranks(self, now: float) -> dict[int, tuple]:
        """This node's ranks for its beat: step, open phase, seconds since progress, pid."""
        out = {}
        for rank, p in self.tracker.ranks.items():
            pid = self.rank_pids.get(rank)
            if pid is None and p.host != self.host:
                continue  # another node's rank, read from a shared run directory
            idle = round(now - p.seen_mono, 1) if p.seen_mono is not None else None
            out[rank] = (p.step, p.open_path, idle, pid or p.pid)
        return out

    # -- the fleet --------------------------------------------------------------------------------

    def _start_fleet(self) -> None:
        """Joins the other nodes' watches of a job of several nodes (NNODES, SLURM_NNODES above 1)."""
        nnodes, node = self.cluster.nnodes, self.cluster.node_rank
        if self.opts.fleet == "off" or not nnodes or nnodes < 2:
            return
        if node is None:
            self.console.note(f"fleet: a job of {nnodes} nodes, but no node id known for this one: hangs are "
                              "judged on this node alone")
            return
        store = store_address(self.cluster.master_addr, self.cluster.master_port, self.opts.command,
                              self.opts.fleet_port)
        settings = FleetSettings(node=node, nnodes=nnodes, host=self.host, channel=self.opts.fleet, store=store)
        self.fleet = Fleet(settings, self.paths, note=self.console.note)
        self.fleet.start()
        where = f"a TCPStore at {store[0]}:{store[1]}" if store else "no TCPStore (no master address)"
        ways = {"auto": f"the run directory and {where}", "dir": "the run directory", "store": where}
        self.console.note(f"fleet: node {node} of {nnodes}; hangs are judged over every node's ranks by the live "
                          f"watch with the lowest node id (through {ways[self.opts.fleet]})")

    def _late_verdict(self) -> bool:
        """After the job ended: whether a kill verdict of the fleet ended it. The decider's ranks may die
        of the other nodes' kills before its own; a watch whose ranks did so before it read the verdict
        it sent its stacks for still prints and keeps it (waiting at most FLEET_ACK_WAIT_S)."""
        if self.fleet is None:
            return False
        if self._kill_after is not None:
            self._kill_after = None
            return True
        look = self._answered
        deadline = time.monotonic() + FLEET_ACK_WAIT_S
        while look is not None and look not in self._applied and time.monotonic() < deadline:
            view = self.fleet.view()
            if view.verdict is not None and view.verdict[0] == look:
                verdict = view.verdict[1]
                self._apply(look, verdict, deciding=False, now=time.monotonic())
                return verdict.fleet is not None and verdict.fleet.action == "kill"
            time.sleep(0.1)
        return False

    def _end_fleet(self) -> None:
        """At the end: say this node is done. In a shared run directory only the decider writes the report,
        once the other nodes' watches are done (at most FLEET_END_WAIT_S)."""
        if self.fleet is None:
            return
        try:
            self.fleet.finish()
            shared = self.fleet.shares_directory()
            view = self.fleet.view()
            if shared and view.connected and not view.deciding:
                self.writes_report = False
                host = view.beats[view.decider].host if view.decider in view.beats else f"node {view.decider}"
                self.console.note(f"the report of every node is written by {host}'s watch (node {view.decider}): "
                                  f"{self.paths.report_html}")
            elif shared:
                pending = self.fleet.wait_for_done(FLEET_END_WAIT_S)
                if pending:
                    self.console.note(f"writing the report without waiting longer for {', '.join(sorted(pending.values()))} "
                                      f"(not done after {FLEET_END_WAIT_S:.0f} s)")
        finally:
            self.fleet.close()

    def _update_panel(self, now: float) -> None:
        rows = []
        for rank in sorted(set(self.rank_pids) | set(self.tracker.ranks)):
            p = self.tracker.ranks.get(rank)
            gpu = self.sampler.latest_gpu_bytes(self.rank_pids.get(rank))
            idle = now - p.seen_mono if p and p.seen_mono else None
            phase = self.gone.get(rank, p.open_path if p else None)
            rows.append((rank, p.step if p else None, phase, idle, gpu))
        self.console.panel(rows)

    def _on_signal(self, signum: int, frame) -> None:
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts == 1:
                self.console.note("Ctrl-C: passed to the job; waiting for it to stop (Ctrl-C again ends it now)")
                self.tree.forward(signal.SIGINT)
                return
            self.console.note("second Ctrl-C: ending every process of the job")
        else:
            self.console.note(f"{signal.Signals(signum).name}: ending every process of the job")
            self.tree.forward(signum)
        self.live_scan.end_of_job()
        threading.Thread(target=self.tree.end, args=(self.opts.grace_s,), daemon=True).start()

    # -- records ----------------------------------------------------------------------------

    def _write_run_json(self, env_added: dict[str, str]) -> None:
        self.files.add_host_to_run_json(RunInfo(
            command=tuple(self.opts.command), grpo_doctor_version=__version__,
            hosts={self.host: WatchHost(pid=os.getpid(), env_set_by_watch=env_added,
                                        launch_env={k: os.environ[k] for k in PLAN_ENV if k in os.environ},
                                        hang_policy=asdict(self.opts.policy), on_hang=self.opts.on_hang,
                                        cluster=None if self.cluster.is_empty else self.cluster)}))

    def _finish(self, status: int | None, exit_status: int, hang_ended: bool) -> None:
        try:  # the job's last steps, as the report will read them
            for line in self.sentinels.finish(self._late_records):
                self.console.note(line)
        except Exception as exc:  # noqa: BLE001 - never what loses the summary
            self._internal_error(exc)
        if status == 0 and not hang_ended:  # the launcher says every unrecorded rank exited cleanly
            self.gone.update({r: "ended (the launcher exited 0)" for r in self.unrecorded_gone if r in self.gone})
        ranks = watched_ranks(self.tracker.ranks, self.rank_pids, self.gone, roles=self.ray.roles, gone_t=self.gone_t,
                              exited=set(self.unrecorded_gone) if status == 0 and not hang_ended else set())
        summary = build_summary(
            self.host, status, exit_status, hang_ended, ranks,
            num_hangs=len(self.hangs), signatures=self.live_scan.counts, bad_event_lines=self.tracker.num_bad_lines,
            live_scan_complete=self.live_scan.complete, live_scan_skipped_bytes=self.live_scan.skipped_bytes)
        summary_file = self.watch_files.summary_json
        self.files.write(summary_file.name, lambda: write_file(summary_file, json.dumps(summary.to_dict(), indent=2)))
        for line in summary_lines(summary):
            self.console.note(line)
        if self.console.folded_lines:
            self.console.note(f"{self.console.folded_lines} line(s) the job printed while watch ended it not shown "
                              f"(saved in {self.watch_files.stdout_log.name} and {self.watch_files.stderr_log.name})")
        self.console.note(f"run directory: {self.paths.root}")


@dataclass
class _Look:
    """The deciding watch's look at a stall of the whole job: its id, when it was asked, its own stacks."""

    id: str
    started_mono: float
    own: HangReport | None = None


def _is_ip(addr: str | None) -> bool:
    try:
        ipaddress.ip_address(addr or "")
    except ValueError:
        return False
    return True


def _widen_pipe(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):  # above /proc/sys/fs/pipe-max-size for a user, or not Linux
        pass


def _shell_status(status: int | None) -> int:
    """The command's status as a shell would report it: 128 + N when killed by signal N."""
    if status is None:
        return 1
    return 128 - status if status < 0 else status

