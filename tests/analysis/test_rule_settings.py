import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rolloutdata import DOCS, healthy_metrics, metrics_run

from grpo_doctor.analysis.rules import RULES, dead_step
from grpo_doctor.cli.main import main
from grpo_doctor.report.rule_settings import RuleSettingsError, field_types, rule_configs

DEAD = {"loss": 0.0, "reward": 1.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0, "grad_norm": 0.0, "kl": 0.0}
NUM_DEAD = dead_step.Config().min_consecutive_steps  # exactly enough to fire with the default


@pytest.fixture
def dead_run(tmp_path):
    return metrics_run(tmp_path / "run", healthy_metrics(3) + [DEAD] * NUM_DEAD + healthy_metrics(3))


def _report(run, capsys, *options):
    status = main(["report", str(run), "--json", *options])
    data = json.loads(capsys.readouterr().out)
    return status, {f["id"] for f in data["findings"]}, data


def test_raising_a_threshold_with_set_removes_the_finding_and_lowering_it_brings_it_back(dead_run, capsys):
    status, ids, data = _report(dead_run, capsys)
    assert (status, "dead-step" in ids, "settings" in data) == (1, True, False)
    status, ids, data = _report(dead_run, capsys, "--set", f"dead-step.min_consecutive_steps={NUM_DEAD + 1}")
    assert (status, "dead-step" in ids) == (0, False)
    assert data["settings"] == {"dead-step": {"min_consecutive_steps": NUM_DEAD + 1}}
    assert json.loads((dead_run / "findings.json").read_text()) == data
    _, ids, _ = _report(dead_run, capsys, "--set", f"dead-step.min_consecutive_steps={NUM_DEAD + 1}",
                        "--set", f"dead-step.min_consecutive_steps={NUM_DEAD}")
    assert "dead-step" in ids  # the last --set of a field counts


def test_a_toml_file_sets_thresholds_and_set_wins_over_it(dead_run, tmp_path, capsys):
    toml = tmp_path / "thresholds.toml"
    toml.write_text(f"[dead-step]\nmin_consecutive_steps = {NUM_DEAD + 1}\n\n"
                    "[seed-collision]\nmin_identical_frac = 0.6\n")
    _, ids, data = _report(dead_run, capsys, "--rules-config", str(toml))
    assert "dead-step" not in ids
    assert data["settings"] == {"dead-step": {"min_consecutive_steps": NUM_DEAD + 1},
                                "seed-collision": {"min_identical_frac": 0.6}}
    _, ids, data = _report(dead_run, capsys, "--rules-config", str(toml),
                           "--set", f"dead-step.min_consecutive_steps={NUM_DEAD}")
    assert "dead-step" in ids
    assert data["settings"] == {"seed-collision": {"min_identical_frac": 0.6}}  # back at the default


BAD_TOML = {
    "broken.toml": ("[dead-step\nmin_consecutive_steps = 3\n", ["broken.toml is not valid TOML"]),
    "unknown-field.toml": ("[dead-step]\nmin_steps = 3\n", ["has no field 'min_steps'", "min_consecutive_steps"]),
    "no-table.toml": ("min_consecutive_steps = 3\n", ["is not inside a rule table", "[seed-collision]"]),
    "float-for-int.toml": ("[dead-step]\nmin_consecutive_steps = 2.5\n", ["must be an integer", "2.5"]),
    "bool-for-float.toml": ("[seed-collision]\nmin_identical_frac = true\n", ["must be a finite number", "True"]),
}
BAD_SETS = {
    "no-field": ("dead-step=3", ["'dead-step=3' is not RULE_ID.FIELD=VALUE"]),
    "no-value": ("dead-step.min_consecutive_steps", ["is not RULE_ID.FIELD=VALUE"]),
    "unknown-rule": ("dead-stepp.min_consecutive_steps=3", ["no rule 'dead-stepp'", "dead-step, entropy-collapse"]),
    "unknown-field": ("dead-step.min_steps=3", ["has no field 'min_steps'", "its fields: min_consecutive_steps"]),
    "rule-without-fields": ("nccl-timeout.timeout_s=3", ["rule nccl-timeout has no field 'timeout_s'",
                                                         "no thresholds to set"]),
    "not-an-int": ("dead-step.min_consecutive_steps=many", ["must be an integer, not 'many'", "default is 5"]),
    "not-a-number": ("seed-collision.min_identical_frac=half", ["must be a finite number", "default is 0.5"]),
    "nan": ("zero-std-groups.min_share=nan", ["must be a finite number, not 'nan'", "default is 0.8"]),
}


def _assert_one_line_error(capsys, expected):
    err = capsys.readouterr().err
    message, hint = err.strip().splitlines()  # the error and its hint, one line each
    assert message.startswith("grpo-doctor: error: ") and hint.startswith("  hint: ")
    for text in expected:
        assert text in err, err


