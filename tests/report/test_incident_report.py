"""The page and the terminal lead with the root cause: its consequences folded under it, the
culprit's stack and the phase timeline right below it, the timeline cut to the window that matters."""
import dataclasses
import re

import numpy as np
from hang_run import write_hang_run
from hostile import IMG, SCRIPT, write_hostile_run

from grpo_doctor.analysis.findings import Finding, FindingsFile
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.report.console import format_findings
from grpo_doctor.report.plots import phase_timeline
from grpo_doctor.report.render import render_html
from grpo_doctor.report.time_cut import find_cut

# Evidence keys as the hang rule writes them (analysis/rules/hang.py).
HANG = Finding(id="hang", severity="critical", title="rank 1 stayed in rollout at step 10 while rank 0 waited",
               ranks=(1,), hosts=("node-0",), step=10, phase="rollout",
               evidence={"culprit_stacks": {"1": ["sleep (time.py:1)", "reward_fn (train.py:88)", "rollout (train.py:120)"]},
                         "culprit_code": {"1": {"in_user_code": True, "where": "sleep (time.py:1)",
                                                "user_frame": "reward_fn (train.py:88)"}},
                         "waiting_calls": {"0": {"op": "all_gather", "site": "dist.py:75",
                                                 "op_frame": "all_gather (torch/distributed/distributed_c10d.py:4287)",
                                                 "caller": "all_gather_floats (dist.py:75)"}},
                         "stack_groups": ["rank 0: all_gather (distributed_c10d.py:4287)", "rank 1: reward_fn (train.py:88)"]},
               hints=("look at rank 1's own frames",), role="root-cause")
TIMEOUT = Finding(id="nccl-timeout", severity="critical", title="rank 0 timed out in all_reduce after 20 s",
                  ranks=(0,), step=10, phase="reward", role="consequence", caused_by=HANG.key)
SIGTERM = Finding(id="rank-crash", severity="warning", title="rank(s) 1 ended (signal SIGTERM) after another rank failed",
                  ranks=(1,), role="consequence", caused_by=HANG.key)
STRAGGLER = Finding(id="straggler", severity="warning", title="rank 3 is a straggler in rollout", ranks=(3,))


def _html(tmp_path, findings, warnings=()):
    run = write_hang_run(tmp_path)
    return render_html(load_evidence([run]), FindingsFile(run=[str(run)], findings=findings, warnings=list(warnings)))


def test_root_cause_leads_the_page_and_its_consequences_are_folded_under_it(tmp_path):
    # Given in the order a severity sort would give: the page still leads with the root cause.
    html = _html(tmp_path, [STRAGGLER, TIMEOUT, SIGTERM, HANG])
    ids = re.findall(r'data-finding-id="([^"]+)"', html)
    assert ids == ["hang", "nccl-timeout", "rank-crash", "straggler"]
    verdict = html[html.index('id="verdict"'):html.index('id="findings"')]
    assert "Root cause: rank 1 stayed in rollout" in verdict and "explains 2 other findings" in verdict
    incident = html[html.index('<section class="incident"'):html.index("</section>")]
    fold = incident[incident.index('<details class="consequences">'):]
    assert "<summary>2 consequences: rank 0 timed out in all_reduce after 20 s; rank(s) 1 ended" in fold
    assert 'data-finding-id="nccl-timeout"' in fold and 'data-finding-id="rank-crash"' in fold
    assert 'data-finding-id="hang"' not in fold
    assert 'data-finding-id="straggler"' not in incident  # stands alone, after the incident


def test_culprit_stack_sits_right_under_the_verdict_and_the_timeline_under_the_root_cause(tmp_path):
    html = _html(tmp_path, [HANG, TIMEOUT])
    culprit = html[html.index('id="culprit-stack"'):html.index('id="findings"')]
    assert html.index('id="verdict"') < html.index('id="culprit-stack"') < html.index('id="findings"')
    assert "rank 1, in user code: sleep (time.py:1): its own frames" in culprit
    assert "sleep (time.py:1)\nreward_fn (train.py:88)\nrollout (train.py:120)" in culprit
    assert "rank 0: all_gather (torch/distributed/distributed_c10d.py:4287) &lt;- all_gather_floats (dist.py:75)" in culprit
    assert "rank 1: reward_fn (train.py:88)" in culprit  # the stack groups too
    incident = html[html.index('<section class="incident"'):html.index("</section>")]
    assert 'class="culprit' not in incident  # shown once, under the verdict
    assert "culprit_stacks" not in incident  # shown as a stack, not again as raw evidence
    assert incident.index('id="timeline"') < incident.index('<details class="consequences">')
    assert "rank 1: rollout (open 60 s)" in incident  # the open phase, named in the image's alt text
    assert html.count("Phase timeline (last steps)") == 1  # not repeated further down


def test_a_rank_that_raised_shows_the_end_of_its_traceback_as_the_culprits_stack(tmp_path):
    crash = Finding(id="rank-crash", severity="critical", title="rank 0 crashed", ranks=(0,), role="root-cause")
    html = _html(tmp_path, [crash])
    culprit = html[html.index('id="culprit-stack"'):html.index('id="findings"')]
    assert "the end of its traceback" in culprit and "Timed out waiting 20000ms" in culprit


