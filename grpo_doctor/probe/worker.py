"""The probe on one rank, as torchrun starts it (`torchrun ... -m grpo_doctor.probe`): a rank
rendezvous that names who is missing, the settings of every rank compared per node, then
collectives (correctness, size sweep) and send/recv links, with a timeout on everything.

Results travel through the c10d store, not the process group, so a broken group still reports.
Every rank judges the same gathered results, so all exit with the same status; global rank 0
writes `probe/collectives.json` and prints the table.

Typical use:
    torchrun --nnodes 2 --nproc-per-node 8 ... -m grpo_doctor.probe --run-dir runs/probe-1
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from grpo_doctor.probe import table
from grpo_doctor.probe.consistency import compare_nodes
from grpo_doctor.probe.options import ProbeOptions, add_measure_arguments, options_from_args
from grpo_doctor.probe.results import CollectivesReport, Problem, write_json
from grpo_doctor.probe.settings import SettingsError, node_settings
from grpo_doctor.probe.stage_guard import StageGuard
from grpo_doctor.probe.store_gather import finish_together, gather_over_store
from grpo_doctor.probe.verdict import collective_problems, exit_status
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.ranks import format_ranks

NODES_CHECKED_ENV = "GRPO_DOCTOR_PROBE_NODES_CHECKED"  # set by `grpo-doctor probe`: nodes already compared
PREFIX = "grpo-doctor-probe"
REQUIRED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def main(argv: list[str] | None = None) -> int:
    started_mono = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m grpo_doctor.probe",
                                     description="grpo-doctor probe, one rank (start it with torchrun)")
    add_measure_arguments(parser)
    args = parser.parse_args(argv)
    missing = [k for k in REQUIRED_ENV if k not in os.environ]
    if missing:
        print(f"grpo-doctor probe: error: {', '.join(missing)} not set: this is one rank of the probe.\n"
              "  hint: start it with torchrun (torchrun --nproc-per-node N -m grpo_doctor.probe), or run "
              "`grpo-doctor probe --nproc-per-node N` on every node", file=sys.stderr)
        return 2
    try:
        opts = options_from_args(args, os.environ, started_mono=started_mono)
    except SettingsError as exc:
        print(f"grpo-doctor probe: error: {exc}", file=sys.stderr)
        return 2
    status = RankProbe(opts).run()
    sys.stdout.flush()
    sys.stderr.flush()
    # A collective that timed out leaves threads blocked in the transport; they must not keep
    # the process (and torchrun) waiting at interpreter exit.
    os._exit(status)


class RankProbe:
    def __init__(self, opts: ProbeOptions):
        self.opts = opts
        env = os.environ
        self.rank, self.world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
        self.local_rank = int(env.get("LOCAL_RANK", "0"))
        self.local_world_size = int(env.get("LOCAL_WORLD_SIZE", "1"))
        self.node_rank = int(env.get("GROUP_RANK", env.get("NODE_RANK", "0")))
        self.host = socket.gethostname()
        self.guard = StageGuard(on_expiry=self._gave_up)
        self.is_server = False

    def say(self, line: str) -> None:
        if self.rank == 0:
            print(line, flush=True)

    def run(self) -> int:
        import torch
        import torch.distributed as dist

        cuda = torch.cuda.is_available() and self.opts.backend in ("auto", "nccl")
        backend = "nccl" if cuda else "gloo"
        device = torch.device(f"cuda:{self.local_rank}") if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        store = self._store(dist)
        if store is None:
            return 1
        joined = self._rank_rendezvous(store)
        if joined is None:
            return 1
        host_of, settings, versions = joined
        problems = [] if os.environ.get(NODES_CHECKED_ENV) else self._compare(joined)
        self.say(f"grpo-doctor probe: {self.world_size} ranks on {len(set(host_of.values()))} node(s), "
                 f"backend {backend}, every rank joined")
        mine = self._measure(dist, store, device, backend)
        try:
            results = gather_over_store(store, f"{PREFIX}/results", me=self.rank, expected=range(self.world_size),
                                        payload=mine, deadline_mono=time.monotonic() + self.opts.op_timeout_s * 2)
        except Exception as exc:  # noqa: BLE001 - the store's server (rank 0 or torchrun's agent) is gone
            print(f"grpo-doctor probe: rank {self.rank} ({self.host}) lost the store while gathering results: "
                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__} (did rank 0 or its node die?)",
                  file=sys.stderr, flush=True)
            return 1
        per_rank = results.first()
        found, summary = collective_problems(per_rank, host_of, self.opts.slow_ratio)
        if results.missing:
            found.append(Problem(id="nccl-error", severity="critical",
                                 message=f"rank(s) {format_ranks(results.missing)} never reported their measurements",
                                 ranks=results.missing, hosts=[host_of[r] for r in results.missing if r in host_of]))
        problems += found
        status = exit_status(problems)
        if self.rank == 0:
            report = CollectivesReport(
                backend=backend, world_size=self.world_size, hosts={str(r): h for r, h in host_of.items()},
                settings={str(r): s for r, s in settings.items()}, versions={str(r): v for r, v in versions.items()},
                checks=[{"rank": r, **c} for r, res in per_rank.items() for c in res.get("checks", [])],
                sweep=per_rank.get(0, {}).get("sweep", []), links=summary["links"],
                rdzv_timeout_s=self.opts.rdzv_timeout_s, problems=list(problems), t=time.time())
            where = self._write(report)
            checks = {r: res.get("checks", []) for r, res in per_rank.items()}
            lines = [table.check_line(checks), *table.sweep_lines(report.sweep), *table.link_lines(summary),
                     *table.problem_lines(problems)]
            if not os.environ.get(NODES_CHECKED_ENV):  # else `grpo-doctor probe` says the verdict
                lines.append(table.verdict_line(status, where))
            for line in lines:
                self.say(line)
        self.guard.start("finishing", self.opts.op_timeout_s)
        finish_together(store, f"{PREFIX}/results", me=self.rank, members=range(self.world_size),
                        is_server=self.is_server)
        self.guard.stop()
        return status

    # -- stages ------------------------------------------------------------------------------

    def _store(self, dist: Any) -> Any:
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        # Under torchrun the agent already serves a store there; launched otherwise, rank 0 does.
        self.is_server = self.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
        try:
            return dist.TCPStore(addr, port, self.world_size if self.is_server else None, self.is_server,
                                 timeout=timedelta(seconds=max(1.0, self._rdzv_deadline() - time.monotonic())),
                                 wait_for_workers=False)
        except Exception as exc:  # noqa: BLE001 - DistNetworkError, DistStoreError, TimeoutError
            print(f"grpo-doctor probe: rank {self.rank} ({self.host}) cannot reach the store at {addr}:{port} "
                  f"within {self.opts.rdzv_timeout_s:g} s: {str(exc).splitlines()[0]}\n"
                  "  hint: check MASTER_ADDR/MASTER_PORT and that rank 0's node is up (`grpo-doctor probe "
                  "--nproc-per-node N` on every node names the cause)", file=sys.stderr, flush=True)
            return None

    def _rank_rendezvous(self, store: Any) -> tuple[dict, dict, dict] | None:
        from grpo_doctor.host.environment import collect_versions
        from grpo_doctor.host.nvml import Nvml
        from grpo_doctor.probe.preflight import gpus_visible

        nvml = Nvml()
        env = os.environ
        nnodes = int(env.get("NNODES") or env.get("GROUP_WORLD_SIZE") or 0) or None
        settings = node_settings(env, nnodes=nnodes, nproc_per_node=self.local_world_size,
                                 gpus=gpus_visible(nvml, env.get("CUDA_VISIBLE_DEVICES")),
                                 expect=self.opts.expect, args=self.opts.args)
        settings["local_world_size"] = self.local_world_size
        payload = {"host": self.host, "node_rank": self.node_rank, "settings": settings,
                   "versions": collect_versions(nvml)}
        got = gather_over_store(store, f"{PREFIX}/rank", me=self.rank, expected=range(self.world_size),
                                payload=payload, deadline_mono=self._rdzv_deadline())
        posts = got.first()
        if got.missing:
            self._report_missing(got.missing, posts)
            return None
        return ({r: p["host"] for r, p in posts.items()}, {r: p["settings"] for r, p in posts.items()},
                {r: p["versions"] for r, p in posts.items()})

    def _rdzv_deadline(self) -> float:
        return self.opts.started_mono + self.opts.rdzv_timeout_s

    def _report_missing(self, missing: list[int], posts: dict[int, dict]) -> None:
        nodes = sorted({r // self.local_world_size for r in missing})
        problem = Problem(
            id="rendezvous-failure", severity="critical",
            message=f"rank(s) {format_ranks(missing)} never joined within {self.opts.rdzv_timeout_s:g} s (node(s) "
                    f"{', '.join(map(str, nodes))} by NPROC_PER_NODE={self.local_world_size}); "
                    f"{len(posts)} of {self.world_size} joined",
            hint="Start every node within the rendezvous timeout, and read the missing ranks' logs: a rank that "
                 "crashed at start-up never joins.", ranks=missing)
        if self.rank == min(posts):  # the lowest rank present speaks for all
            report = CollectivesReport(
                backend="", world_size=self.world_size, hosts={str(r): p["host"] for r, p in posts.items()},
                settings={str(r): p["settings"] for r, p in posts.items()},
                versions={str(r): p["versions"] for r, p in posts.items()}, missing_ranks=missing,
                rdzv_timeout_s=self.opts.rdzv_timeout_s, problems=[problem], t=time.time())
            where = self._write(report)
            print("\n".join([*table.problem_lines([problem]), table.verdict_line(1, where)]), flush=True)

    def _compare(self, joined: tuple[dict, dict, dict]) -> list[Problem]:
        host_of, settings, versions = joined
        first_rank_of: dict[str, int] = {}
        for rank, host in sorted(host_of.items()):
            first_rank_of.setdefault(host, rank)
        nodes = [(i, host, settings[r], versions[r]) for i, (host, r) in enumerate(first_rank_of.items())]
        return compare_nodes(nodes)

    def _measure(self, dist: Any, store: Any, device: Any, backend: str) -> dict[str, Any]:
        from grpo_doctor.probe.collectives import CollectiveTimeout, check_collectives, sweep_sizes
        from grpo_doctor.probe.links import measure_links

        opts = self.opts
        out: dict[str, Any] = {"checks": [], "sweep": [], "links": [], "error": None}
        try:
            self.guard.start("init_process_group", opts.rdzv_timeout_s)
            dist.init_process_group(backend, store=dist.PrefixStore(f"{PREFIX}/pg", store), rank=self.rank,
                                    world_size=self.world_size, timeout=timedelta(seconds=opts.op_timeout_s))
            self.guard.start("correctness checks", opts.op_timeout_s * 5)
            out["checks"] = check_collectives(device, opts.op_timeout_s)
            broken = frozenset(c["op"] for c in out["checks"] if not c["ok"])
            self.guard.start("size sweep", opts.op_timeout_s * len(opts.sizes_bytes) * 4)
            out["sweep"] = sweep_sizes(device, opts.sizes_bytes, iters=opts.iters, warmup=opts.warmup,
                                       op_timeout_s=opts.op_timeout_s, skip=broken)
            self.guard.start("send/recv links", opts.op_timeout_s * 2 * (opts.repeats + 1))
            out["links"] = measure_links(device, num_bytes=opts.p2p_bytes, repeats=opts.repeats,
                                         op_timeout_s=opts.op_timeout_s)
        except CollectiveTimeout as exc:
            out["error"] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a transport error: reported like a timeout
            out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            self.guard.stop()
        return out

    def _write(self, report: CollectivesReport) -> str:
        path = RunPaths(Path(self.opts.run_dir)).probe_collectives
        try:
            write_json(path, report.to_dict())
        except OSError as exc:
            print(f"grpo-doctor probe: could not write {path} ({exc.strerror or exc})", file=sys.stderr)
        return str(path)

    def _gave_up(self, stage: str, budget_s: float) -> None:
        print(f"grpo-doctor probe: rank {self.rank} ({self.host}) gave up: {stage} took over {budget_s:.0f} s "
              "(a rank or link is down, or the network is far slower than expected)", file=sys.stderr, flush=True)
        os._exit(1)
