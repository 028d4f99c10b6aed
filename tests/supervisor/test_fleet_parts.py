"""The fleet of watches piece by piece, in one process: beats and who decides (fleet_board.py), the two
channels (fleet_channel.py), the fleet's thread over a shared directory (fleet.py), when the whole job
is hung (fleet_verdict.py); and, with real processes, a watch of a job of several nodes that hears no
other node judging its node alone and saying so."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from helpers import clean_env, free_port, write_program

from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.watch_files import HangFleet, HangRank, HangReport
from grpo_doctor.supervisor.fleet import Fleet, FleetSettings, FleetView
from grpo_doctor.supervisor.fleet_board import Board, NodeBeat
from grpo_doctor.supervisor.fleet_channel import Channels, DirChannel, StoreChannel, decode, store_address
from grpo_doctor.supervisor.fleet_verdict import fleet_stall
from grpo_doctor.supervisor.hang import hang_lines


def beat(node: int, seq: int = 1, **fields) -> NodeBeat:
    return NodeBeat(node=node, host=f"node{node}", seq=seq, t=round(time.time(), 3), **fields)


def test_the_lowest_live_node_decides_and_a_silent_one_is_named_with_how_long():
    board = Board(me=2, nnodes=4, stale_s=10.0, start_mono=0.0)
    assert board.decider(1.0) == 2 and not board.connected(1.0)
    board.update({0: beat(0), 1: beat(1)}, now=1.0)
    assert (board.decider(2.0), board.live(2.0), board.to_read(2.0)) == (0, [0, 1, 2], [0])
    last = beat(1, seq=2)
    board.update({1: last}, now=9.0)  # node 0's beat stops changing
    assert board.decider(12.0) == 1 and board.to_read(12.0) == [0, 1]
    assert board.silent(12.0) == {0: "no report for 11 s", 3: "no report since this watch started 12 s ago"}
    board.update({1: last}, now=30.0)  # the same beat read again is no sign of life
    assert board.decider(30.0) == 2 and board.to_read(30.0) == [0, 1, 3]


def test_a_beat_is_small_and_reads_back_and_a_damaged_one_is_no_beat():
    ranks = {r: (3, "reward", 12.5, 40000 + r) for r in range(8)}
    b = beat(1, state="stalled", stall="3f2a9c1b0d4e", idle_s=12.5, ranks=ranks, look="node0-1")
    data = b.to_bytes()
    assert len(data) < 600, len(data)  # 8 ranks; about 40 bytes more per rank
    assert NodeBeat.from_message(decode(data)) == b
    assert NodeBeat.from_message({"node": 1, "seq": 2, "state": "dancing"}) is None
    assert NodeBeat.from_message({"node": "x", "seq": 2}) is None and decode(b"{not json") is None


def test_the_job_is_hung_only_when_no_live_node_progresses(tmp_path):
    beats = {1: beat(1, state="stalled", stall="b", idle_s=11.0), 2: beat(2, state="idle")}
    view = FleetView(me=0, decider=0, live=(0, 1, 2), connected=True, beats=beats)
    stall = fleet_stall(view, ("stalled", "a", 12.0))
    assert stall.key == ((0, "a"), (1, "b")) and stall.idle_s == 11.0
    assert fleet_stall(view, ("progress", None, 0.0)) is None
    busy = FleetView(me=0, decider=0, live=(0, 1), connected=True, beats={1: beat(1, state="progress")})
    assert fleet_stall(busy, ("stalled", "a", 12.0)) is None


def test_the_directory_channel_finds_the_other_nodes_and_ignores_an_earlier_jobs_leftovers(tmp_path):
    paths, start = RunPaths(tmp_path), time.time()
    node0, node1 = DirChannel(paths, "node0", start), DirChannel(paths, "node1", start)
    node0.publish("beat", 0, beat(0, seq=5).to_bytes())
    old = paths.watch_files("old-host").fleet_file("beat")
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"node": 0, "seq": 99, "t": start - 3600, "state": "idle"}))  # a week-old job
    assert node1.read("beat", [0])[0]["seq"] == 5
    # Writers never share a temporary name: many writes at once from two threads leave one whole message.
    threads = [threading.Thread(target=lambda i=i: [node0.publish("stacks", 0, json.dumps(
        {"node": 0, "seq": i * 100 + k, "pad": "x" * 20000}).encode()) for k in range(20)]) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert node1.read("stacks", [0])[0]["node"] == 0
    assert not list(paths.supervisor_host("node0").glob(".*tmp"))


def test_several_channels_give_the_newest_copy_of_each_nodes_message(tmp_path):
    class Fixed(DirChannel):
        def __init__(self, message):
            self.message, self.name = message, "fixed"

        def read(self, kind, nodes):
            return {0: self.message}

    channels = Channels([Fixed({"node": 0, "seq": 3}), Fixed({"node": 0, "seq": 7})])
    assert channels.read("beat", [0])[0]["seq"] == 7


def test_the_store_address_comes_from_the_environment_or_the_launch_command():
    torchrun = ["torchrun", "--nnodes", "2", "--master-addr", "node0", "--master_port=29600", "train.py"]
    assert store_address("10.0.0.1", 29500, [], None) == ("10.0.0.1", 29511)
    assert store_address(None, None, torchrun, None) == ("node0", 29611)
    assert store_address(None, None, ["torchrun", "--rdzv-endpoint", "head:29400", "t.py"], None) == ("head", 29411)
    assert store_address("10.0.0.1", 29500, [], 31000) == ("10.0.0.1", 31000)
    assert store_address(None, None, ["python", "train.py"], None) is None


def test_two_fleets_on_one_shared_directory_hear_each_other_and_the_next_node_takes_over(tmp_path):
    paths = RunPaths(tmp_path)
    settings = dict(nnodes=2, channel="dir", poll_s=0.05, beat_s=0.1, stale_s=1.0)
    fleets = [Fleet(FleetSettings(node=n, host=f"node{n}", **settings), paths, note=print) for n in (0, 1)]
    for fleet in fleets:
        fleet.start()
    try:
        wait_for(lambda: fleets[1].view().connected and fleets[1].view().decider == 0)
        fleets[0].ask("node0-1")
        wait_for(lambda: fleets[1].view().look == "node0-1")
        own = HangReport(host="node1", ranks={1: HangRank(pid=5, step=3)})
        fleets[1].answer("node0-1", own)
        wait_for(lambda: 1 in fleets[0].view().stacks)
        assert fleets[0].view().stacks[1] == ("node0-1", own)
        verdict = HangReport(host="node1", culprits=(1,), fleet=HangFleet(id="node0-1", decider="node0"))
        fleets[0].decide("node0-1", verdict)
        wait_for(lambda: fleets[1].view().verdict is not None)
        assert fleets[1].view().verdict == ("node0-1", verdict)
        assert fleets[0].shares_directory() and 0 < fleets[1].beat_bytes < 400
        fleets[0].close()  # node 0's watch gone: node 1 decides, and names node 0 as silent
        wait_for(lambda: fleets[1].view().deciding)
        assert fleets[1].view().silent[0].startswith("no report for ")
    finally:
        for fleet in fleets:
            fleet.close()


def test_a_verdict_names_the_culprits_host_and_the_nodes_it_did_not_hear():
    report = HangReport(host="node1", culprits=(3,), ranks={
        0: HangRank(step=3, open_phase="reward", host="node0"), 3: HangRank(step=3, open_phase="reward", host="node1")},
        fleet=HangFleet(id="node0-1", decider="node0", nodes={0: "node0", 1: "node1"}, nnodes=4,
                        missing={2: "no report for 40 s", 3: "no stacks within 11 s"}))
    lines = hang_lines(report)
    assert lines[0] == "hang on 2 of 4 nodes (verdict node0-1 of node0's watch): no progress from rank(s) 0,3"
    assert "  the others wait for: rank 3 on node1 in reward at step 3" in lines
    assert lines[-2:] == ["  node 2: no report for 40 s", "  node 3: no stacks within 11 s"]


@pytest.mark.slow
def test_the_store_channel_carries_messages_between_the_host_and_a_client():
    pytest.importorskip("torch")
    port = free_port()
    host = StoreChannel("127.0.0.1", port, host_it=True, timeout_s=5.0)
    host.open()
    client = StoreChannel("127.0.0.1", port, host_it=False, timeout_s=5.0)
    try:
        assert client.read("beat", [0]) == {}  # not published yet: no wait for it
        host.publish("beat", 0, beat(0, seq=4).to_bytes())
        assert client.read("beat", [0, 1])[0]["seq"] == 4
    finally:
        client.close()
        host.close()


def test_a_watch_of_a_job_of_several_nodes_that_hears_no_other_node_judges_its_node_alone(tmp_path):
    job = write_program(tmp_path, """
        import time, grpo_doctor as gd
        gd.init()
        with gd.phase("reward"):
            time.sleep(600)
    """, name="stuck.py")
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(tmp_path / "run"), "--no-report",
           "--hang-timeout", "2", "--second-look", "0", "--on-hang", "kill", "--", sys.executable, str(job)]
    out = subprocess.run(cmd, env=clean_env(NNODES="2", NODE_RANK="1"), capture_output=True, text=True, timeout=120)
    assert out.returncode == 124, out.stderr[-3000:]
    (alone,) = [ln for ln in out.stderr.splitlines() if "judged on this node alone" in ln]
    assert "fleet: no other node's watch heard from" in alone and "node 0: no report since this watch started" in alone
    assert "hang on " in out.stderr and out.stderr.count("ending the job (--on-hang kill)") == 1


def wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