def test_hostile_text_in_titles_frames_and_summaries_stays_escaped(tmp_path):
    run, log = write_hostile_run(tmp_path)
    root = dataclasses.replace(HANG, title=f"hang {SCRIPT}", evidence={"culprit_stacks": {"1": [f"x.py:1 in {IMG}"]},
                                                                          "culprit_frames": [SCRIPT]})
    consequence = dataclasses.replace(TIMEOUT, title=f"timeout {IMG}", caused_by=root.key)
    html = render_html(load_evidence([run, log]), FindingsFile(run=[str(run)], findings=[root, consequence],
                                                               warnings=[SCRIPT]))
    assert SCRIPT not in html and IMG not in html
    assert "hang &lt;script&gt;" in html and "timeout &lt;img src=x" in html and "x.py:1 in &lt;img" in html
    assert len(re.findall(r"<script", html)) == 0


def test_findings_without_a_role_render_as_before(tmp_path):
    html = _html(tmp_path, [STRAGGLER])
    assert '<section class="incident"' not in html and "<details class=\"consequences\">" not in html
    assert 'data-finding-id="straggler"' in html and "Most severe: rank 3 is a straggler" in html
    assert html.count("Phase timeline (last steps)") == 1  # in its own section


def test_no_findings_says_what_was_read_and_what_was_not_checked(tmp_path):
    run = write_hang_run(tmp_path)
    ff = FindingsFile(run=[str(run)], findings=[], warnings=[], not_checked=["memory", "rollouts"],
                             inputs=[{"path": "empty.log", "recognised": [], "lines_read": 0, "rows_used": 0,
                                      "unmatched_lines": 0},
                                     {"path": str(run), "recognised": ["rank event logs"], "lines_read": 90,
                                      "rows_used": 88, "unmatched_lines": 2, "areas": ["crashes", "hangs"]}])
    html = render_html(load_evidence([run]), ff)
    assert "Healthy as far as" not in html and "sev-unknown" in html
    assert "empty.log: nothing recognised (0 lines read)" in html
    assert "rank event logs; 90 lines read, 88 records or metric rows used, 2 lines matched nothing" in html
    assert "Not checked</strong> (no evidence reached these areas): memory, rollouts" in html
    assert "Checked</strong>: crashes, hangs" in html and '<div class="coverage"' in html  # shown, not folded
    text = format_findings(ff)
    assert text.splitlines()[0] == "no findings: nothing known to go wrong was seen"
    assert "read: empty.log: nothing recognised (0 lines read)" in text
    assert "checked: crashes, hangs" in text
    assert "not checked (no evidence reached them): memory, rollouts" in text


def test_no_input_recognised_is_never_called_healthy():
    ff = FindingsFile(run=["noise.txt"], findings=[], warnings=[], not_checked=["hangs", "crashes"],
                             inputs=[{"path": "noise.txt", "recognised": None, "lines_read": 12}])
    lines = format_findings(ff).splitlines()
    assert lines[0] == "no findings: nothing in the input was recognised, so nothing could be checked"
    assert lines[1] == "read: noise.txt: nothing recognised (12 lines read)"


def test_terminal_puts_consequences_under_their_root_then_the_rest_then_warnings():
    text = format_findings(FindingsFile(run=[], findings=[STRAGGLER, TIMEOUT, HANG, SIGTERM], warnings=["clock skew"]))
    lines = text.splitlines()
    assert lines[0] == f"CRITICAL hang: {HANG.title} (root cause)"
    consequences = [line for line in lines if line.startswith("  <- ")]
    assert consequences == [f"  <- rank 0: nccl-timeout: {TIMEOUT.title} (consequence)",
                            f"  <- rank 1: rank-crash: {SIGTERM.title} (consequence)"]
    assert lines.index(consequences[-1]) < lines.index(f"WARNING  straggler: {STRAGGLER.title}")
    assert lines[-1] == "warning: clock skew"


def test_a_consequence_whose_root_is_missing_still_shows():
    orphan = dataclasses.replace(TIMEOUT, caused_by="hang@7")
    text = format_findings(FindingsFile(run=[], findings=[orphan], warnings=[]))
    assert text.startswith(f"CRITICAL nccl-timeout: {TIMEOUT.title}")


def test_timeline_of_a_hang_is_labelled_and_cut_to_the_last_steps(tmp_path):
    timeline = phase_timeline(load_evidence([write_hang_run(tmp_path, num_steps=10, open_s=60.0)]))
    assert "rank 1: rollout (open 60 s)" in timeline.labels and "rank 0: reward (60 s)" in timeline.labels
    assert timeline.cut is not None and timeline.cut.hidden_s > 55
    assert timeline.note.startswith("Cut: steps 0-6 are not drawn; 59 s in which no rank")


def test_timeline_of_steady_steps_is_not_cut():
    steps_s = np.arange(0.0, 12.0, 0.25)  # a phase boundary every quarter second, nothing long
    assert find_cut(steps_s, 12.0) is None
    assert find_cut(np.array([0.0, 0.5, 1.0, 1.5]), 40.0).at_end


def test_a_root_without_stacks_shows_the_stacks_its_consequence_captured(tmp_path):
    crash = Finding(id="rank-crash", severity="critical", title="rank(s) 1 crashed: log stops", ranks=(1,),
                    role="root-cause")
    hang = dataclasses.replace(HANG, role="consequence", caused_by=crash.key)
    html = _html(tmp_path, [crash, hang])
    culprit = html[html.index('id="culprit-stack"'):html.index('id="findings"')]
    assert "sleep (time.py:1)\nreward_fn (train.py:88)" in culprit
