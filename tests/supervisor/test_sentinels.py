"""watch's live findings (supervisor/sentinels.py) say what the report says, with its thresholds, as soon
as the steps are there: the same ids and steps for each degenerate-rollout rule, from rank records and
from a job's printed metric lines alike; a warning that a later step breaks is cleared in one line; the
alert goes out once per id; memory stays bounded over a long run."""
import json
import math

import pytest
from helpers import write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.schema import Header, RunPaths, Step
from grpo_doctor.schema.live_findings import read_live_findings
from grpo_doctor.supervisor.progress import HangPolicy, ProgressTracker
from grpo_doctor.supervisor.sentinels import Sentinels

LIVE_IDS = {"constant-reward", "dead-step", "zero-std-groups", "zero-kl", "nan-loss", "entropy-collapse",
            "length-collapse", "stale-rollout-weights"}
HEALTHY = {"loss": 0.01, "grad_norm": 0.4, "learning_rate": 1e-6, "reward": 0.5, "reward_std": 0.3,
           "frac_reward_zero_std": 0.1, "entropy": 1.2, "completions/mean_length": 40.0,
           "completions/clipped_ratio": 0.0}
DEAD = {**HEALTHY, "loss": 0.0, "grad_norm": 0.0, "reward": 1.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0}


def _common(rank, step, t):
    return {"rank": rank, "pid": 1000 + rank, "host": "node-0", "t": t, "mono": t, "step": step}


def _run_dir(tmp_path, series: list[dict], num_ranks: int = 2, argv=("train.py",)):
    run_dir = tmp_path / "run"
    for rank in range(num_ranks):
        records = [Header(**_common(rank, 0, 100.0), local_rank=rank, world_size=num_ranks, node_rank=0,
                          local_world_size=num_ranks, gpu_uuid=None, versions={}, launch={}, argv=list(argv))]
        records += [Step(**_common(rank, n, 100.0 + n), metrics=m) for n, m in enumerate(series, start=1)]
        write_rank(run_dir, rank, records)
    return run_dir


def _live(run_dir, step_by_step: bool = True, alerts=None):
    """The live findings, fed the rank files as watch's tracker reads them (a line at a time when
    `step_by_step`, as the ranks write them)."""
    paths = RunPaths(run_dir)
    out = run_dir / "supervisor" / "node-0" / "live-findings.json"
    sentinels = Sentinels("node-0", out, write=lambda what, fn: fn() or True,
                          alert=(lambda event, f: alerts.append((event, f))) if alerts is not None else None)
    lines = []
    if step_by_step:  # replay the files record by record through a tracker
        full = {p: p.read_bytes().splitlines(keepends=True) for p in paths.rank_files()}
        for p in full:
            p.write_bytes(b"")
        tracker = ProgressTracker(paths, HangPolicy())
        for i in range(max(len(v) for v in full.values())):
            for p, lines_of in full.items():
                if i < len(lines_of):
                    with p.open("ab") as f:
                        f.write(lines_of[i])
            lines += sentinels.check(tracker.poll(float(i)))
    else:
        lines += sentinels.check(ProgressTracker(paths, HangPolicy()).poll(0.0))
    lines += sentinels.finish()
    return sentinels, lines


def _said(sentinels):
    return {(f["id"], f["step"]) for f in sentinels.kept if f["id"] in LIVE_IDS}


def _reported(*paths):
    findings, _ = run_rules(load_evidence([str(p) for p in paths]))
    return {(f.id, f.step) for f in findings if f.id in LIVE_IDS}


