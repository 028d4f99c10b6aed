"""The weight-sync check's fingerprints and pairing, on CPU tensors (rank/weight_sync.py).

The recorder is a stand-in (`recorded`): these tests judge the comparison, not the sink, which the
reference trainer's real runs (tests/trainer/test_trainer_weight_sync.py) write and read back.
"""
from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

import grpo_doctor as gd
from grpo_doctor.rank import api, weight_sync
from grpo_doctor.rank.weight_sync import WeightTarget, sample_indices, vllm_name_map
from grpo_doctor.runlog.decoder import record_from_dict
from grpo_doctor.schema import WeightSync
from grpo_doctor.schema.field_checks import wrong_field


@pytest.fixture
def recorded(monkeypatch):
    """The records a check enqueues, with a recorder standing in at step 7."""
    records: list = []
    recorder = SimpleNamespace(ident=SimpleNamespace(rank=0, host="node-0", pid=1), current_step=7,
                               sink=SimpleNamespace(enqueue=records.append))
    monkeypatch.setattr(api, "current_recorder", lambda: recorder)
    monkeypatch.setattr(weight_sync, "_said_mismatch", False)
    return records


def tiny_policy(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Embedding(40, 16), torch.nn.Linear(16, 32), torch.nn.Linear(32, 40))


def train_one_step(model: torch.nn.Module) -> None:
    """One AdamW step at lr 1e-5, as a GRPO step moves every weight by about the learning rate."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model(torch.arange(8)).square().mean().backward()
    optimizer.step()


def test_a_faithful_copy_matches_and_a_copy_one_step_behind_names_every_tensor_that_moved(recorded):
    policy = tiny_policy()
    engine = copy.deepcopy(policy)
    ok = gd.check_weight_sync(policy.named_parameters(), engine.named_parameters(), engine="copy")
    assert (ok.checked, ok.num_tensors, ok.num_mismatched, ok.step) == (True, 5, 0, 7)
    assert ok.num_elements == sum(p.numel() for p in policy.parameters())
    assert (ok.num_trainer_only, ok.num_engine_only, ok.num_unchecked) == (0, 0, 0)
    train_one_step(policy)
    stale = gd.check_weight_sync(policy.named_parameters(), engine.named_parameters(), step=3)
    assert stale.step == 3 and stale.num_mismatched == 5
    assert [m["name"] for m in stale.mismatched] == [n for n, _ in policy.named_parameters()]
    first = stale.mismatched[0]
    assert first["engine_name"] == "0.weight" and first["trainer_sum"] != first["engine_sum"]
    assert recorded == [ok, stale]


def test_one_element_moved_by_a_learning_rate_step_is_found_in_a_million(recorded):
    trainer = torch.randn(1_000_000) * 0.02
    engine = trainer.clone()
    engine[123_457] += 1e-5
    [m] = gd.check_weight_sync([("w", trainer)], [("w", engine)]).mismatched
    assert m["samples_differing"] == 0  # not a sampled element: the sum found it
    assert gd.check_weight_sync([("w", trainer)], [("w", trainer.clone())]).num_mismatched == 0


def test_a_bf16_engine_matches_the_cast_of_fp32_master_weights_but_not_an_older_cast(recorded):
    policy = tiny_policy()
    engine = copy.deepcopy(policy).to(torch.bfloat16)
    assert gd.check_weight_sync(policy.named_parameters(), engine.named_parameters()).num_mismatched == 0
    for _ in range(5):  # bf16 keeps 8 bits: a few steps of 1e-5 are needed to move its values
        train_one_step(policy)
    assert gd.check_weight_sync(policy.named_parameters(), engine.named_parameters()).num_mismatched > 0


def llama_shapes(layers: int = 2, hidden: int = 16, kv: int = 8, inter: int = 24) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (50, hidden), "lm_head.weight": (50, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (hidden, hidden), p + "self_attn.k_proj.weight": (kv, hidden),
                       p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.q_proj.bias": (hidden,),
                       p + "self_attn.k_proj.bias": (kv,), p + "self_attn.v_proj.bias": (kv,),
                       p + "self_attn.o_proj.weight": (hidden, hidden), p + "mlp.gate_proj.weight": (inter, hidden),
                       p + "mlp.up_proj.weight": (inter, hidden), p + "mlp.down_proj.weight": (hidden, inter)})
    return shapes


def vllm_layout(trainer: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What vLLM's Llama/Qwen2 loader builds: q/k/v rows stacked into qkv_proj, gate/up into gate_up_proj."""
    engine = {}
    for name, tensor in trainer.items():
        for fused, parts in (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj"))):
            if f".{parts[0]}." in name:
                engine[name.replace(parts[0], fused)] = torch.cat([trainer[name.replace(parts[0], p)] for p in parts])
        if not any(f".{p}." in name for p in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")):
            engine[name] = tensor.clone()
    return engine


def test_vllm_fusions_pair_q_k_v_and_gate_up_with_their_rows_and_name_the_shard_that_differs(recorded):
    shapes = llama_shapes()
    trainer = {n: torch.randn(s) for n, s in shapes.items()}
    engine = vllm_layout(trainer)
    names = vllm_name_map(shapes)
    assert names["model.layers.1.self_attn.k_proj.weight"] == WeightTarget("model.layers.1.self_attn.qkv_proj.weight",
                                                                            rows=(16, 8))
    assert names["model.layers.1.self_attn.v_proj.bias"] == WeightTarget("model.layers.1.self_attn.qkv_proj.bias",
                                                                          rows=(24, 8))
    assert names["model.layers.0.mlp.up_proj.weight"] == WeightTarget("model.layers.0.mlp.gate_up_proj.weight",
                                                                       rows=(24, 24))
    ok = gd.check_weight_sync(trainer.items(), engine.items(), name_map=names)
    assert (ok.num_tensors, ok.num_mismatched, ok.num_trainer_only, ok.num_engine_only) == (len(shapes), 0, 0, 0)
    engine["model.layers.1.self_attn.qkv_proj.weight"][30] += 0.5  # a row of v_proj the loader got wrong
    [m] = gd.check_weight_sync(trainer.items(), engine.items(), name_map=names).mismatched
    assert (m["name"], m["engine_name"]) == ("model.layers.1.self_attn.v_proj.weight",
                                             "model.layers.1.self_attn.qkv_proj.weight[24:32]")


def test_moe_experts_pair_with_vllm_fused_w13_and_w2(recorded):
    experts, hidden, inter = 3, 8, 6
    trainer = {}
    for e in range(experts):
        for kind, shape in (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)), ("down_proj", (hidden, inter))):
            trainer[f"model.layers.0.mlp.experts.{e}.{kind}.weight"] = torch.randn(shape)
    p = "model.layers.0.mlp.experts"
    engine = {f"{p}.w13_weight": torch.stack([torch.cat([trainer[f"{p}.{e}.gate_proj.weight"],
                                                         trainer[f"{p}.{e}.up_proj.weight"]]) for e in range(experts)]),
              f"{p}.w2_weight": torch.stack([trainer[f"{p}.{e}.down_proj.weight"] for e in range(experts)])}
    names = vllm_name_map({n: t.shape for n, t in trainer.items()})
    assert names[f"{p}.2.up_proj.weight"] == WeightTarget(f"{p}.w13_weight", index=(2,), rows=(6, 6))
    assert gd.check_weight_sync(trainer.items(), engine.items(), name_map=names).num_mismatched == 0
    engine[f"{p}.w2_weight"][1].zero_()  # expert 1's down projection never loaded
    [m] = gd.check_weight_sync(trainer.items(), engine.items(), name_map=names).mismatched
    assert (m["name"], m["engine_name"]) == (f"{p}.1.down_proj.weight", f"{p}.w2_weight[1]")


