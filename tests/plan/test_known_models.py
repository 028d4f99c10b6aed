"""The shipped table of public model architectures (grpo_doctor/plan/known_models.py): `plan` answers offline for
the common GRPO models, a config.json found here still wins, and a number copied wrong is caught.

Checks: every table entry plans through the installed `grpo-doctor` with an empty Hugging Face home and
HF_HUB_OFFLINE=1, and says where its architecture came from; every alias plans in-process; each entry's
parameter count (computed from the table's shape by model_shape.py) is within 2 % of the size its publisher
states, and equal to the parameter where a checkpoint's exact tensor count is known; entries whose
config.json is vendored under tests/data/plan/models agree with that file key for key; a local directory,
a cached snapshot and --model-config each win over the table; an unknown hub id is still exit 2 with the
--model-config hint.

Typical use:
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/plan/test_known_models.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_doctor.cli.main import main
from grpo_doctor.plan.known_models import MODELS, TABLE, known_model, known_names, table_source
from grpo_doctor.plan.model_shape import ModelConfigError, load_model_shape, shape_from_config

GRPO_DOCTOR = str(Path(sys.executable).parent / "grpo-doctor")
VENDORED = Path(__file__).resolve().parents[1] / "data" / "plan" / "models"
TRL = ["trl", "grpo", "--dataset_name", "trl-lib/DeepMath-103K", "--per_device_train_batch_size", "2",
       "--num_generations", "8", "--max_completion_length", "1024"]

# What each publisher states (model card "Number of Parameters", or the size the Hub shows for the checkpoint),
# in billions. Independent of the table: a layer count, a width or a tied/untied flag copied wrong moves the
# computed count by more than 2 % (untying Qwen2.5-0.5B's embedding: +28 %).
PUBLISHED_B = {
    "Qwen/Qwen2.5-0.5B": 0.49, "Qwen/Qwen2.5-1.5B-Instruct": 1.54, "Qwen/Qwen2.5-3B": 3.09, "Qwen/Qwen2.5-7B": 7.61,
    "Qwen/Qwen2.5-14B": 14.7, "Qwen/Qwen2.5-32B": 32.5, "Qwen/Qwen2.5-72B-Instruct": 72.7, "Qwen/QwQ-32B": 32.5,
    "Qwen/Qwen3-0.6B": 0.6, "Qwen/Qwen3-1.7B": 1.7, "Qwen/Qwen3-4B": 4.0, "Qwen/Qwen3-8B": 8.2, "Qwen/Qwen3-14B": 14.8,
    "Qwen/Qwen3-32B": 32.8, "Qwen/Qwen3-30B-A3B": 30.5,
    "meta-llama/Llama-3.1-8B": 8.03, "meta-llama/Llama-3.1-70B-Instruct": 70.6,
    "meta-llama/Llama-3.2-1B-Instruct": 1.23, "meta-llama/Llama-3.2-3B": 3.21,
    "mistralai/Mistral-7B-Instruct-v0.3": 7.25,
    "google/gemma-2-2b": 2.61, "google/gemma-2-9b": 9.24,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": 1.78, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": 7.62,
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": 8.03,
}
# Exact tensor counts of real checkpoints: Hugging Face's safetensors totals (captured in
# daniel-p-green/alain-ai-learning-platform out/research-*/sources/huggingface/model.json: Gensyn's
# Qwen2.5-0.5B-Instruct fine-tune, DeepSeek-R1-Distill-Llama-8B) and the counts tests/data/plan/models/SOURCES.md
# records (Qwen2.5-3B-Instruct and QwQ-32B from a checkpoint report, Qwen2.5-32B-Instruct from its safetensors index).
EXACT = {
    "Qwen/Qwen2.5-0.5B": 494_032_768, "Qwen/Qwen2.5-3B": 3_085_938_688, "Qwen/Qwen2.5-32B": 32_763_876_352,
    "Qwen/QwQ-32B": 32_763_876_352, "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": 8_030_261_248,
}
# Table entries whose config.json (or an alias's) is vendored verbatim under tests/data/plan/models.
VENDORED_FOR = {
    "Qwen/Qwen2.5-0.5B": "Qwen--Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct": "Qwen--Qwen2.5-1.5B-Instruct",
    "Qwen/Qwen2.5-3B": "Qwen--Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B": "Qwen--Qwen2.5-7B",
    "Qwen/Qwen2.5-32B": "Qwen--Qwen2.5-32B", "Qwen/Qwen2.5-72B-Instruct": "Qwen--Qwen2.5-72B-Instruct",
    "Qwen/QwQ-32B": "Qwen--QwQ-32B", "Qwen/Qwen3-4B": "Qwen--Qwen3-4B", "Qwen/Qwen3-8B": "Qwen--Qwen3-8B",
    "meta-llama/Llama-3.1-8B": "meta-llama--Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama--Llama-3.1-70B-Instruct",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": "deepseek-ai--DeepSeek-R1-Distill-Qwen-1.5B",
}


def offline_env(tmp_path: Path) -> dict[str, str]:
    """No Hugging Face cache and no ModelScope cache: what a laptop that never downloaded the model has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "MODELSCOPE_"))}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(HF_HOME=str(tmp_path / "hf-empty"), HF_HUB_OFFLINE="1", HOME=str(home),
               MODELSCOPE_CACHE=str(tmp_path / "ms-empty"))
    return env


@pytest.fixture
def offline(tmp_path, monkeypatch):
    for key, value in offline_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_table_holds_at_least_20_models_each_with_a_source_and_no_name_twice():
    assert len(MODELS) >= 20
    names = [n.lower() for e in MODELS for n in (e.repo_id, *e.aliases)]
    assert len(names) == len(set(names))
    assert all(e.source.strip() for e in MODELS)
    assert set(PUBLISHED_B) == {e.repo_id for e in MODELS}