@pytest.mark.parametrize("setting, expected", BAD_SETS.values(), ids=BAD_SETS.keys())
def test_a_bad_set_exits_2_with_one_line_naming_it_and_the_valid_choices(dead_run, capsys, setting, expected):
    assert main(["report", str(dead_run), "--set", setting]) == 2
    _assert_one_line_error(capsys, expected)
    assert not (dead_run / "findings.json").exists()  # refused before any work


@pytest.mark.parametrize("name, content, expected", [(k, *v) for k, v in BAD_TOML.items()], ids=BAD_TOML.keys())
def test_a_bad_rules_config_exits_2_with_one_line_naming_the_cause(dead_run, tmp_path, capsys, name, content,
                                                                   expected):
    (tmp_path / name).write_text(content)
    assert main(["report", str(dead_run), "--rules-config", str(tmp_path / name)]) == 2
    _assert_one_line_error(capsys, expected)


def test_a_missing_rules_config_exits_2_naming_the_file(dead_run, tmp_path, capsys):
    assert main(["report", str(dead_run), "--rules-config", str(tmp_path / "nope.toml")]) == 2
    _assert_one_line_error(capsys, [f"--rules-config {tmp_path / 'nope.toml'} does not exist"])


def _as_setting(value):
    if isinstance(value, tuple):
        return ",".join(value)
    return repr(value)


def test_every_threshold_documented_in_findings_md_can_be_set_to_its_default():
    docs = DOCS.read_text()
    for rule in RULES:
        section = docs[docs.index(f"## `{rule.ID}`"):]
        for f in dataclasses.fields(rule.Config):
            assert f"`{f.name}`" in section, f"{rule.ID}.{f.name} is not in docs/findings.md"
            default = getattr(rule.Config(), f.name)
            configs = rule_configs([f"{rule.ID}.{f.name}={_as_setting(default)}"])
            assert configs == {rule.ID: rule.Config()}, f"{rule.ID}.{f.name}"


def test_every_threshold_takes_a_changed_value_of_its_type():
    changed = {int: "7", float: "0.25"}
    for rule in RULES:
        for name, kind in field_types(rule).items():
            if kind in changed:
                [cfg] = rule_configs([f"{rule.ID}.{name}={changed[kind]}"]).values()
                assert getattr(cfg, name) == kind(changed[kind]) and type(getattr(cfg, name)) is kind


@dataclasses.dataclass(frozen=True)
class _Config:
    enabled: bool = True
    label: str = "a"
    names: tuple[str, ...] = ()
    count: int = 1


FAKE = [SimpleNamespace(ID="fake", Config=_Config)]


@pytest.mark.parametrize("text, value", [("true", True), ("Yes", True), ("1", True), ("false", False),
                                         ("NO", False), ("0", False)])
def test_booleans_are_read_from_the_usual_words(text, value):
    assert rule_configs([f"fake.enabled={text}"], rules=FAKE)["fake"].enabled is value


def test_text_and_lists_are_read_from_set_and_from_toml(tmp_path):
    toml = tmp_path / "t.toml"
    toml.write_text('[fake]\nlabel = "from file"\nnames = ["NCCL_", "TORCH_"]\nenabled = false\ncount = 3\n')
    cfg = rule_configs(["fake.names= NCCL_ , GLOO_"], toml, rules=FAKE)["fake"]
    assert cfg == _Config(enabled=False, label="from file", names=("NCCL_", "GLOO_"), count=3)
    assert rule_configs(["fake.names="], rules=FAKE)["fake"].names == ()
    toml.write_text('[fake]\ncount = "3"\n')  # a quoted number in TOML is text
    with pytest.raises(RuleSettingsError, match="must be an integer"):
        rule_configs([], toml, rules=FAKE)


def test_an_unreadable_bool_names_the_accepted_words():
    with pytest.raises(RuleSettingsError, match="must be true or false, not 'maybe'"):
        rule_configs(["fake.enabled=maybe"], rules=FAKE)


def test_the_parsed_configs_change_what_run_rules_finds(dead_run):
    from grpo_doctor.analysis.load import load_evidence
    from grpo_doctor.analysis.rules import run_rules

    evidence = load_evidence([Path(dead_run)])
    strict = rule_configs([f"dead-step.min_consecutive_steps={NUM_DEAD + 1}"])
    assert "dead-step" in {f.id for f in run_rules(evidence)[0]}
    assert "dead-step" not in {f.id for f in run_rules(evidence, configs=strict)[0]}


def test_spaces_around_the_rule_id_and_field_are_ignored():
    assert rule_configs([" dead-step . min_consecutive_steps = 3"])["dead-step"].min_consecutive_steps == 3