def test_vocabulary_rows_padded_by_the_engine_are_left_out_of_the_comparison(recorded):
    trainer = torch.randn(50, 16)
    engine = torch.cat([trainer, torch.zeros(14, 16)])  # padded to a multiple of 64
    assert gd.check_weight_sync([("embed", trainer)], [("embed", engine)]).num_mismatched == 0


def test_tensors_without_a_counterpart_are_listed_not_skipped(recorded):
    trainer = {"a": torch.randn(4, 4), "b": torch.randn(4), "c": torch.randn(3, 5), "d": torch.randn(8), "e": torch.ones(2)}
    engine = {"a": trainer["a"].clone(), "c": torch.randn(5, 3), "d": torch.ones(8, dtype=torch.int8),
              "f": torch.randn(2), "e": trainer["e"].clone()}
    record = gd.check_weight_sync(trainer.items(), engine.items(), name_map={"e": None})
    assert (record.num_tensors, record.num_mismatched) == (1, 0)
    assert record.trainer_only == ["b", "e"] and record.engine_only == ["f", "e"]
    assert [u["name"] for u in record.unchecked] == ["c", "d"]
    assert "shape [3, 5]" in record.unchecked[0]["why"] and "quantized" in record.unchecked[1]["why"]
    assert (record.num_trainer_only, record.num_engine_only, record.num_unchecked) == (2, 2, 2)


