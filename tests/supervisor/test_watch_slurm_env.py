"""`grpo-doctor watch` under Slurm: it records what the scheduler told this node in run.json, marks its
own lines with the node ("grpo-doctor [node 1/2]: ..."), and passes the job's environment on untouched
(no NNODES or MASTER_ADDR of its own making)."""
from __future__ import annotations

import json
import subprocess
import sys

from helpers import clean_env

from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.run_info import RunInfo

SLURM = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu-a[1-2]-b[3]",
         "SLURM_GPUS_ON_NODE": "8", "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2"}
SHOW_ENV = "import os; print('job sees', [os.environ.get(k) for k in ('NNODES', 'NODE_RANK', 'MASTER_ADDR', 'SLURM_NODEID')])"


def test_watch_records_the_slurm_mapping_and_names_the_node_in_its_lines(tmp_path):
    # --fleet dir: the watches of the job's nodes meet through the run directory alone (no TCPStore at
    # gpu-a1-b3, a name of Slurm's manual, not of this network).
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--no-report", "--fleet", "dir",
                          "--run-dir", str(tmp_path / "run"), "--", sys.executable, "-c", SHOW_ENV],
                         env=clean_env(**SLURM), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "job sees [None, None, None, '1']" in out.stdout
    assert ("grpo-doctor [node 1/2]: slurm job 4242, node 1/2, master gpu-a1-b3 (from node count SLURM_NNODES, "
            "node rank SLURM_NODEID, master address first host of SLURM_JOB_NODELIST)") in out.stderr
    assert "grpo-doctor [node 1/2]: job finished: exit status 0" in out.stderr
    assert "grpo-doctor [node 1/2]: fleet: node 1 of 2; hangs are judged over every node's ranks" in out.stderr
    (host,) = RunInfo.from_dict(json.loads(RunPaths(tmp_path / "run").run_json.read_text())).hosts.values()
    cluster = host.cluster
    assert (cluster.nnodes, cluster.node_rank, cluster.master_addr, cluster.nproc_per_node) == (2, 1, "gpu-a1-b3", 8)
    assert (cluster.job_id, cluster.task_rank, cluster.scheduler, cluster.problems) == ("4242", 1, "slurm", ())


def test_a_bad_slurm_value_is_one_line_and_the_job_still_runs(tmp_path):
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--no-report", "--run-dir",
                          str(tmp_path / "run"), "--", sys.executable, "-c", "print('ran')"],
                         env=clean_env(**{**SLURM, "SLURM_NODEID": "7"}), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ran" in out.stdout and "Traceback" not in out.stderr
    (line,) = [ln for ln in out.stderr.splitlines() if "SLURM_NODEID" in ln]
    assert line == "grpo-doctor: SLURM_NODEID=7 with SLURM_NNODES=2: a node id is 0 .. 1; ignored"
