"""Cause before effect: the culprit leads, the ranks that waited for it follow as its consequences."""
import dataclasses
import json
import shutil
from pathlib import Path

from grpo_doctor.analysis.finding_facts import CrashFacts, GpuFaultFacts
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.incidents import link_incidents
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules

RUNS = Path(__file__).parent.parent / "data"
LOGS = RUNS / "logs"


def _crash(ranks, **evidence):
    """A rank-crash finding as rules/rank_crash.py writes it: its evidence, and the same values typed."""
    return Finding(id="rank-crash", severity="critical", title="crash", ranks=tuple(ranks),
                   evidence={"exc_type": None, "message": None, "signal": None, "exitcode": None, **evidence},
                   facts=CrashFacts(**evidence))


def _roles(findings):
    return [(f.id, f.ranks, f.role, f.caused_by) for f in findings]


def test_the_sigkilled_rank_that_never_joined_leads_a_raw_nccl_timeout_log():
    findings, _ = run_rules(load_evidence([LOGS / "torchrun_nccl_timeout.log"]))
    assert (findings[0].id, findings[0].ranks, findings[0].role) == ("rank-crash", (7,), "root-cause")
    assert findings[0].evidence["signal"] == "SIGKILL"
    later = {(f.id, f.ranks): f for f in findings[1:]}
    assert later[("nccl-timeout", (7,))].role == "consequence"
    assert later[("rank-crash", (0, 3))].caused_by == "rank-crash@7"  # the SIGABRTed waiters


def test_a_rank_hung_in_rollout_is_the_root_of_the_timeout_its_peer_raised():
    timeout = _crash([0], exc_type="RuntimeError", message="[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc"
                     ":81] Timed out waiting 20000ms for recv operation to complete")
    hang = Finding(id="hang", severity="critical", title="rank 1 stuck in rollout", ranks=(1,), phase="rollout", step=2)
    stopped = Finding(id="rank-crash", severity="warning", title="rank 1 ended after another failed", ranks=(1,),
                      evidence={"signal": "SIGTERM"}, facts=CrashFacts(signal="SIGTERM"))
    out = link_incidents([timeout, stopped, hang])
    assert _roles(out) == [("hang", (1,), "root-cause", None), ("rank-crash", (0,), "consequence", "hang@1"),
                           ("rank-crash", (1,), "consequence", "hang@1")]


def test_a_crash_with_its_own_exception_leads_the_peer_that_lost_its_connection():
    culprit = _crash([1], exc_type="ZeroDivisionError", message="division by zero")
    victim = _crash([0], exc_type="RuntimeError", message="[gloo] Connection closed by peer [127.0.0.1]:29500")
    out = link_incidents([victim, culprit])
    assert _roles(out) == [("rank-crash", (1,), "root-cause", None), ("rank-crash", (0,), "consequence", "rank-crash@1")]


def test_a_cuda_oom_explains_the_other_ranks_nccl_errors_and_its_own_crash_record():
    oom = Finding(id="cuda-oom", severity="critical", title="CUDA OOM on rank 3", ranks=(3,))
    own_crash = _crash([3], exc_type="OutOfMemoryError", message="CUDA out of memory")
    nccl = Finding(id="nccl-timeout", severity="critical", title="timeout", ranks=(0, 1, 2))
    out = link_incidents([nccl, own_crash, oom])
    assert out[0].key == "cuda-oom@3" and out[0].role == "root-cause"
    assert {f.key: f.caused_by for f in out[1:]} == {"nccl-timeout@0,1,2": "cuda-oom@3",
                                                     "rank-crash@3": "cuda-oom@3"}


def test_a_rendezvous_failure_explains_later_collective_timeouts():
    rdzv = Finding(id="rendezvous-failure", severity="critical", title="store timeout")
    nccl = Finding(id="nccl-timeout", severity="critical", title="timeout", ranks=(0,))
    out = link_incidents([nccl, rdzv])
    assert _roles(out) == [("rendezvous-failure", (), "root-cause", None),
                           ("nccl-timeout", (0,), "consequence", "rendezvous-failure")]


