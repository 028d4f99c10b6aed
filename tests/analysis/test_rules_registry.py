import importlib
from pathlib import Path
from types import SimpleNamespace

from grpo_doctor.analysis import rules
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.analysis.rules import RULES, rule_name, run_rules

RULES_DIR = Path(rules.__file__).parent
TESTS_DIR = Path(__file__).parent


def test_every_rule_file_is_listed_tested_and_has_hints():
    files = {p.stem for p in RULES_DIR.glob("*.py") if p.stem != "__init__"}
    assert files == {rule_name(r) for r in RULES}
    tests_text = "\n".join(p.read_text() for p in TESTS_DIR.glob("test_*.py") if p.name != Path(__file__).name)
    for name in files:
        module = importlib.import_module(f"grpo_doctor.analysis.rules.{name}")
        assert module.HINTS and all(h.strip() for h in module.HINTS), name
        assert f'"{module.ID}"' in tests_text, f"no test names rule id {module.ID!r}"
        assert module.Config.__dataclass_params__.frozen, name


def _raise(run, cfg):
    raise KeyError("no such column")


def _ok(run, cfg):
    yield Finding(id="ok", severity="info", title="fine")


def _rule(name, check):
    return SimpleNamespace(__name__=f"grpo_doctor.analysis.rules.{name}", Config=lambda: None, check=check)


def test_a_rule_that_raises_becomes_a_warning_naming_it_not_a_crash():
    findings, warnings = run_rules(Evidence(paths=[]), rules=[_rule("broken", _raise), _rule("ok", _ok)])
    assert [f.id for f in findings] == ["ok"]
    assert any("rule broken failed" in w and "KeyError" in w for w in warnings)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"
DATA = Path(__file__).resolve().parents[1] / "data"


def test_every_evidence_key_a_rule_emits_is_documented_in_its_module_and_in_docs():
    from grpo_doctor.analysis.load import load_evidence

    docs = DOCS.read_text()
    by_id = {r.ID: r for r in RULES}
    for rule in RULES:
        assert f"## `{rule.ID}`" in docs, f"docs/findings.md has no section for {rule.ID}"
    sources = sorted((DATA / "logs").glob("*")) + [DATA / "fr" / "skip", DATA / "fr" / "shape"]
    sources += sorted(p for p in (DATA / "metric_logs").iterdir() if p.is_dir())  # TRL / ms-swift output dirs
    seen_ids = set()
    for source in sources:
        findings, _ = run_rules(load_evidence([source]))
        for f in findings:
            seen_ids.add(f.id)
            doc = by_id[f.id].__doc__
            section = docs[docs.index(f"## `{f.id}`"):]
            for key in f.evidence:
                assert f"`{key}`" in doc and f"`{key}`" in section, f"{f.id}: evidence key {key!r} undocumented"
    assert len(seen_ids) >= 8  # the fixtures exercise most rules
