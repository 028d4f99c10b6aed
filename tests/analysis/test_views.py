"""A rule's view of the run (analysis/views.py) is the same run to the caches kept per run: every rule
gets its own RuleEvidence, and none may pay again for what another rule's view already computed."""
import ast
import copy
import pickle
from pathlib import Path

import pytest
from rolloutdata import healthy_metrics, metrics_run

from grpo_doctor.analysis.grpo_metrics import step_series
from grpo_doctor.analysis.load import Evidence, load_evidence
from grpo_doctor.analysis.parallel_layout import layout_of
from grpo_doctor.analysis.rules import RULES, rule_name
from grpo_doctor.analysis.views import VIEW_OF, RuleEvidence, UndeclaredView, View

REPO = Path(__file__).resolve().parents[2]


def test_two_rules_views_of_one_run_share_its_step_series_and_layout(tmp_path):
    evidence = load_evidence([metrics_run(tmp_path / "run", healthy_metrics())])
    reads = {View.RANK_TABLES, View.RANKS, View.RANK_LOGS, View.LAUNCH_COMMAND}
    one, other = RuleEvidence(evidence, reads, "one"), RuleEvidence(evidence, reads, "other")
    first, second = step_series(one), step_series(other)
    assert first and all(first[source] is second[source] for source in first)  # computed once, not per rule
    assert layout_of(one) is layout_of(other) is layout_of(evidence)


def _reads_of(path, seen):
    """The Evidence attributes the module reads on its RunView (or Evidence) parameters, and those of the
    analysis helpers it hands the run to (followed once each): what a rule may touch on any path, run or not."""
    tree = ast.parse(path.read_text())
    names = {a.arg for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for a in f.args.args
             if a.annotation is not None and ast.unparse(a.annotation) in ("RunView", "Evidence")}
    imported = {alias.asname or alias.name: node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_doctor.analysis")
                for alias in node.names}
    attrs = {n.attr for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in names}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and any(isinstance(a, ast.Name) and a.id in names for a in call.args)):
            continue
        func = call.func
        module = imported.get(func.id) if isinstance(func, ast.Name) else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in imported:
            module = f"{imported[func.value.id]}.{func.value.id}"
        helper = REPO / f"{module.replace('.', '/')}.py" if module else None
        if helper is not None and helper.is_file() and helper not in seen and helper.name != "views.py":
            seen.add(helper)
            attrs |= _reads_of(helper, seen)
    return attrs


@pytest.mark.parametrize("rule", RULES, ids=rule_name)
def test_a_rule_declares_every_view_its_code_reads_on_any_path(rule):
    """run_rules fails a rule that reads an undeclared view when it does; this finds the read on a path no
    fixture takes (an error branch, a rare log), in the rule's module or a helper it passes the run to."""
    reads = _reads_of(Path(rule.__file__), set())
    undeclared = sorted(f"{name} ({VIEW_OF[name].name})" for name in reads
                        if name in VIEW_OF and VIEW_OF[name] not in rule.READS)
    assert not undeclared, f"{rule_name(rule)} reads {', '.join(undeclared)}: add the view(s) to its READS"
    assert all(name in VIEW_OF for name in reads), f"{rule_name(rule)} reads {reads - set(VIEW_OF)}, in no view"


def test_a_rules_view_copies_and_an_undeclared_view_is_never_answered_quietly():
    # Found in review: copy/pickle recursed forever in __getattr__ (the slots are read before __init__ set
    # them), and hasattr / getattr with a default answered False or the default for an undeclared view.
    run = RuleEvidence(Evidence(paths=[]), {View.RANK_TABLES}, "some-rule")
    assert copy.copy(run).phases is not None and pickle.loads(pickle.dumps(run)).steps is not None
    for ask in (lambda: hasattr(run, "hangs"), lambda: getattr(run, "hangs", None)):
        with pytest.raises(UndeclaredView, match="some-rule reads `hangs` .view WATCH_ARTIFACTS."):
            ask()


def test_every_view_is_served_typed_and_the_evidence_has_what_each_serves():
    """mypy reads a rule's `run.<name>` through RuleEvidence's typed attributes: one per name a view lists,
    no more (a name served but in no view would pass the type check and fail every rule that reads it)."""
    served = {name for name, value in vars(RuleEvidence).items() if type(value).__name__ == "_Served"}
    assert served == set(VIEW_OF)
    evidence = Evidence(paths=[])
    assert all(hasattr(evidence, name) for name in served)
    everything = RuleEvidence(evidence, set(View), "all")
    for name in served:
        getattr(everything, name)  # every view declared: each name served, none raises
    assert everything.phases is evidence.phases and everything.host_of(None) is None


def test_a_failure_inside_a_served_property_is_said_as_itself_not_as_an_undeclared_view():
    """Found in review: an AttributeError from inside `world_size` fell back to __getattr__, which named the
    declared view undeclared and lost the real error."""
    class Broken(Evidence):
        @property
        def world_size(self):
            return self.run.no_such_thing

    broken = Broken(paths=[])
    object.__setattr__(broken, "run", object())
    with pytest.raises(RuntimeError, match="reading `world_size` failed: .*no_such_thing"):
        _ = RuleEvidence(broken, {View.RANKS}, "some-rule").world_size
