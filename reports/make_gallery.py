"""Regenerates the gallery: one example report per failure scenario of the reference trainer.

Each scenario runs the reference trainer for real (torchrun, 4 CPU ranks, gloo)
under `grpo-doctor watch`, with one `--inject` fault; the report.html, findings.json and a
Chromium screenshot (report.png) are kept in reports/<scenario>/, the run directory itself in a
temporary directory. reports/README.md lists the scenarios with their top finding.

Typical use (from the repository root, about 5 minutes on 2 cores):
    .venv/bin/python reports/make_gallery.py
    .venv/bin/python reports/make_gallery.py --only hang crash
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.report.browser import screenshot

GALLERY = Path(__file__).resolve().parent
REPO = GALLERY.parent


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    trainer_args: tuple[str, ...]
    watch_args: tuple[str, ...] = ()


SCENARIOS = (
    Scenario("healthy", "a healthy run: no finding", ("--steps", "8")),
    Scenario("hang", "rank 3 blocks in rollout at step 3 while the others wait in a collective",
             ("--steps", "8", "--inject", "hang:rank=3,phase=rollout,step=3"),
             ("--hang-floor", "5", "--hang-factor", "3", "--second-look", "1", "--on-hang", "kill")),
    Scenario("crash", "rank 2 raises in backward at step 2", ("--steps", "6", "--inject",
                                                               "crash:rank=2,step=2,phase=backward")),
    Scenario("sigkill", "rank 1 is SIGKILLed in forward at step 2 (as by the OOM killer)",
             ("--steps", "6", "--inject", "crash:rank=1,step=2,how=sigkill,phase=forward")),
    Scenario("host-oom", "rank 1 runs out of host memory in forward at step 2",
             ("--steps", "6", "--inject", "oom:rank=1,step=2")),
    Scenario("desync", "rank 1 calls a collective the others never call at step 2",
             ("--steps", "6", "--dist-timeout-s", "20", "--inject", "desync:rank=1,step=2"),
             ("--hang-floor", "5", "--hang-factor", "3", "--second-look", "1", "--on-hang", "kill")),
    Scenario("straggler", "rank 3 is 1 s slower in every rollout", ("--steps", "8", "--inject",
                                                                     "slow:rank=3,delay_s=1.0")),
    Scenario("same-seed", "every rank samples with the same seed (CASES.md case 2)",
             ("--steps", "8", "--per-device-batch", "2", "--inject", "same-seed-per-node")),
    Scenario("constant-reward", "the reward function returns 1.0 for everything",
             ("--steps", "8", "--inject", "constant-reward:value=1.0")),
    Scenario("nan-loss", "the loss turns NaN at step 3", ("--steps", "6", "--inject", "nan-loss:step=3")),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=[s.name for s in SCENARIOS], help="scenarios to regenerate")
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    with tempfile.TemporaryDirectory(prefix="grpo-doctor-gallery-") as tmp:
        for scenario in chosen:
            print(f"== {scenario.name}: {scenario.what}", flush=True)
            run_scenario(scenario, Path(tmp) / scenario.name)
    write_index()
    return 0


def run_scenario(scenario: Scenario, run_dir: Path) -> None:
    port = _free_port()
    command = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir),
               *scenario.watch_args, "--",
               sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
               "--master-port", str(port), "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--run-dir", str(run_dir),
               "--dist-timeout-s", "60", *scenario.trainer_args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    print("\n".join(line for line in result.stderr.splitlines() if line.startswith("grpo-doctor:")), flush=True)
    out = GALLERY / scenario.name
    out.mkdir(exist_ok=True)
    for name in ("report.html", "findings.json"):
        shutil.copyfile(run_dir / name, out / name)
    screenshot(out / "report.html", out / "report.png", height=2000)
    (out / "scenario.json").write_text(json.dumps({"name": scenario.name, "what": scenario.what,
                                                   "trainer_args": list(scenario.trainer_args),
                                                   "watch_args": list(scenario.watch_args),
                                                   "exit_status": result.returncode}, indent=2) + "\n")


def write_index() -> None:
    lines = ["# Gallery: one report per failure scenario of the reference trainer", "",
             "Regenerate with `.venv/bin/python reports/make_gallery.py` (see its docstring). Each run is the",
             "reference trainer on 4 CPU ranks under `grpo-doctor watch` with one injected fault.", "",
             "| scenario | what happened | top finding | report | screenshot |", "|---|---|---|---|---|"]
    for scenario in SCENARIOS:
        out = GALLERY / scenario.name
        if not (out / "findings.json").is_file():
            continue
        findings = json.loads((out / "findings.json").read_text())["findings"]
        top = f"`{findings[0]['id']}` ({findings[0]['severity']}): {findings[0]['title']}" if findings else "none"
        lines.append(f"| {scenario.name} | {scenario.what} | {top.replace('|', '/')} | "
                     f"[report.html]({scenario.name}/report.html) | [report.png]({scenario.name}/report.png) |")
    (GALLERY / "README.md").write_text("\n".join(lines) + "\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
