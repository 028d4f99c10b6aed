"""Every flag a remedy names exists in the framework it is attributed to (grpo_doctor/analysis/remedies.py),
with the defaults the hints quote: TRL's GRPOConfig in .venv, ms-swift's argument classes in .venv-swift
(through its own interpreter: ms-swift pins an older TRL), torchrun's parser; verl and OpenRLHF where installed."""
from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import json
import re
import subprocess
from pathlib import Path

import pytest

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.remedies import (
    DEFAULTS,
    FLAGS,
    OPENRLHF,
    OTHER_TOOLS,
    SWIFT,
    SWIFT_ROLLOUT,
    TORCHRUN,
    TRL,
    TRL_SERVE,
    VERL,
)
from grpo_doctor.analysis.rules import RULES

REPO = Path(__file__).resolve().parents[2]
SWIFT_PYTHON = REPO / ".venv-swift" / "bin" / "python"


def _fields(cls) -> dict[str, object]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None
    return out


def test_every_trl_flag_a_hint_names_is_a_field_of_the_installed_grpo_config_with_the_quoted_default():
    trl = pytest.importorskip("trl")
    fields = _fields(trl.GRPOConfig)
    missing = sorted(set(FLAGS[TRL]) - set(fields))
    assert not missing, f"TRL {trl.__version__} GRPOConfig has no field(s) {missing}"
    for name, value in DEFAULTS[TRL].items():
        assert fields[name] == value, f"TRL {trl.__version__}: {name} defaults to {fields[name]!r}, hints say {value!r}"


def test_the_vllm_range_quoted_for_trl_is_the_one_the_installed_release_declares():
    trl = pytest.importorskip("trl")
    from packaging.requirements import Requirement

    if trl.__version__ != remedies.CHECKED_AGAINST[TRL]:
        pytest.skip(f"remedies.py quotes TRL {remedies.CHECKED_AGAINST[TRL]}'s vLLM range; TRL {trl.__version__} "
                    "is installed: update CHECKED_AGAINST and VLLM_RANGES")
    declared = [Requirement(r) for r in importlib.metadata.requires("trl") or []]
    [vllm] = [r for r in declared if r.name == "vllm"]
    assert vllm.specifier == Requirement(remedies.VLLM_RANGES[TRL]).specifier


def test_every_trl_vllm_serve_flag_is_an_option_of_trl_vllm_serve():
    pytest.importorskip("trl")
    try:
        from trl.scripts.vllm_serve import ScriptArguments
    except ImportError as exc:  # needs vllm, absent without a GPU
        pytest.skip(f"trl.scripts.vllm_serve cannot be imported here: {exc}")
    fields = _fields(ScriptArguments)
    assert not set(FLAGS[TRL_SERVE]) - set(fields)
    for name, value in DEFAULTS[TRL_SERVE].items():
        assert fields[name] == value


# Run by .venv-swift's interpreter: ms-swift's argument dataclasses as {class: {field: default}}.
SWIFT_FIELDS = r"""
import dataclasses, json
try:
    from swift.arguments import RLHFArguments, RolloutArguments
except ImportError:  # ms-swift 3.x
    from swift.llm import RLHFArguments, RolloutArguments
import swift
def fields(cls):
    out = {}
    for f in dataclasses.fields(cls):
        d = f.default if f.default is not dataclasses.MISSING else None
        out[f.name] = d if isinstance(d, (int, float, str, bool, type(None))) else repr(d)
    return out
print(json.dumps({"version": swift.__version__, "rlhf": fields(RLHFArguments), "rollout": fields(RolloutArguments)}))
"""