SCENARIOS = {
    "healthy": [HEALTHY] * 12,
    "constant reward from step 1": [DEAD] * 12,
    "grad norm nan from step 6": [HEALTHY] * 5 + [{**HEALTHY, "grad_norm": math.nan}] * 3,
    "entropy collapse": [{**HEALTHY, "entropy": 1.0}] * 4 + [{**HEALTHY, "entropy": 0.01}] * 4,
    "every completion truncated": [HEALTHY] * 2 + [{**HEALTHY, "completions/clipped_ratio": 1.0}] * 6,
    "zero kl while the policy moves": [{**HEALTHY, "kl": 0.0}] * 6,
    "rollout log-probs drift": [{**HEALTHY, "sampling/sampling_logp_difference/mean": 0.02 * 2 ** (n / 2)}
                                for n in range(12)],
    "constant, then varied": [DEAD] * 6 + [HEALTHY] * 6,
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_live_findings_are_the_reports_ids_and_steps(tmp_path, name):
    run_dir = _run_dir(tmp_path, SCENARIOS[name])
    sentinels, _ = _live(run_dir)
    assert _said(sentinels) == _reported(run_dir), name
    if name != "healthy":
        assert _said(sentinels), f"{name}: nothing said live"


def test_a_constant_reward_is_said_at_its_fifth_step_once_and_a_later_varied_step_clears_it(tmp_path):
    run_dir = _run_dir(tmp_path, [DEAD] * 6 + [HEALTHY] * 3)
    sentinels, lines = _live(run_dir)
    said = [line for line in lines if "constant-reward" in line]
    assert said[0].startswith("live: CRITICAL constant-reward at step 1 (rank records): the reward is 1.0"), said
    assert len(said) == 2 and said[1].startswith("live: cleared constant-reward at step 7"), said
    entry = next(f for f in sentinels.kept if f["id"] == "constant-reward")
    # min_consecutive_steps (5) of the report's Config: said when step 5's records arrive, not sooner
    assert entry["said_at_step"] == 5 and entry["state"] == "cleared" and entry["cleared_at_step"] == 7
    found = read_live_findings(run_dir / "supervisor" / "node-0" / "live-findings.json")
    assert {f["id"] for f in found} >= {"constant-reward", "dead-step"}


def test_thresholds_come_from_the_reports_configs(tmp_path):
    from grpo_doctor.analysis.rules import constant_reward, dead_step
    from grpo_doctor.supervisor.live_rules import LiveConfigs

    assert LiveConfigs().constant_reward == constant_reward.Config()
    assert LiveConfigs().dead_step is not dead_step.Config() and LiveConfigs().dead_step == dead_step.Config()
    assert type(LiveConfigs().dead_step) is dead_step.Config  # one class: changing a default changes both


def test_the_jobs_printed_trl_dicts_alone_are_judged_as_the_report_judges_watchs_saved_output(tmp_path):
    run_dir = tmp_path / "run"
    host_dir = run_dir / "supervisor" / "node-0"
    host_dir.mkdir(parents=True)
    text = "".join(f"{json.dumps(DEAD).replace(chr(34), chr(39))}\n" + "some other line\n" for _ in range(8))
    (host_dir / "stdout.log").write_text(text)
    (host_dir / "stderr.log").write_text("")
    sentinels = Sentinels("node-0", host_dir / "live-findings.json", write=lambda what, fn: fn() or True)
    lines = []
    for line in text.splitlines(keepends=True):  # as the tee hands over whole lines
        sentinels.submit_output("stdout", line.encode())
        lines += sentinels.check([])
    lines += sentinels.finish()
    assert any(line.startswith("live: CRITICAL constant-reward at step 1 (TRL's printed metrics)") for line in lines)
    assert _said(sentinels) == _reported(run_dir) and ("constant-reward", 1) in _said(sentinels)


def test_a_nan_gradient_printed_as_text_as_transformers_5_prints_it_is_nan_loss_live_and_in_the_report(tmp_path):
    host_dir = tmp_path / "run" / "supervisor" / "node-0"
    host_dir.mkdir(parents=True)
    rows = [{"loss": "0.01", "grad_norm": "0.4", "reward": "0.5"}] * 4 + [{"loss": "0.01", "grad_norm": "nan"}] * 2
    text = "".join(repr(row) + "\n" for row in rows)
    (host_dir / "stdout.log").write_text(text)
    sentinels = Sentinels("node-0", host_dir / "live-findings.json", write=lambda what, fn: fn() or True)
    sentinels.submit_output("stdout", text.encode())
    lines = sentinels.check([]) + sentinels.finish()
    assert any(line.startswith("live: CRITICAL nan-loss at step 5") for line in lines), lines
    assert _said(sentinels) == _reported(tmp_path / "run") == {("nan-loss", 5)}


def test_printed_lines_are_not_judged_beside_rank_records_that_hold_the_same_metrics(tmp_path):
    run_dir = _run_dir(tmp_path, [HEALTHY] * 8)
    sentinels = Sentinels("node-0", tmp_path / "live.json", write=lambda what, fn: fn() or True)
    sentinels.check(ProgressTracker(RunPaths(run_dir), HangPolicy()).poll(0.0))
    for _ in range(8):
        sentinels.submit_output("stdout", (json.dumps(DEAD).replace('"', "'") + "\n").encode())
    assert sentinels.check([]) == [] and not sentinels.kept


def test_a_critical_finding_is_alerted_once_per_id_and_a_warning_not_at_all(tmp_path):
    alerts = []
    run_dir = _run_dir(tmp_path, [DEAD] * 12 + [{**DEAD, "reward": 0.0}] * 3)
    sentinels, _ = _live(run_dir, alerts=alerts)
    assert sorted(f["id"] for _, f in alerts) == ["constant-reward", "dead-step"]
    assert all(event == "live" and f["severity"] == "critical" for event, f in alerts)


def test_memory_stays_bounded_over_a_long_run(tmp_path):
    from grpo_doctor.supervisor.step_feed import MAX_OPEN_STEPS

    run_dir = _run_dir(tmp_path, [DEAD] * 3000, num_ranks=2)
    sentinels, lines = _live(run_dir, step_by_step=False)
    assert len(sentinels.feed._open) <= MAX_OPEN_STEPS
    rules = sentinels.sources["grpo-doctor"].rules
    sizes = [len(v) for rule in rules for v in vars(rule).values() if hasattr(v, "__len__") and not isinstance(v, str)]
    assert max(sizes) <= 64, sizes
    entry = next(f for f in sentinels.kept if f["id"] == "constant-reward")
    assert entry["step"] == 1 and entry["evidence"]["num_steps"] == 3000 and entry["state"] == "standing"


def test_summary_prints_what_watch_said_live_under_the_ranks(tmp_path):
    from grpo_doctor.cli.summary import format_summary, summarise
    from grpo_doctor.cli.summary_live import LiveState
    from grpo_doctor.runlog.parallel_read import read_run

    run_dir = _run_dir(tmp_path, [DEAD] * 6)
    _live(run_dir)
    log, live = read_run([run_dir]), LiveState.of([run_dir])
    text = format_summary(log, summarise(log, live=live), live)
    assert "live: CRITICAL constant-reward at step 1: the reward is 1.0 for every completion" in text, text
    assert "(said by watch on node-0 at step 5)" in text, text
