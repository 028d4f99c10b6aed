import pytest
from browser import load_page, screenshot
from hostile import write_hostile_run

from grpo_doctor.cli.main import main

pytestmark = pytest.mark.browser


def test_report_loads_in_chromium_without_console_errors_and_shows_the_findings(tmp_path, capsys):
    run, log = write_hostile_run(tmp_path)
    main(["report", str(run), str(log)])
    page = load_page(run / "report.html")
    assert page.console_messages == ()  # no script ran, no CSP violation, nothing failed to load
    assert 'data-finding-id="rank-crash"' in page.dom and 'data-finding-id="cuda-oom"' in page.dom
    assert "completion was &lt;script&gt;" in page.dom  # the payload is text on the page
    png = screenshot(run / "report.html", tmp_path / "report.png", height=1200)
    assert png.stat().st_size > 20_000  # a rendered page, not a blank one


def test_the_console_check_sees_a_script_that_runs(tmp_path):
    page = tmp_path / "unsafe.html"
    page.write_text('<html><body><script>console.error("xss-script-ran")</script></body></html>')
    assert any("xss-script-ran" in m for m in load_page(page).console_messages)


def test_an_incident_opens_with_its_root_cause_and_its_consequences_folded(tmp_path):
    from hang_run import write_hang_run
    from test_incident_report import HANG, SIGTERM, TIMEOUT

    from grpo_doctor.analysis.findings import FindingsFile
    from grpo_doctor.analysis.load import load_evidence
    from grpo_doctor.report.render import render_report

    run = write_hang_run(tmp_path)
    page_path = render_report(load_evidence([run]), FindingsFile(run=[str(run)], findings=[TIMEOUT, SIGTERM, HANG],
                                                                 warnings=[]), tmp_path / "report.html")
    page = load_page(page_path)
    assert page.console_messages == ()
    dom = page.dom
    assert dom.index('id="verdict"') < dom.index('id="culprit-stack"') < dom.index('data-finding-id="hang"')
    assert dom.index('data-finding-id="hang"') < dom.index('id="timeline"')
    fold = dom[dom.index('<details class="consequences">'):]
    assert fold.index("<summary>2 consequences:") < fold.index('data-finding-id="nccl-timeout"')  # folded: closed
    png = screenshot(page_path, tmp_path / "incident.png", height=1400)
    assert png.stat().st_size > 20_000


def test_the_culprits_stack_is_on_the_first_screen_at_1280_px(tmp_path):
    # A real TRL GRPOTrainer job whose reward function hung on rank 1 (tests/data/trl_reward_hang/). Its page
    # once put the readable stack 3,854 px down a 5,436 px page, below 21 metric panels of 2 points each.
    # Chromium lays the page out at 1280 x 900; a test-only copy of the page with one script appended (the
    # report has none, and forbids one) writes where the first <pre> holding the frame begins (page_position.py).
    from pathlib import Path

    from page_position import element_top

    from grpo_doctor.report.build import build_report

    run = Path(__file__).resolve().parents[1] / "data" / "trl_reward_hang" / "run"
    page = build_report([run], out_dir=tmp_path / "out").html_path
    top, height = element_top(page, "GRPOTrainer._calculate_rewards (trl/trainer/grpo_trainer.py:1626)", tmp_path,
                              width=1280, height=900)
    assert 0 < top < 900 - 300, (top, height)  # the stack and its first dozen frames on the first screen
    assert load_page(page).console_messages == ()  # the page itself still runs nothing
