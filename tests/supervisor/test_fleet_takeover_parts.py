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
