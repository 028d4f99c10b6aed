"""The stack rounds' vote (checks/stack_rounds.py): who is outside the others in each round, who over the rounds,
and several hosts' rounds of one slot merged into one look."""
from __future__ import annotations

from grpo_doctor.checks.stack_rounds import episodes, round_view, vote
from grpo_doctor.schema.slow_rounds import RankLook, SlowRound, Survey

WAIT = RankLook("w", waiting=True, where="all_gather (torch/distributed/distributed_c10d.py:4287) <- gather (dist.py:75)")
SLEEP = RankLook("s", where="Injector.at (inject.py:179) <- Trainer.run_step (train.py:70)")
FWD = RankLook("f", where="forward (model.py:10)")
BWD = RankLook("b", where="backward (engine.py:53)")


def test_a_round_puts_the_rank_the_others_wait_for_outside_and_a_round_of_two_computing_ranks_nowhere():
    assert round_view({0: WAIT, 1: SLEEP}).outside == (1,)
    assert round_view({0: WAIT, 1: WAIT, 2: WAIT, 3: FWD}).outside == (3,)
    assert round_view({0: FWD, 1: SLEEP}).outside == ()  # no dominant group
    assert round_view({0: BWD, 1: BWD, 2: BWD, 3: FWD}).outside == (3,)  # the largest group, past half
    assert round_view({0: WAIT, 1: WAIT}).shared and round_view({0: BWD, 1: BWD}).shared
    assert round_view({0: WAIT, 1: RankLook("loop", idle=True)}) .outside == ()  # idle in an event loop: left out


def test_the_rank_outside_in_most_rounds_is_named_and_ranks_taking_turns_name_nobody():
    slow = [{0: WAIT, 1: SLEEP}] * 7 + [{0: FWD, 1: SLEEP}] * 3
    result = vote(slow, {0: "node0", 1: "node0"})
    assert (result.named, result.scope, result.outside) == ((1,), "rank", {1: 7})
    assert result.where == {1: SLEEP.where} and result.others_where == WAIT.where and result.others_rounds == 7
    turns = [{0: WAIT, 1: SLEEP}] * 6 + [{0: SLEEP, 1: WAIT}] * 3 + [{0: FWD, 1: BWD}]
    assert vote(turns).named == ()  # outside in 6, but the other rank in 3: not 3x as often
    assert vote([{0: WAIT, 1: SLEEP}] * 5 + [{0: FWD, 1: BWD}] * 5).named == ()  # 5 of 10 is no majority


def test_where_the_named_ranks_run_says_host_code_path_or_a_shared_slowdown():
    hosts = {0: "node0", 1: "node0", 2: "node1", 3: "node1"}
    whole_node = [{0: WAIT, 1: WAIT, 2: SLEEP, 3: FWD}] * 8 + [{0: BWD, 1: FWD, 2: SLEEP, 3: WAIT}] * 2
    result = vote(whole_node, hosts)
    assert (result.named, result.scope, result.hosts) == ((2, 3), "host", ("node1",))
    scattered = [{0: WAIT, 1: SLEEP, 2: WAIT, 3: SLEEP}] * 8 + [{0: FWD, 1: BWD, 2: FWD, 3: BWD}] * 2
    assert vote(scattered, hosts).scope == "scattered"
    one_of_two = [{0: WAIT, 1: WAIT, 2: SLEEP, 3: WAIT}] * 8 + [{0: FWD, 1: BWD, 2: SLEEP, 3: FWD}] * 2
    assert (vote(one_of_two, hosts).named, vote(one_of_two, hosts).scope) == ((2,), "rank")
    shared = vote([{0: BWD, 1: BWD, 2: BWD, 3: BWD}] * 7 + [{0: FWD, 1: BWD, 2: WAIT, 3: SLEEP}] * 3, hosts)
    assert (shared.named, shared.scope, shared.hosts, shared.others_where, shared.others_rounds) == (
        (), "shared", ("node0", "node1"), BWD.where, 7)


def _survey(host, why, ranks, slots, looks):
    rounds = tuple(SlowRound(t=slot * 1.0, slot=slot, ranks={r: look for r, look in zip(ranks, looks_of, strict=True)})
                   for slot, looks_of in zip(slots, looks, strict=True))
    return Survey(id=f"{host}-1", host=host, why=why, interval_s=1.0, planned=len(slots), started_t=slots[0],
                  rounds=rounds)


def test_several_hosts_rounds_of_one_slot_are_one_look_and_a_slot_one_host_missed_is_left_out():
    node0 = _survey("node0", "start", [0], range(100, 106), [(WAIT,)] * 6)
    node1 = _survey("node1", "fleet", [1], range(101, 106), [(SLEEP,)] * 5)  # joined a slot late
    later = _survey("node0", "pace", [0], range(200, 203), [(WAIT,)] * 3)
    first, second = episodes([node1, node0, later])
    assert len(first.rounds) == 5 and first.host_of == {0: "node0", 1: "node1"} and first.whys == ("fleet", "start")
    result = vote(list(first.rounds), first.host_of)
    assert (result.named, result.scope, result.hosts) == ((1,), "host", ("node1",))
    assert len(second.rounds) == 3 and second.host_of == {0: "node0"}
