import json

import pytest

from grpo_doctor.runlog.decoder import record_from_dict
from grpo_doctor.schema import (
    SCHEMA_VERSION,
    BadRecord,
    End,
    EndReason,
    Error,
    Header,
    Memory,
    PhaseBegin,
    PhaseEnd,
    Rng,
    Rollout,
    Step,
    UnknownRecord,
)

COMMON = dict(rank=3, host="node-1", pid=42, step=7, t=1700000000.5, mono=12.25)
EXAMPLES = [
    Header(**COMMON, local_rank=3, world_size=16, node_rank=0, local_world_size=8, gpu_uuid="GPU-abc",
           versions={"torch": "2.5.1"}, launch={"NCCL_DEBUG": "INFO"}, argv=["train.py"]),
    PhaseBegin(**COMMON, phase="generate", path="rollout/generate"),
    PhaseEnd(**COMMON, phase="generate", path="rollout/generate", duration_s=1.5, synced=True, error="OutOfMemoryError"),
    Step(**COMMON, metrics={"loss": 0.25, "kl": None}),
    Memory(**COMMON, tag="step", host_rss_bytes=10, allocated_bytes=5, gpu_processes=[{"pid": 9, "used_bytes": 1}]),
    Error(**COMMON, exc_type="RuntimeError", message="boom", traceback="Traceback...", phase="forward", path="forward"),
    End(**COMMON, reason=EndReason.SIGNAL, signal="SIGTERM", open_path="rollout"),
    Rollout(**COMMON, num_completions=2, num_groups=1, completion_hashes=["00ff00ff00ff00ff", "00ff00ff00ff00ff"],
            prompt_hashes=["1234123412341234"] * 2, group_ids=[0, 0], duplicate_rate=0.5, distinct_1=0.4,
            distinct_2=0.6, edit_distance=0.0, length_mean=12.0, length_min=12, length_max=12, truncated_frac=0.0,
            reward_mean=1.0, reward_std=0.0, group_reward_std_mean=0.0, zero_std_frac=1.0, temperature=1.0,
            max_length=64, samples=[{"group": 0, "prompt": "2+2=", "completion": "4", "reward": 1.0}]),
    Rng(**COMMON, tag="init", torch_cpu="a1b2c3d4e5f60718", numpy=None, python="0011223344556677", sampling_seed=42),
]


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: r.KIND.value)
def test_every_record_survives_a_round_trip_through_json(record):
    data = json.loads(json.dumps(record.to_dict()))
    assert data["schema"] == SCHEMA_VERSION and data["kind"] == record.KIND.value
    assert {"rank", "host", "pid", "step", "t", "mono"} <= data.keys()
    assert record_from_dict(data) == record


def test_a_newer_writer_fields_are_ignored_and_unknown_kinds_kept():
    data = PhaseBegin(**COMMON, phase="x", path="x").to_dict() | {"future_field": 1}
    assert record_from_dict(data) == PhaseBegin(**COMMON, phase="x", path="x")
    unknown = record_from_dict({"kind": "rollout_v9", "rank": 1})
    assert isinstance(unknown, UnknownRecord) and unknown.rank == 1


@pytest.mark.parametrize("data", [[], {"no": "kind"}, {"kind": "step", "rank": 0}])
def test_malformed_records_are_rejected(data):
    with pytest.raises(BadRecord):
        record_from_dict(data)
