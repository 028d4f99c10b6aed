"""Lining up ranks' flight-recorder dumps: real gloo dumps (tests/data/fr/), and small hand-made ones for
cases gloo cannot produce (NCCL's pg_config, scatter's one-sided shapes)."""
from pathlib import Path

from grpo_doctor.logs.flight_recorder import CollectiveEntry, FlightDump, PgStatus, read_flight_dump
from grpo_doctor.logs.fr_match import match_dumps

FR = Path(__file__).resolve().parents[1] / "data" / "fr"


def _dumps(scenario, pattern="nccl_trace_rank_*"):
    return [read_flight_dump(p) for p in sorted((FR / scenario).glob(pattern))]


def _group(match, desc):
    return next(g for g in match.groups if g.pg_desc == desc)


def test_the_rank_that_never_issued_the_all_reduce_is_missing_from_it():
    match = match_dumps(_dumps("skip"))
    world = _group(match, "default_pg")
    assert world.ranks == (0, 1, 2) and world.label == "0 (default_pg)"
    missing = world.missing
    assert (missing.seq, missing.call.op, missing.call.input_sizes) == (3, "all_reduce", ((16,),))
    assert (missing.ranks_present, missing.ranks_missing) == ((0, 1), (2,))
    assert {r: p.last_issued for r, p in world.progress.items()} == {0: 3, 1: 3, 2: 2}
    assert world.progress[2].last_call.op == "broadcast" and "make_dumps.py" in world.progress[2].last_call.frame
    assert not world.mismatches
    pair = _group(match, "pair")  # gloo leaves pg_config empty: membership comes from the entries
    assert pair.ranks == (0, 1) and pair.missing is None and not pair.mismatches


def test_different_shapes_and_dtypes_at_one_seq_name_the_odd_rank():
    world = _group(match_dumps(_dumps("shape")), "default_pg")
    assert world.missing is None
    assert [(m.seq, m.kinds, m.odd_ranks) for m in world.mismatches] == [(3, ("sizes",), (2,)), (4, ("dtypes",), (2,))]
    assert world.mismatches[0].calls[2].input_sizes == ((6, 4),) and world.mismatches[1].calls[2].input_dtypes == ("Int",)


def test_pickle_and_json_of_one_rank_count_once_and_the_pickle_with_frames_is_kept():
    match = match_dumps(_dumps("skip", "nccl_trace_rank_*"))
    world = _group(match, "default_pg")
    assert world.missing.ranks_missing == (2,) and world.progress[0].last_call.frame is not None
    json_only = _group(match_dumps(_dumps("skip", "*.json")), "default_pg")
    assert json_only.missing.ranks_missing == (2,) and json_only.progress[0].last_call.frame is None


def _entry(seq, op, sizes, dtype="Float", pg=("0", "default_pg"), out=None):
    return CollectiveEntry(record_id=seq, pg_id=0, pg_name=pg[0], pg_desc=pg[1], collective_seq_id=seq, p2p_seq_id=0,
                           profiling_name=f"nccl:{op}", input_sizes=sizes, output_sizes=sizes if out is None else out,
                           input_dtypes=(dtype,) if sizes else (), output_dtypes=(dtype,), state="completed")


def _dump(rank, entries, pg_ranks=None, path=None):
    return FlightDump(path=path or f"fr/nccl_trace_rank_{rank}", rank=rank, version="2.10", format="pickle",
                      comm_lib_version="2.21.5", pg_ranks=pg_ranks or {}, pg_status={}, entries=tuple(entries))


def test_a_different_op_at_one_seq_is_an_op_mismatch():
    dumps = [_dump(r, [_entry(1, "all_reduce", ((8,),)), _entry(2, "broadcast" if r == 3 else "all_reduce", ((8,),))])
             for r in range(4)]
    [m] = _group(match_dumps(dumps), "default_pg").mismatches
    assert (m.seq, m.kinds, m.odd_ranks) == (2, ("op",), (3,))


def test_scatter_inputs_only_on_the_root_are_no_mismatch():
    dumps = [_dump(r, [_entry(1, "scatter", ((4,),) * 2 if r == 0 else (), out=((4,),))]) for r in range(2)]
    assert not _group(match_dumps(dumps), "default_pg").mismatches


def test_pg_config_members_without_a_dump_are_listed_and_rank_counters_outlive_the_buffer():
    config = {"0": (0, 1, 2)}
    dumps = [_dump(0, [_entry(5, "all_reduce", ((8,),))], config), _dump(1, [_entry(4, "all_reduce", ((8,),))], config)]
    dumps[1] = FlightDump(**{**dumps[1].__dict__, "pg_status": {0: PgStatus(6, 5, 5)}})
    world = _group(match_dumps(dumps), "default_pg")
    assert world.ranks == (0, 1, 2) and world.ranks_without_dump == (2,)
    assert world.progress[1].last_issued == 6 and world.progress[1].last_completed == 5
    assert world.missing.ranks_missing == (0,) and world.missing.seq == 6 and world.missing.call is None


def test_a_dump_without_a_rank_in_its_name_is_a_warning():
    match = match_dumps([_dump(None, [_entry(1, "all_reduce", ((8,),))], path="fr/trace.pkl")])
    assert match.groups == () and "fr/trace.pkl" in match.warnings[0]