def test_a_seed_collision_explains_zero_spread_and_zero_kl_but_not_an_unrelated_crash():
    seed = Finding(id="seed-collision", severity="critical", title="same seed", ranks=(0, 1, 2, 3))
    zero_std = Finding(id="zero-std-groups", severity="warning", title="zero std")
    zero_kl = Finding(id="zero-kl", severity="warning", title="kl 0")
    crash = _crash([2], exc_type="ValueError", message="bad reward")
    out = link_incidents([zero_kl, crash, zero_std, seed])
    roles = {f.key: (f.role, f.caused_by) for f in out}
    assert roles["zero-kl"] == roles["zero-std-groups"] == ("consequence", "seed-collision@0,1,2,3")
    assert roles["rank-crash@2"] == (None, None)


def test_a_warning_root_takes_the_severity_of_its_worst_consequence():
    hang = Finding(id="hang", severity="warning", title="slow or stuck", ranks=(1,))
    timeout = Finding(id="nccl-timeout", severity="critical", title="timeout", ranks=(0,))
    out = link_incidents([timeout, hang])
    assert (out[0].id, out[0].severity, out[0].role) == ("hang", "critical", "root-cause")


def test_findings_that_explain_nothing_keep_no_role():
    straggler = Finding(id="straggler", severity="warning", title="slow rank 1", ranks=(1,))
    assert _roles(link_incidents([straggler])) == [("straggler", (1,), None, None)]


def test_of_two_crashes_of_their_own_the_one_torchrun_observed_first_is_the_root():
    later = _crash([2], exc_type="RuntimeError", message="CUDA error: an illegal memory access was encountered",
                   root_cause=False)
    first = _crash([5], exitcode=1, root_cause=True)
    stopped = _crash([0, 1], signal="SIGTERM", exitcode=-15)
    out = link_incidents([later, first, stopped])
    assert out[0].key == "rank-crash@5" and out[0].role == "root-cause"
    assert {f.key: f.caused_by for f in out if f.role == "consequence"} == {"rank-crash@0,1": "rank-crash@5"}


def test_an_oom_explains_the_death_of_a_process_that_names_no_rank():
    oom = Finding(id="cuda-oom", severity="critical", title="CUDA OOM on GPU 0")
    actor = _crash([], exc_type="Ray actor died", message="The actor is dead because it was killed by `ray.kill`.")
    out = link_incidents([actor, oom])
    assert _roles(out) == [("cuda-oom", (), "root-cause", None), ("rank-crash", (), "consequence", "cuda-oom")]


def test_an_nccl_error_leads_the_tasks_that_only_exited_with_code_1():
    nccl = Finding(id="nccl-error", severity="critical", title="NCCL error: invalid argument",
                   evidence={"detail": "invalid argument"})
    exited = _crash(list(range(2, 16)), exitcode=1)
    out = link_incidents([exited, nccl])
    assert [(f.id, f.role) for f in out] == [("nccl-error", "root-cause"), ("rank-crash", "consequence")]


def test_a_crash_with_exit_code_1_and_nothing_else_in_the_log_stays_the_root():
    exited = _crash([3], exitcode=1)
    stopped = _crash([0, 1, 2], signal="SIGTERM", exitcode=-15)
    out = link_incidents([stopped, exited])
    assert [(f.key, f.role) for f in out] == [("rank-crash@3", "root-cause"), ("rank-crash@0,1,2", "consequence")]


