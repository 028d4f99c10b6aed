"""The page of a real TRL GRPOTrainer job whose reward function hung on rank 1 (tests/data/trl_reward_hang/,
caught by `grpo-doctor watch --on-hang kill`): the culprit's whole stack, readable, right under the
verdict; metric panels of 2 points folded away; the rank the others wait for marked on the timeline."""
import html as html_text
import json
import re
import shutil
from pathlib import Path

import pytest
from hang_run import write_hang_run
from hostile import IMG, SCRIPT

from grpo_doctor.report.build import build_report

TRL_HANG = Path(__file__).resolve().parents[1] / "data" / "trl_reward_hang" / "run"
HANG_FILE = Path("supervisor") / "vm" / "hang-1.json"


def _page(run: Path, out: Path) -> str:
    return build_report([run], out_dir=out).html_path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def trl_page(tmp_path_factory) -> str:
    return _page(TRL_HANG, tmp_path_factory.mktemp("trl-report"))


def _lead_stack(html: str) -> str:
    """From the culprit's stack block to the Findings heading: what sits between the verdict and the cards."""
    return html[html.index('id="culprit-stack"'):html.index('id="findings"')]


def _frames(pre_owner: str) -> list[str]:
    pre = re.search(r'<pre class="frames">(.*?)</pre>', pre_owner, re.S).group(1)
    return pre.rstrip("\n").split("\n")


def _hang_frames(run: Path, rank: int) -> list[str]:
    from grpo_doctor.schema.stacks import display_path

    report = json.loads((run / HANG_FILE).read_text())
    return [f"{f['function']} ({display_path(f['filename'])}:{f['line']})" for f in report["stacks"][str(rank)]["frames"]]


def test_a_trl_reward_hang_shows_the_culprits_whole_stack_right_under_the_verdict(trl_page):
    html = trl_page
    assert html.index('id="verdict"') < html.index('id="culprit-stack"') < html.index('id="findings"')
    lead = _lead_stack(html)
    assert ("rank 1, in a reward function: reward (train_grpo.py:33), called by GRPOTrainer._calculate_rewards "
            "(trl/trainer/grpo_trainer.py:1626): its own frames, innermost first") in lead
    frames = _frames(lead)
    assert [html_text.unescape(f) for f in frames] == _hang_frames(TRL_HANG, 1)  # every frame, in py-spy's order
    assert frames[:2] == ["reward (train_grpo.py:33)", "GRPOTrainer._calculate_rewards (trl/trainer/grpo_trainer.py:1626)"]
    assert "GRPOTrainer._generate_and_score_completions (trl/trainer/grpo_trainer.py:2753)" in frames
    assert "profiling_decorator.&lt;locals&gt;.wrapper (trl/extras/profiling.py:211)" in lead  # escaped
    # shown as a stack, no longer as a JSON string in the folded evidence table
    card = html[html.index('data-finding-id="hang"'):]
    card = card[:card.index("</div>\n", card.index('<table class="evidence">'))]
    assert "culprit_stacks" not in card and "culprit_kind" not in card


def test_a_stack_deeper_than_the_evidence_keeps_is_shown_whole(tmp_path):
    # The evidence keeps 40 frames; the page shows every frame of the hang report.
    run = shutil.copytree(TRL_HANG, tmp_path / "run")
    report = json.loads((run / HANG_FILE).read_text())
    frames = report["stacks"]["1"]["frames"]
    frames[1:1] = [{"function": f"visit_{i}", "filename": "/home/me/tree.py", "line": 10 + i} for i in range(50)]
    (run / HANG_FILE).write_text(json.dumps(report))
    shown = _frames(_lead_stack(_page(run, tmp_path / "out")))
    assert len(shown) == len(frames) == 64
    assert shown[1] == "visit_0 (tree.py:10)" and shown[50] == "visit_49 (tree.py:59)"
    assert html_text.unescape(shown[-1]) == "<module> (train_grpo.py:56)"


def test_run_text_in_the_culprits_frames_stays_escaped(tmp_path):
    run = shutil.copytree(TRL_HANG, tmp_path / "run")
    report = json.loads((run / HANG_FILE).read_text())
    report["stacks"]["1"]["frames"][1]["function"] = f"score{SCRIPT}"
    report["stacks"]["1"]["frames"][2]["filename"] = f"/home/me/{IMG}.py"
    (run / HANG_FILE).write_text(json.dumps(report))
    html = _page(run, tmp_path / "out")
    assert SCRIPT not in html and IMG not in html and "<script" not in html
    assert "score&lt;script&gt;" in _lead_stack(html)


def test_metric_panels_with_too_few_steps_for_a_trend_are_folded(trl_page, tmp_path):
    # The TRL job logged its metrics at 2 steps before it hung: 12 step-metric panels and the GRPO panels.
    html = trl_page
    few = html[html.index('<details class="few-points" id="metrics-few">'):]
    assert few.index("<summary>12 metrics\n  logged at 2 steps or fewer, too few to show a trend: step_time_s, loss") == 45
    assert few.index("</summary>") < few.index('<img alt="metrics over steps, each logged at fewer than 5 steps"')
    assert '<img alt="metrics over steps" ' not in html  # nothing left unfolded
    rollouts = html[html.index('id="rollouts"'):]
    assert rollouts.index('<details class="few-points" id="rollouts-few">') < rollouts.index('<img alt="GRPO reward')
    # A run with 11 logged steps shows its loss as before, unfolded.
    steady = _page(write_hang_run(tmp_path / "steady", num_steps=10), tmp_path / "steady-out")
    assert '<img alt="metrics over steps" ' in steady and 'id="metrics-few"' not in steady


def test_the_timeline_marks_the_rank_the_others_wait_for(trl_page):
    # Both ranks are open in train-step/reward: rank 0 waits in gather, rank 1 in the reward function.
    html = trl_page
    alt = re.search(r'<img alt="(phases per rank[^"]*)"', html).group(1)
    assert "rank 1 (waited for): train-step (open" in alt and "rank 0: train-step (open" in alt
