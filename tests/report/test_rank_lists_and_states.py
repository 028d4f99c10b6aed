"""One way to write a rank list to a person ("0-1", never "[0, 1]") and one way to say where each
rank is or how it ended, the same in the report's Ranks table, `grpo-doctor summary` and watch's
last lines. findings.json keeps its lists."""
import json
import re

from hang_run import write_hang_run

from grpo_doctor.analysis.findings import Finding, FindingsFile
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.cli.summary import summarise
from grpo_doctor.report.console import format_findings
from grpo_doctor.report.render import render_html
from grpo_doctor.report.sections import rank_rows
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.runlog.parallel_read import read_run
from grpo_doctor.runlog.rank_states import RankState, rank_states
from grpo_doctor.schema.watch_files import WatchedRank, WatchSummary
from grpo_doctor.supervisor.summary import summary_lines

# Evidence keys as the rules write them: hang.py (culprits, stuck_ranks), seed_collision.py (rank_sets).
SEED = Finding(id="seed-collision", severity="critical", title="ranks 0-1 share a sampling seed", ranks=(0, 1),
               evidence={"rank_sets": [[0, 1], [2, 3]], "culprits": [1], "stuck_ranks": [0, 1], "odd_ranks": [],
                         "prompt_ids": [0, 1]}, hints=("seed each rank differently",))


def test_rank_lists_read_0_1_on_the_terminal_and_the_page_and_stay_lists_in_json(tmp_path):
    findings = FindingsFile(run=["run"], findings=[SEED], warnings=[])
    assert "\n         ranks 0-1\n" in format_findings(findings) and "[0, 1]" not in format_findings(findings)
    html = render_html(load_evidence([write_hang_run(tmp_path)]), findings)
    evidence = dict(re.findall(r"<tr><td>([^<]+)</td><td>([^<]*)</td></tr>", html))
    assert evidence["rank_sets"] == "0-1; 2-3" and evidence["culprits"] == "1" and evidence["stuck_ranks"] == "0-1"
    assert evidence["odd_ranks"] == "none" and evidence["prompt_ids"] == "[0, 1]"  # not ranks: left as JSON
    assert json.loads(findings.to_json())["findings"][0]["evidence"]["rank_sets"] == [[0, 1], [2, 3]]


def test_a_hung_and_a_crashed_rank_are_described_alike_by_summary_report_and_watch(tmp_path):
    run = write_hang_run(tmp_path)
    states = rank_states(load_run([run]))
    assert [s.line() for s in states] == [
        # Ten steps (0-9) done, both stopped in step 10: the step the verdict names too.
        "rank 0: exception; last phase -, step 10; RuntimeError in reward",  # reward had ended: the error ended it
        "rank 1: no end record; last phase rollout, step 10",
    ]
    # grpo-doctor summary
    rows = summarise(read_run([run]), now=0.0)
    assert [(r["state"], r["open_phase"], r["step"], r["last_step"], r["error"]) for r in rows] == [
        ("exception", None, 10, 9, "RuntimeError in reward"), ("no end record", "rollout", 10, 9, None)]
    # the report's Ranks table
    table = rank_rows(load_evidence([run]))
    assert [(r["end"], r["open_path"], r["last_step"], r["odd"]) for r in table] == [
        ("exception", "", 10, True), ("no end record", "rollout", 10, True)]
    assert table[0]["error"].startswith("RuntimeError in reward: [../third_party/gloo")
    # watch's last lines, from what the supervisor saw of the same ranks
    watched = WatchSummary(host="node-0", command_result="exit status 1", ranks={
        s.rank: WatchedRank(step=s.step, open_phase=s.open_phase, ended=s.ended, error=s.error) for s in states})
    assert [line.strip() for line in summary_lines(watched)[1:3]] == [s.line() for s in states]


def test_a_rank_that_ended_cleanly_shows_the_last_step_it_finished_not_the_next():
    # 8 steps (1-8, as TRL counts them): the end record carries step 9, the step that never began.
    clean = RankState(rank=0, last_step=8, step=9, ended="exit")
    stopped = RankState(rank=1, last_step=2, step=3, ended="signal", signal="SIGTERM", open_phase="reward")
    assert clean.shown_step == 8 and stopped.shown_step == 3
    assert "step 3" in stopped.line() and "step" not in RankState(rank=2, ended="signal").line()
