"""The scheduler's variables read into one ClusterEnv: Slurm's host lists expanded as Slurm does, the
first host as master; torchrun's, Kubeflow's (PyTorchJob v1, Trainer v2) and Slurm's variables in that
order, each field naming the variable that gave it; a bad value is one line, never an exception."""
from __future__ import annotations

import json

import pytest

from grpo_doctor.host.cluster_env import cluster_lines, describe_sources, read_cluster_env
from grpo_doctor.host.hostlist import HostlistError, expand_hostlist
from grpo_doctor.schema.cluster_env import ClusterEnv
from grpo_doctor.schema.run_info import RunInfo, WatchHost

# `env | grep SLURM` inside a 4-node sbatch job, as a user posted it (gist jerinphilip/212b3814...).
SRUN_ENV = {
    "SLURM_NODELIST": "gnode[10,20,25,37]", "SLURM_JOB_NAME": "test-multi-nodes", "SLURMD_NODENAME": "gnode10",
    "SLURM_NTASKS_PER_NODE": "4", "SLURM_JOB_GPUS": "2", "SLURM_NNODES": "4", "SLURM_JOBID": "200505",
    "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "1(x4)", "SLURM_JOB_ID": "200505", "SLURM_CPUS_PER_TASK": "1",
    "SLURM_NODEID": "0", "SLURM_NPROCS": "4", "SLURM_CPUS_ON_NODE": "4", "SLURM_PROCID": "0",
    "SLURM_JOB_NODELIST": "gnode[10,20,25,37]", "SLURM_LOCALID": "0", "SLURM_JOB_CPUS_PER_NODE": "4(x4)",
    "SLURM_JOB_NUM_NODES": "4",
}


@pytest.mark.parametrize("hostlist, hosts", [
    # The forms of Slurm's own manual pages (Slurm::Hostlist(3pm), slurm_hostlist_create(3)).
    ("tux[0-5,12,20-25]", [f"tux{n}" for n in (0, 1, 2, 3, 4, 5, 12, 20, 21, 22, 23, 24, 25)]),
    ("node1,node[2-5,12]", ["node1", "node2", "node3", "node4", "node5", "node12"]),
    ("linux[1-3,6]", ["linux1", "linux2", "linux3", "linux6"]),
    ("gnode[10,20,25,37]", ["gnode10", "gnode20", "gnode25", "gnode37"]),
    # Zero padding keeps the width of a range's first number.
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("n[8-10],m[08-10]", ["n8", "n9", "n10", "m08", "m09", "m10"]),
    # Several bracket groups, the first outermost; several expressions; whitespace separates too.
    ("gpu-a[1-2]-b[3,5]", ["gpu-a1-b3", "gpu-a1-b5", "gpu-a2-b3", "gpu-a2-b5"]),
    ("login1 dgx-[001-002],gpu-a[7]-b[3]", ["login1", "dgx-001", "dgx-002", "gpu-a7-b3"]),
])
def test_slurm_host_lists_expand_as_scontrol_show_hostnames_does(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist, message", [
    ("node[01-04", "a '[' never closed in 'node[01-04'"),
    ("node]1", "a ']' without its '['"),
    ("node[4-1]", "the range 4-1 runs backwards"),
    ("node[1,,2]", "an empty range"),
    ("bgl[123x456]", "'123x456' is not a number or a lo-hi range"),
    ("node[0-99999999]", "names more than 65536 hosts"),
    (" , ", "names no host"),
])
def test_a_malformed_host_list_says_what_is_wrong(hostlist, message):
    with pytest.raises(HostlistError, match=message.replace("[", r"\[").replace("(", r"\(")):
        expand_hostlist(hostlist)


def test_a_real_sbatch_environment_gives_nodes_node_id_master_and_job():
    env = read_cluster_env(SRUN_ENV)
    assert (env.nnodes, env.node_rank, env.master_addr, env.job_id, env.scheduler) == (4, 0, "gnode10", "200505", "slurm")
    assert env.nproc_per_node == 4 and env.master_port is None and not env.problems
    assert (env.task_rank, env.task_local_rank, env.num_tasks) == (0, 0, 4)
    assert describe_sources(env) == ("node count SLURM_NNODES, node rank SLURM_NODEID, "
                                     "master address first host of SLURM_NODELIST, ranks per node SLURM_NTASKS_PER_NODE")


def test_srun_steps_variables_come_before_the_jobs():
    # A 2-node step inside a 4-node job: SLURM_NODEID counts the step's nodes.
    env = read_cluster_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "4", "SLURM_JOB_NODELIST": "dgx[01-04]",
                            "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "dgx[03-04]", "SLURM_NODEID": "1",
                            "SLURM_GPUS_ON_NODE": "8", "SLURM_NTASKS_PER_NODE": "1"})
    assert (env.nnodes, env.node_rank, env.master_addr, env.nproc_per_node) == (2, 1, "dgx03", 8)
    assert env.label == "node 1/2"


def test_one_task_per_node_says_nothing_of_ranks_per_node():
    env = read_cluster_env({"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
                            "SLURM_NODELIST": "n[1-2]", "SLURM_NTASKS_PER_NODE": "1"})
    assert env.nproc_per_node is None and "nproc_per_node" not in env.sources


def test_torchrun_variables_win_over_slurms():
    env = read_cluster_env({**SRUN_ENV, "MASTER_ADDR": "10.1.0.5", "MASTER_PORT": "29511", "NNODES": "4"})
    assert (env.master_addr, env.master_port, env.nnodes, env.node_rank) == ("10.1.0.5", 29511, 4, 0)
    assert env.sources["master_addr"] == "MASTER_ADDR" and env.sources["node_rank"] == "SLURM_NODEID"