def test_a_callable_name_map_and_prefixes(recorded):
    trainer = {"model.w": torch.randn(6)}
    engine = {"language_model.model.w": trainer["model.w"].clone()}
    record = gd.check_weight_sync(trainer.items(), engine.items(), name_map=lambda n: "language_model." + n)
    assert (record.num_tensors, record.num_mismatched, record.num_engine_only) == (1, 0, 0)


def test_nan_weights_match_nan_weights_and_nothing_else(recorded):
    nan = torch.full((10,), math.nan)
    assert gd.check_weight_sync([("w", nan)], [("w", nan.clone())]).num_mismatched == 0
    [m] = gd.check_weight_sync([("w", nan)], [("w", torch.zeros(10))]).mismatched
    assert m["samples_differing"] == weight_sync.NUM_SAMPLES


def test_sampled_indices_are_fixed_by_the_element_count_and_lie_inside_it():
    for n in (1, 2, 7, 4096, 10**9 + 7):
        indices = sample_indices(n)
        assert indices == sample_indices(n) and len(indices) == weight_sync.NUM_SAMPLES
        assert all(0 <= i < n for i in indices)
    assert sample_indices(10**6) != sample_indices(10**6 + 1)
    assert len(set(sample_indices(10**6))) == weight_sync.NUM_SAMPLES


def test_chunks_divide_the_tensor_so_no_tail_is_summed_apart():
    assert weight_sync._chunk(4096 * 3) == 4096 and weight_sync._chunk(50 * 16) == 32 and weight_sync._chunk(7) == 1


def test_sums_of_two_device_types_compare_within_a_tolerance_and_otherwise_exactly():
    near, far = (1.0, 100.0, []), (1.0 + 1e-4, 100.0, [])
    assert weight_sync._same_sum((1.0, 100.0, []), near, cross_device=True)
    assert weight_sync._same_sum(near, (1.0 + 5e-4, 100.0, []), cross_device=True)
    assert not weight_sync._same_sum(near, (1.01, 100.0, []), cross_device=True)
    assert not weight_sync._same_sum(near, far, cross_device=False)


def test_tap_hands_every_pair_through_and_a_broken_engine_side_records_nothing(recorded, caplog):
    trainer = [("w", torch.randn(4)), ("b", torch.randn(2))]

    def broken():
        raise RuntimeError("the engine core runs in another process")

    check = gd.WeightSyncCheck(broken, engine="vllm")
    assert list(check.tap(iter(trainer))) == trainer
    assert check.compare() is None and recorded == []
    assert any("recorded nothing" in r.getMessage() and "another process" in r.getMessage() for r in caplog.records)


def test_with_recording_off_nothing_is_computed_and_the_push_goes_on(monkeypatch):
    monkeypatch.setattr(api, "current_recorder", lambda: None)
    check = gd.WeightSyncCheck(lambda: pytest.fail("the engine is never read"))
    pairs = [("w", torch.randn(3))]
    assert list(check.tap(pairs)) == pairs and check.compare() is None
    assert gd.check_weight_sync(pairs, pairs) is None


def test_the_engine_is_read_once_at_the_first_trainer_tensor_after_the_push_began(recorded):
    reads = []
    engine = {"w": torch.zeros(3)}

    def engine_weights():
        reads.append(1)
        return engine.items()

    check = gd.WeightSyncCheck(engine_weights)
    assert reads == []
    for name, tensor in check.tap([("w", torch.ones(3))]):
        engine[name].copy_(tensor)  # the push itself
    assert reads == [1] and check.compare().num_mismatched == 0


def test_not_checked_says_why_in_a_record(recorded):
    record = gd.weight_sync_not_checked("trl-vllm-server", "weights in another process")
    assert (record.checked, record.engine, record.reason, record.num_tensors) == (
        False, "trl-vllm-server", "weights in another process", 0)


def test_the_record_reads_back_equal_and_passes_the_field_checks(recorded):
    policy = tiny_policy()
    engine = copy.deepcopy(policy)
    train_one_step(policy)
    record = gd.check_weight_sync(policy.named_parameters(), engine.named_parameters(), engine="hf-copy")
    again = record_from_dict(record.to_dict())
    assert again == record and isinstance(again, WeightSync) and wrong_field(again) is None
    # A line with only the fields every writer of this kind writes still reads.
    minimal = {k: v for k, v in record.to_dict().items() if k in (
        "schema", "kind", "rank", "host", "pid", "step", "t", "mono", "engine", "checked")}
    assert record_from_dict(minimal).num_mismatched == 0
