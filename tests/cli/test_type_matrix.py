"""Every field of every record kind, given every JSON type, through `report` and `summary`: never a traceback.

A rank file is input like any other: a collector, an old writer or a hand edit can put any JSON
value in any field. For each JSON type there is one run directory in which every rank carries a
full set of records (one of each kind) with exactly one field of one record replaced by a value
of that type; `report` and `summary` must end with a verdict (exit 0, 1 or 3), print no traceback,
and no rule may fail on it (a rule that raises is caught and named in a warning, which would hide
its findings). A Hypothesis test then fuzzes rank lines and watch's files within a bounded budget.
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_doctor.cli.main import main
from grpo_doctor.schema import (
    RECORD_TYPES,
    End,
    Error,
    Header,
    Memory,
    PhaseBegin,
    PhaseEnd,
    Rng,
    Rollout,
    RunPaths,
    Step,
    WeightSync,
    field_order,
)

JSON_VALUES = {"null": None, "bool": True, "int": 7, "float": 2.5, "string": "x", "list": [1, "a"],
               "object": {"a": 1}}


def _common(rank: int, step: int | None, t: float) -> dict:
    return dict(rank=rank, host=f"node-{rank % 4}", pid=1000 + rank, step=step, t=t, mono=t - 50.0)


def _records(rank: int, world_size: int) -> list:
    """One record of every kind, as a rank that ran a step and crashed in the next writes them."""
    c = _common
    return [
        Header(**c(rank, None, 100.0), local_rank=rank % 4, world_size=world_size, node_rank=rank // 4,
               local_world_size=4, gpu_uuid=None, versions={"torch": "2.5.1"}, launch={"NCCL_DEBUG": "INFO"},
               argv=["train.py"]),
        Rng(**c(rank, None, 100.5), tag="init", torch_cpu="a1b2c3d4e5f60718", sampling_seed=42 + rank),
        PhaseBegin(**c(rank, 0, 101.0), phase="rollout", path="rollout"),
        Rollout(**c(rank, 0, 101.5), num_completions=2, num_groups=1,
                completion_hashes=[f"{rank:016x}", f"{rank + 1:016x}"], prompt_hashes=["1234123412341234"] * 2,
                group_ids=[0, 0], duplicate_rate=0.0, distinct_1=0.4, distinct_2=0.6, edit_distance=0.5,
                length_mean=12.0, length_min=12, length_max=12, truncated_frac=0.0, reward_mean=1.0, reward_std=0.5,
                group_reward_std_mean=0.5, zero_std_frac=0.0, temperature=1.0, max_length=64,
                samples=[{"group": 0, "prompt": "2+2=", "completion": "4", "reward": 1.0}]),
        WeightSync(**c(rank, 0, 100.8), engine="hf-copy", checked=True, num_tensors=2, num_elements=10,
                   num_mismatched=1, mismatched=[{"name": "w", "engine_name": "w[0:4]", "trainer_sum": 1.5,
                                                  "engine_sum": "NaN", "samples_differing": 1}],
                   num_trainer_only=1, trainer_only=["b"], num_engine_only=1, engine_only=["e"], num_unchecked=1,
                   unchecked=[{"name": "u", "why": "shape"}], num_samples=4, duration_s=0.01),
        PhaseEnd(**c(rank, 0, 102.0), phase="rollout", path="rollout", duration_s=1.0, synced=False),
        Memory(**c(rank, 0, 102.1), tag="step", host_rss_bytes=10 * 2**30, allocated_bytes=5 * 2**30,
               gpu_processes=[{"pid": 1000 + rank, "used_bytes": 6 * 2**30}]),
        Step(**c(rank, 0, 102.2), metrics={"loss": 0.25, "kl": 0.1, "reward": 0.5}),
        PhaseBegin(**c(rank, 1, 103.0), phase="train", path="train"),
        Error(**c(rank, 1, 103.5), exc_type="RuntimeError", message="CUDA error: an illegal memory access",
              traceback="Traceback (most recent call last):\n...", phase="train", path="train"),
        End(**c(rank, 1, 104.0), reason="exception", open_path="train"),
    ]


VARIANTS = [(kind, name) for kind, cls in RECORD_TYPES.items() for name in ("schema", "kind", *field_order(cls))]


def _write_matrix_run(run_dir: Path, value) -> dict[int, str]:
    """Rank i carries VARIANTS[i] set to `value`; returns rank -> "kind.field" for messages."""
    ranks_dir = RunPaths(run_dir).ranks
    ranks_dir.mkdir(parents=True)
    for rank, (kind, name) in enumerate(VARIANTS):
        lines = []
        for record in _records(rank, len(VARIANTS)):
            data = record.to_dict()
            if record.KIND.value == kind:
                data[name] = value
            lines.append(json.dumps(data))
        RunPaths(run_dir).rank_file(rank).write_text("\n".join(lines) + "\n")
    return {rank: f"{kind}.{name}" for rank, (kind, name) in enumerate(VARIANTS)}


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue(), err.getvalue()


def _assert_verdict(run_dir: Path, out_dir: Path, what: str) -> None:
    status, stdout, stderr = _run("report", str(run_dir), "--out", str(out_dir), "--json")
    assert status in (0, 1, 3) and "Traceback" not in stderr, f"report on {what}: {stderr[-3000:]}"
    failed = [w for w in json.loads(stdout)["warnings"] if w.startswith("rule ") and " failed (" in w]
    assert not failed, f"report on {what}: {failed}"
    status, stdout, stderr = _run("summary", str(run_dir), "--json")
    assert status in (0, 1, 3) and "Traceback" not in stderr, f"summary on {what}: {stderr[-3000:]}"
    json.loads(stdout)


@pytest.mark.parametrize("type_name", list(JSON_VALUES))
def test_every_field_of_every_record_kind_given_a_json_type_gives_a_verdict(tmp_path, type_name):
    run_dir = tmp_path / "run"
    variants = _write_matrix_run(run_dir, JSON_VALUES[type_name])
    _assert_verdict(run_dir, tmp_path, f"every field as {type_name} (rank -> field: {variants})")


def test_the_matrix_covers_every_field_of_every_kind():
    assert len(VARIANTS) == sum(len(field_order(cls)) + 2 for cls in RECORD_TYPES.values())
    assert {kind for kind, _ in VARIANTS} == set(RECORD_TYPES)


# -- fuzzing, within a bounded budget ------------------------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                           max_size=3), max_leaves=12)
_rank_line = st.one_of(
    # a real record with some of its fields replaced by any JSON value
    st.tuples(st.sampled_from(range(len(_records(0, 2)))), st.dictionaries(st.sampled_from(sorted({n for _, n in VARIANTS})), _json,
                                                          max_size=3)).map(lambda t: json.dumps(
                                                              {**_records(0, 2)[t[0]].to_dict(), **t[1]})),
    _json.map(json.dumps),
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
)
_watch_file = st.sampled_from(["summary.json", "hang-1.json", "signatures.jsonl", "samples.jsonl", "stdout.log"])
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.slow  # 40 reports, each rendering its page: a few minutes on a busy 2-core machine
@FUZZ
@given(lines=st.lists(_rank_line, min_size=1, max_size=6),
       watch=st.lists(st.tuples(_watch_file, _json.map(json.dumps)), max_size=2))
def test_fuzzed_rank_lines_and_watch_files_give_a_verdict(tmp_path_factory, lines, watch):
    tmp = tmp_path_factory.mktemp("fuzz")
    run_dir = tmp / "run"
    RunPaths(run_dir).ranks.mkdir(parents=True)
    good = [json.dumps(r.to_dict()) for r in _records(1, 2)]
    RunPaths(run_dir).rank_file(0).write_text("\n".join([good[0], *lines]).replace(
        '"rank": 1', '"rank": 0') + "\n")
    RunPaths(run_dir).rank_file(1).write_text("\n".join(good) + "\n")
    host_dir = RunPaths(run_dir).supervisor_host("node-0")
    host_dir.mkdir(parents=True)
    for name, content in watch:
        (host_dir / name).write_text(content + "\n")
    _assert_verdict(run_dir, tmp, f"rank lines {lines!r}, watch files {watch!r}")