def test_a_pytorchjob_pod_of_an_older_operator_counts_pods_in_world_size_and_rank():
    # training-operator's setPodEnv: MASTER_ADDR <job>-master-0, WORLD_SIZE = replicas, RANK = pod index.
    env = read_cluster_env({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "MASTER_ADDR": "grpo-master-0",
                            "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "2", "PYTHONUNBUFFERED": "0"})
    assert (env.nnodes, env.node_rank, env.master_addr, env.master_port) == (3, 2, "grpo-master-0", 23456)
    assert env.scheduler == "kubernetes" and env.sources["nnodes"] == "WORLD_SIZE"


def test_a_pytorchjob_pod_with_nproc_per_node_reads_the_pet_variables_not_world_size():
    # Newer operators: WORLD_SIZE = replicas x nprocPerNode, with PET_NNODES / PET_NODE_RANK beside it.
    env = read_cluster_env({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "MASTER_ADDR": "grpo-master-0",
                            "MASTER_PORT": "23456", "WORLD_SIZE": "24", "RANK": "2", "PET_NPROC_PER_NODE": "8",
                            "PET_NODE_RANK": "2", "PET_NNODES": "3"})
    assert (env.nnodes, env.node_rank, env.nproc_per_node) == (3, 2, 8)
    assert env.sources["nnodes"] == "PET_NNODES"


def test_a_trainjob_pod_reads_the_five_pet_variables():
    env = read_cluster_env({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto",
                            "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "grpo-node-0-0.grpo", "PET_MASTER_PORT": "29400"})
    assert (env.nnodes, env.node_rank, env.master_addr, env.master_port) == (2, 1, "grpo-node-0-0.grpo", 29400)
    assert env.nproc_per_node is None and not env.problems  # "auto": torchrun counts the GPUs itself


def test_world_size_and_rank_outside_kubernetes_count_processes_not_nodes():
    env = read_cluster_env({"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": "8", "RANK": "3"})
    assert env.nnodes is None and env.node_rank is None and env.label is None


@pytest.mark.parametrize("variables, field, message", [
    ({"SLURM_NNODES": "two"}, "nnodes", "SLURM_NNODES='two' is not a whole number 1 or more; ignored"),
    ({"SLURM_NNODES": "4", "SLURM_NODEID": "4"}, "node_rank",
     "SLURM_NODEID=4 with SLURM_NNODES=4: a node id is 0 .. 3; ignored"),
    ({"SLURM_NODEID": "-1"}, "node_rank", "SLURM_NODEID='-1' is not a whole number 0 or more; ignored"),
    ({"SLURM_JOB_NODELIST": "gpu[01-04"}, "master_addr",
     "SLURM_JOB_NODELIST='gpu[01-04' is not a Slurm node list (a '[' never closed in 'gpu[01-04'); ignored"),
    ({"MASTER_PORT": "70000"}, "master_port", "MASTER_PORT='70000' is not a whole number 1 .. 65535; ignored"),
    ({"PET_NNODES": "1:4"}, "nnodes", "PET_NNODES='1:4' is an elastic range (torchrun --nnodes MIN:MAX)"),
])
def test_a_bad_value_is_one_line_and_the_field_is_left_unset(variables, field, message):
    env = read_cluster_env({"SLURM_JOB_ID": "9", **variables})
    (problem,) = env.problems
    assert problem[0] == field and problem[1].startswith(message)
    assert getattr(env, field) is None and field not in env.sources
    assert cluster_lines(env)[-1] == problem[1]


def test_a_bad_value_falls_back_to_the_next_variable():
    env = read_cluster_env({"SLURM_JOB_ID": "9", "SLURM_NNODES": "x", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1"})
    assert env.nnodes == 2 and env.sources["nnodes"] == "SLURM_JOB_NUM_NODES" and len(env.problems) == 1


def test_nothing_set_is_an_empty_mapping_and_no_lines():
    env = read_cluster_env({"PATH": "/usr/bin", "WORLD_SIZE": "1"})
    assert env.is_empty and cluster_lines(env) == []


def test_run_json_keeps_the_mapping_per_host_and_an_older_run_json_still_round_trips():
    env = read_cluster_env({**SRUN_ENV, "SLURM_NODEID": "9"})  # with a problem, which is kept too
    info = RunInfo(command=("torchrun", "train.py"), start_t=1.0, hosts={"gnode10": WatchHost(pid=7, cluster=env)})
    back = RunInfo.from_dict(json.loads(json.dumps(info.to_dict())))
    assert back == info and back.hosts["gnode10"].cluster.problems_for("node_rank")
    newer = info.to_dict()
    newer["hosts"]["gnode10"]["cluster"]["rack"] = "r7"  # a key of a later version survives a rewrite
    assert RunInfo.from_dict(newer).to_dict() == newer
    assert WatchHost.from_dict({"pid": 1}).cluster is None and "cluster" not in WatchHost(pid=1).to_dict()
    assert ClusterEnv.from_dict(env.to_dict()) == env


def test_a_damaged_mapping_in_run_json_names_the_hosts_field():
    from grpo_doctor.schema.json_shapes import FormatError

    with pytest.raises(FormatError, match="field hosts is"):
        RunInfo.from_dict({"hosts": {"vm": {"pid": 1, "cluster": {"nnodes": "4"}}}})
