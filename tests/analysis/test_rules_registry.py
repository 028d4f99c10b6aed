import dataclasses
import importlib
from pathlib import Path
from types import SimpleNamespace

from grpo_doctor.analysis import rules
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.load import Evidence, load_evidence
from grpo_doctor.analysis.rules import RULES, rule_name, run_rules
from grpo_doctor.analysis.views import View

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
        assert module.READS and all(isinstance(v, View) for v in module.READS), f"{name}: READS names no views"


def _raise(run, cfg):
    raise KeyError("no such column")


def _ok(run, cfg):
    yield Finding(id="ok", severity="info", title="fine")


def _rule(name, check, reads=()):
    return SimpleNamespace(__name__=f"grpo_doctor.analysis.rules.{name}", ID=name, READS=set(reads),
                           Config=lambda: None, check=check)


def test_a_rule_that_raises_becomes_a_warning_naming_it_not_a_crash():
    findings, warnings = run_rules(Evidence(paths=[]), rules=[_rule("broken", _raise), _rule("ok", _ok)])
    assert [f.id for f in findings] == ["ok"]
    assert any("rule broken failed" in w and "KeyError" in w for w in warnings)


def _reads_phases(run, cfg):
    if not run.phases.empty:
        yield Finding(id="phases", severity="info", title="phases were read")


def test_a_rule_reads_only_the_views_it_declares():
    """run_rules serves a rule the views of its READS (analysis/views.py); any other read fails the rule
    with a warning that names the view, and the other rules' findings stay."""
    evidence = load_evidence([DATA / "logs" / "torchrun_nccl_timeout.log"])
    findings, warnings = run_rules(evidence, rules=[_rule("undeclared", _reads_phases, {View.LOG_SIGNATURES}),
                                                    _rule("ok", _ok)])
    assert [f.id for f in findings] == ["ok"]
    assert any("rule undeclared failed (UndeclaredView" in w and "`phases` (view RANK_TABLES)" in w for w in warnings)
    _, warnings = run_rules(evidence, rules=[_rule("declared", _reads_phases, {View.RANK_TABLES})])
    assert not any("declared failed" in w for w in warnings)


def _assert_facts_are_the_evidence(f):
    """A finding's typed facts (analysis/finding_facts.py, what incidents.py reads) hold the values its
    evidence gives findings.json, under the same names."""
    if f.facts is None:
        return
    for fact in dataclasses.fields(f.facts):
        value, written = getattr(f.facts, fact.name), f.evidence.get(fact.name)
        if isinstance(value, tuple):
            written = tuple(written or ())
        assert value == written, f"{f.id}: facts.{fact.name} is {value!r}, its evidence says {written!r}"


DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"
DATA = Path(__file__).resolve().parents[1] / "data"


def test_every_evidence_key_a_rule_emits_is_documented_in_its_module_and_in_docs():
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
            _assert_facts_are_the_evidence(f)
    assert len(seen_ids) >= 8  # the fixtures exercise most rules