@pytest.mark.parametrize("entry", MODELS, ids=lambda e: e.repo_id)
def test_each_model_plans_offline_through_the_installed_command(entry, tmp_path):
    done = subprocess.run([GRPO_DOCTOR, "plan", "--gpus", "8", "--gpu-memory", "80GiB", "--json", "--", *TRL,
                           "--model_name_or_path", entry.repo_id],
                          capture_output=True, text=True, timeout=120, env=offline_env(tmp_path), cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr  # fits or not; 2 would be "no config.json"
    data = json.loads(done.stdout)
    assert data["model"]["config"] == f"{TABLE} ({entry.repo_id})"
    assert any(a.startswith(f"architecture from {TABLE} ({entry.repo_id})") for a in data["assumptions"])


def test_the_plan_table_says_the_architecture_is_the_shipped_one(offline, capsys):
    status = main(["plan", "--gpus", "8", "--gpu-memory", "80GiB", "--", *TRL, "--model_name_or_path",
                   "Qwen/Qwen2.5-7B-Instruct"])
    out = capsys.readouterr().out
    assert status in (0, 1)
    assert ("architecture from grpo-doctor's table of public configs (Qwen/Qwen2.5-7B-Instruct: the architecture "
            "of Qwen/Qwen2.5-7B): no config.json of yours was read") in out


@pytest.mark.parametrize("name", known_names())
def test_every_name_and_alias_plans_in_process(name, offline, capsys):
    status = main(["plan", "--gpus", "8", "--gpu-memory", "80GiB", "--json", "--", *TRL, "--model_name_or_path",
                   name])
    data = json.loads(capsys.readouterr().out)
    assert status in (0, 1) and data["model"]["name"] == name
    assert data["model"]["config"] == table_source(known_model(name), name)


def test_lookup_is_by_exact_id_ignoring_case():
    assert known_model("qwen/QWEN2.5-7b-INSTRUCT").repo_id == "Qwen/Qwen2.5-7B"
    assert known_model("Qwen/Qwen2.5-7B-Instruct-AWQ") is None  # another checkpoint: no guess
    assert known_model("Qwen2.5-7B") is None and known_model("") is None


@pytest.mark.parametrize("entry", MODELS, ids=lambda e: e.repo_id)
def test_parameter_count_matches_the_published_size(entry):
    params = shape_from_config(dict(entry.config), entry.repo_id, "table").total_params
    assert params / 1e9 == pytest.approx(PUBLISHED_B[entry.repo_id], rel=0.02)
    if entry.repo_id in EXACT:
        assert params == EXACT[entry.repo_id]


@pytest.mark.parametrize("repo_id", sorted(VENDORED_FOR))
def test_entries_agree_with_the_vendored_config_files_key_for_key(repo_id):
    entry = known_model(repo_id)
    vendored = json.loads((VENDORED / VENDORED_FOR[repo_id] / "config.json").read_text(encoding="utf-8"))
    for key, value in entry.config.items():
        assert vendored.get(key) == value, f"{repo_id}: {key} {value!r} in the table, {vendored.get(key)!r} vendored"


def test_the_moe_entry_is_counted_as_moe():
    shape = shape_from_config(dict(known_model("Qwen/Qwen3-30B-A3B").config), "Qwen/Qwen3-30B-A3B", "table")
    assert shape.experts == 128 and shape.experts_per_token == 8 and shape.expert_intermediate == 768


def _tiny_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": True}))
    return folder / "config.json"


def test_a_local_directory_named_like_the_hub_id_wins_over_the_table(offline):
    config = _tiny_config(offline / "Qwen" / "Qwen2.5-7B")
    shape = load_model_shape("Qwen/Qwen2.5-7B")
    assert Path(shape.source).resolve() == config.resolve() and shape.hidden == 256


def test_a_cached_snapshot_wins_over_the_table(offline, monkeypatch, capsys):
    snapshot = offline / "hub" / "models--Qwen--Qwen2.5-7B" / "snapshots" / "0123abc"
    config = _tiny_config(snapshot)
    monkeypatch.setenv("HF_HUB_CACHE", str(offline / "hub"))
    status = main(["plan", "--gpus", "8", "--gpu-memory", "80GiB", "--json", "--", *TRL, "--model_name_or_path",
                   "Qwen/Qwen2.5-7B"])
    data = json.loads(capsys.readouterr().out)
    assert status in (0, 1) and data["model"]["config"] == str(config)
    assert not any(TABLE in a for a in data["assumptions"])


def test_model_config_wins_over_the_table(offline, capsys):
    config = _tiny_config(offline / "mine")
    status = main(["plan", "--gpus", "8", "--gpu-memory", "80GiB", "--json", "--model-config", str(config), "--",
                   *TRL, "--model_name_or_path", "Qwen/Qwen2.5-7B"])
    data = json.loads(capsys.readouterr().out)
    assert status in (0, 1) and data["model"]["config"] == str(config) and data["model"]["params"] < 10**7


def test_an_unknown_model_is_still_exit_2_with_the_model_config_hint(offline, capsys):
    status = main(["plan", "--gpus", "8", "--gpu-memory", "80GiB", "--", *TRL, "--model_name_or_path",
                   "Org/Not-Known-7B"])
    err = capsys.readouterr().err
    assert status == 2
    assert "no config.json for model 'Org/Not-Known-7B'" in err and "--model-config" in err
    with pytest.raises(ModelConfigError) as caught:
        load_model_shape("Org/Not-Known-7B")
    assert "--model-config" in caught.value.hint