def test_a_machine_fault_on_a_ranks_gpu_is_the_root_of_its_hang_and_the_others_timeouts_not_of_a_bug_elsewhere():
    fault = Finding(id="gpu-fault", severity="critical", title="GPU 1 on node-a reported Xid 79", ranks=(1,),
                    hosts=("node-a",), evidence={"hardware": True, "gpu": 1, "host": "node-a", "xids": [79]},
                    facts=GpuFaultFacts(hardware=True, gpu=1, host="node-a", xids=(79,)))
    hang = Finding(id="hang", severity="critical", title="rank 1 stuck", ranks=(1,))
    timeout = Finding(id="nccl-timeout", severity="critical", title="ranks 0, 2, 3 timed out", ranks=(0, 2, 3))
    bug = _crash([5], exc_type="KeyError", message="'reward'")  # a rank's own exception: its own incident
    out = link_incidents([bug, timeout, hang, fault])
    assert _roles(out)[:3] == [("gpu-fault", (1,), "root-cause", None), ("nccl-timeout", (0, 2, 3), "consequence",
                                                                         "gpu-fault@1"),
                               ("hang", (1,), "consequence", "gpu-fault@1")]
    assert "because GPU 1 on node-a failed (Xid 79)" in out[2].title
    assert ("rank-crash", (5,), None, None) in _roles(out)
    app = dataclasses.replace(fault, severity="info", evidence={**fault.evidence, "hardware": False, "xids": [13]},
                              facts=GpuFaultFacts(hardware=False, gpu=1, host="node-a", xids=(13,)))
    assert all(f.role is None for f in link_incidents([app, hang]))  # the application's own Xid explains nothing


def test_an_nccl_error_whose_own_words_say_the_peer_went_is_the_consequence_of_a_crash(tmp_path):
    """The words that say so are in the finding's evidence as rules/nccl_error.py writes it (its
    messages), not in its title: the InfiniBand kind's title names no peer."""
    log = tmp_path / "node3.log"
    log.write_text("gpu-node-03:1234:1290 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
                   "10.0.0.4<54321> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.3 "
                   "remoteGids::ffff:10.0.0.4 hca mlx5_0\n")
    [nccl] = [f for f in run_rules(load_evidence([log]))[0] if f.id == "nccl-error"]
    assert "peer" not in nccl.title
    culprit = _crash([1], exc_type="ValueError", message="reward model returned no score for prompt 17")
    out = link_incidents([nccl, culprit])
    assert [(f.id, f.role) for f in out] == [("rank-crash", "root-cause"), ("nccl-error", "consequence")]


def test_a_sigkilled_ray_actor_leads_the_survivor_whose_task_error_the_driver_raised_first():
    """A real run (tests/data/ray_sigkilled_actor/): rank 1's actor was SIGKILLed; rank 0's task failed on gloo's
    "Connection reset by peer" and the driver raised that RayTaskError first. Its header names rank 0 by pid and
    its traceback ends in the lost peer: that is rank 0's own end, collateral, not a second crash of its own."""
    findings, _ = run_rules(load_evidence([RUNS / "ray_sigkilled_actor" / "run"]))
    crashes = [f for f in findings if f.id == "rank-crash"]
    assert [(f.ranks, f.role) for f in crashes] == [((1,), "root-cause"), ((0,), "consequence")], crashes
    survivor = crashes[1]
    assert survivor.severity == "warning" and survivor.caused_by == "rank-crash@1"
    assert "Connection reset by peer" in survivor.evidence["exception"]


def test_a_process_no_rank_names_that_lost_its_peer_is_the_consequence_of_the_crash(tmp_path):
    """The same Ray run with no rank known (RANK set inside uninstrumented actors, OpenRLHF): the survivor's
    task error, gloo's lost peer, names no rank, and still follows the actor that died."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "ray_sigkilled_actor" / "run", run)
    summary = run / "supervisor" / "vm" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "ranks": {}}))
    crashes = [f for f in run_rules(load_evidence([run]))[0] if f.id == "rank-crash"]
    assert [f.role for f in crashes] == ["root-cause", "consequence"], crashes
    root, survivor = crashes
    assert root.evidence["exit_type"] == "SYSTEM_ERROR"  # the raylet's word of the SIGKILLed worker
    assert "Connection reset by peer" in survivor.evidence["message"] and survivor.caused_by == root.key
