"""A rule's view of the run (analysis/views.py) is the same run to the caches kept per run: every rule
gets its own RuleEvidence, and none may pay again for what another rule's view already computed."""
from rolloutdata import healthy_metrics, metrics_run

from grpo_doctor.analysis.grpo_metrics import step_series
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.parallel_layout import layout_of
from grpo_doctor.analysis.views import RuleEvidence, View


def test_two_rules_views_of_one_run_share_its_step_series_and_layout(tmp_path):
    evidence = load_evidence([metrics_run(tmp_path / "run", healthy_metrics())])
    reads = {View.RANK_TABLES, View.RANKS, View.RANK_LOGS, View.LAUNCH_COMMAND}
    one, other = RuleEvidence(evidence, reads, "one"), RuleEvidence(evidence, reads, "other")
    first, second = step_series(one), step_series(other)
    assert first and all(first[source] is second[source] for source in first)  # computed once, not per rule
    assert layout_of(one) is layout_of(other) is layout_of(evidence)
