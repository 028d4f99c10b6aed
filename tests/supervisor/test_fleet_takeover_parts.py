"""fleet_takeover.py: the heir the store's host names, and when the others move to it."""
from __future__ import annotations

from grpo_doctor.supervisor.fleet_board import Board, NodeBeat
from grpo_doctor.supervisor.fleet_takeover import address_toward, move_to_heir, pick_heir


def test_a_beat_carries_its_address_and_the_hosts_heir_and_reads_them_back():
    beat = NodeBeat(node=0, host="node0", seq=3, t=1.0, addr="10.0.0.1", heir=(1, "10.0.0.2"))
    back = NodeBeat.from_message(beat.to_message())
    assert (back.addr, back.heir) == ("10.0.0.1", (1, "10.0.0.2"))
    assert NodeBeat.from_message({**beat.to_message(), "heir": ["1", 2]}).heir is None  # damaged: no heir


def test_the_host_names_the_lowest_live_other_node_whose_address_it_knows():
    board = Board(me=0, nnodes=4, stale_s=10.0, start_mono=0.0)
    board.update({n: NodeBeat(node=n, host=f"node{n}", seq=1) for n in (1, 2, 3)}, now=1.0)
    assert pick_heir(board, 2.0, 0, {1: "10.0.0.2", 2: "10.0.0.3"}) == (1, "10.0.0.2")
    assert pick_heir(board, 2.0, 0, {2: "10.0.0.3"}) == (2, "10.0.0.3")  # node 1's address unknown
    board.update({2: NodeBeat(node=2, host="node2", seq=2), 3: NodeBeat(node=3, host="node3", seq=2)}, now=9.0)
    assert pick_heir(board, 12.0, 0, {1: "10.0.0.2", 2: "10.0.0.3"}) == (2, "10.0.0.3")  # node 1 went silent


def test_the_others_move_to_the_heir_only_once_the_host_is_silent():
    board = Board(me=2, nnodes=3, stale_s=10.0, start_mono=0.0)
    board.update({0: NodeBeat(node=0, host="node0", seq=5, heir=(1, "10.0.0.2"))}, now=1.0)
    assert move_to_heir(0, board, 5.0, me=2) is None  # the host is live
    assert move_to_heir(0, board, 11.5, me=2) == (1, "10.0.0.2")
    assert move_to_heir(2, board, 11.5, me=2) is None  # this watch hosts it
    board.update({1: NodeBeat(node=1, host="node1", seq=1)}, now=2.0)
    assert move_to_heir(1, board, 12.5, me=2) is None  # a silent host that named no heir: nowhere to go


def test_this_machines_address_toward_a_store_is_found_without_sending():
    assert address_toward("127.0.0.1", 29511) == "127.0.0.1"
    assert address_toward("not an address", 29511) is None


def _store_fleets(tmp_path, nnodes=3, stale_s=3.0):
    import time

    from helpers import free_port

    from grpo_doctor.schema import RunPaths
    from grpo_doctor.supervisor.fleet import Fleet, FleetSettings

    port = free_port()
    notes: dict[int, list[str]] = {n: [] for n in range(nnodes)}
    fleets = [Fleet(FleetSettings(node=n, nnodes=nnodes, host=f"node{n}", channel="store", store=("127.0.0.1", port),
                                  stale_s=stale_s), RunPaths(tmp_path / f"run{n}"), note=notes[n].append)
              for n in range(nnodes)]
    for fleet in fleets:
        fleet.start()
        fleet.set_beat(state="progress")
    deadline = time.monotonic() + 30

    def ready():  # node 0 hears every node and named its heir; each other watch hears node 0 through the store
        return (len(fleets[0].view().live) == nnodes and fleets[0]._beat.heir is not None
                and all(f._store.up and 0 in f.view().live for f in fleets))
    while time.monotonic() < deadline and not ready():
        time.sleep(0.1)
    assert ready(), notes
    return fleets, notes


def _lost_or_moved(lines):
    return [line for line in lines if "lost the TCPStore" in line or "hosted the TCPStore" in line]


def test_at_a_normal_end_the_stores_host_keeps_it_until_the_others_heard_its_done_and_nobody_takes_over(tmp_path):
    """The reviewer's race: node 0's watch published "done", closed its store a moment later and exited; the
    others, reading every 0.25 s, missed that beat, said node 0 was "gone or cut off", and its heir hosted a new
    store once node 0 had been silent for stale_s."""
    import time

    import pytest
    pytest.importorskip("torch")
    fleets, notes = _store_fleets(tmp_path)
    try:
        started = time.monotonic()
        fleets[0].finish()  # what watch's _end_fleet does on node 0, then its process exits with the store
        waited = time.monotonic() - started
        fleets[0].close()
        assert waited < 5, waited  # the others heard it within a few polls: bounded, and short
        assert all(f.host_done() for f in fleets[1:])
        time.sleep(fleets[1].settings.stale_s + 2.0)  # past the moment the heir would take over
        for node in (1, 2):
            assert _lost_or_moved(notes[node]) == [], notes[node]
            assert fleets[node].store_host == 0
    finally:
        for fleet in fleets[1:]:
            fleet.close()


def test_a_watch_whose_own_job_ended_says_nothing_of_a_lost_store_and_never_takes_it_over(tmp_path):
    import time

    import pytest
    pytest.importorskip("torch")
    fleets, notes = _store_fleets(tmp_path)
    try:
        fleets[1].job_ended()  # top of watch.run()'s finally: node 1's job exited; node 0's ends without a "done"
        fleets[2].job_ended()
        fleets[0].close()
        time.sleep(fleets[1].settings.stale_s + 2.0)
        for node in (1, 2):
            assert _lost_or_moved(notes[node]) == [], notes[node]
            assert fleets[node].store_host == 0
    finally:
        for fleet in fleets[1:]:
            fleet.close()


def test_the_stores_host_waits_at_most_its_bound_for_a_node_that_never_says_it_heard(tmp_path):
    import time

    import pytest
    pytest.importorskip("torch")
    from dataclasses import replace
    fleets, notes = _store_fleets(tmp_path, nnodes=2)
    try:
        fleets[0].settings = replace(fleets[0].settings, end_wait_s=1.0)
        fleets[1].host_done = lambda: False  # an older watch: it never says it heard the host's "done"
        started = time.monotonic()
        fleets[0].finish()
        assert 0.9 <= time.monotonic() - started < 4
    finally:
        for fleet in fleets:
            fleet.close()