@pytest.fixture(scope="module")
def swift_fields() -> dict:
    if not SWIFT_PYTHON.exists():
        pytest.skip(f"ms-swift is not installed ({SWIFT_PYTHON} is missing; constraints-swift.txt describes it)")
    out = subprocess.run([str(SWIFT_PYTHON), "-c", SWIFT_FIELDS], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        pytest.skip(f"ms-swift's arguments could not be imported in .venv-swift: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_ms_swift_flag_a_hint_names_is_an_argument_of_swift_rlhf_with_the_quoted_default(swift_fields):
    fields = swift_fields["rlhf"]
    missing = sorted(set(FLAGS[SWIFT]) - set(fields))
    assert not missing, f"ms-swift {swift_fields['version']} RLHFArguments has no field(s) {missing}"
    for name, value in DEFAULTS[SWIFT].items():
        assert fields[name] == value, f"ms-swift: {name} defaults to {fields[name]!r}, hints say {value!r}"
    assert "num_infer_workers" not in fields  # the hints say it is gone


def test_every_swift_rollout_flag_a_hint_names_is_an_argument_of_swift_rollout(swift_fields):
    missing = sorted(set(FLAGS[SWIFT_ROLLOUT]) - set(swift_fields["rollout"]))
    assert not missing, f"ms-swift {swift_fields['version']} RolloutArguments has no field(s) {missing}"


def test_every_torchrun_option_a_hint_names_is_accepted_by_torchrun_and_its_rendezvous():
    pytest.importorskip("torch")
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous, static_tcp_rendezvous
    from torch.distributed.run import get_args_parser

    options = {o for action in get_args_parser()._actions for o in action.option_strings}
    for written in FLAGS[TORCHRUN].values():
        assert written.split()[0] in options, written
    # a static launch (--master-addr/--master-port) reads `timeout`, the c10d backend `join_timeout`
    assert '"timeout"' in inspect.getsource(static_tcp_rendezvous)
    dynamic = inspect.getsource(dynamic_rendezvous)
    assert '"join_timeout"' in dynamic or ('key + "_timeout"' in dynamic and '"join": timedelta' in dynamic)


def test_every_verl_key_a_hint_names_is_in_verls_trainer_config():
    verl = pytest.importorskip("verl", reason="verl is not installed here; keys checked by hand against its sources")
    import yaml

    config = yaml.safe_load((Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml").read_text())
    recipe_only = {"algorithm.filter_groups.enable", "data.gen_batch_size"}  # recipe/dapo's own config
    for key in set(FLAGS[VERL]) - recipe_only:
        node = config
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"verl {verl.__version__} has no {key}"
            node = node[part]


def test_every_openrlhf_option_a_hint_names_is_in_its_ppo_launcher():
    pytest.importorskip("openrlhf", reason="OpenRLHF is not installed here; options checked by hand against its sources")
    from openrlhf.cli import train_ppo_ray

    source = inspect.getsource(train_ppo_ray)
    for written in FLAGS[OPENRLHF].values():
        assert f'"{written.split()[0]}"' in source, written


def _hint_texts() -> dict[str, str]:
    """Every remedy text of every rule (HINT_* strings, HINTS tuples, per-kind tables), and remedies.py's."""
    texts = {}
    for module in [*RULES, remedies]:
        for name, value in vars(module).items():
            if "HINT" not in name.upper() and module is not remedies:
                continue
            values = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else [value]
            for v in values:
                for text in v if isinstance(v, tuple) else [v]:
                    if isinstance(text, str) and " " in text:
                        texts[text] = f"{module.__name__}.{name}"
    return texts


def test_every_framework_flag_written_in_a_hint_comes_from_the_remedies_table():
    known_cli = {w.split()[0] for table in FLAGS.values() for w in table.values() if w.startswith("--")}
    known_cli |= {o for options in OTHER_TOOLS.values() for o in options}
    known_vllm = {name for fw in (TRL, SWIFT, SWIFT_ROLLOUT) for name in FLAGS[fw] if name.startswith("vllm_")}
    for text, where in _hint_texts().items():
        for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", text):
            assert option in known_cli, f"{where} names {option}, which remedies.FLAGS does not list"
        for name in re.findall(r"\bvllm_[a-z_]+", text):
            assert name in known_vllm, f"{where} names {name}, which remedies.FLAGS does not list"


def test_no_hint_repeats_advice_that_is_wrong_for_todays_versions():
    texts = _hint_texts()
    everything = "\n".join(texts)
    assert "0.7.3" not in everything  # pin to the trainer's declared range instead
    assert "--ddp_timeout 600" not in everything and "--ddp_timeout 3600" not in everything
    assert "(e.g. 0.5)" not in everything  # vLLM memory defaults differ per framework (0.3 / 0.9 / 0.5)
    assert not re.search(r"(?<!--)\bvllm_max_model_len\b", everything)  # TRL's is vllm_max_model_length
    assert "torch < 2.9" not in everything  # a version cut-off for the flight recorder that was never verified
    for text in texts:
        if "expandable_segments:True" in text:
            assert "sleep mode is off" in text, texts[text]
        if "num_infer_workers" in text:
            assert "num_infer_workers is gone" in text, texts[text]
        if "join_timeout" in text:
            assert "timeout=1800" in text.replace("join_timeout", ""), texts[text]  # the static launch's key too
        if "TORCH_FR_BUFFER_SIZE" in text:
            assert "TORCH_NCCL_TRACE_BUFFER_SIZE" in text, texts[text]
        if "filter_groups" in text:
            assert "DAPO recipe" in text, texts[text]
        if "epsilon_high" in text and "clip" in text.lower():
            assert "off-policy" in text, texts[text]
