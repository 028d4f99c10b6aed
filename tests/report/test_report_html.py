import re

from hostile import IMG, SCRIPT, write_hostile_run

from grpo_doctor.cli.main import main


def _report(tmp_path, *extra):
    run, log = write_hostile_run(tmp_path)
    status = main(["report", str(run), str(log), *extra])
    return status, (run / "report.html").read_text()


def test_report_html_escapes_every_string_from_the_run(tmp_path, capsys):
    status, html = _report(tmp_path)
    assert status == 1  # a crash and a CUDA OOM are critical
    assert SCRIPT not in html and IMG not in html
    assert "&lt;script&gt;console.error(&#34;xss-script-ran&#34;)&lt;/script&gt;" in html
    assert len(re.findall(r"<script", html)) == 0  # the report itself needs no script at all


def test_report_is_self_contained_with_findings_first(tmp_path, capsys):
    _, html = _report(tmp_path)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched from the network
    assert html.count("data:image/png;base64,") >= 2  # timeline and metrics embedded
    first_finding = html.index('data-finding-id="')
    assert first_finding < html.index('id="ranks"') < html.index('id="environment"') < html.index('id="logs"')
    ids = re.findall(r'data-finding-id="([^"]+)"', html)
    assert ids[0] in ("rank-crash", "cuda-oom") and {"rank-crash", "cuda-oom"} <= set(ids)
    assert "NPROC_PER_NODE=N-1" in html  # case 4's remedy is on the page


def test_environment_rows_that_differ_between_hosts_are_highlighted_first(tmp_path, capsys):
    _, html = _report(tmp_path)
    table = html[html.index('id="environment"'):html.index('id="logs"')]
    rows = re.findall(r'<tr class="([^"]*)"><td>([^<]*)</td>', table)
    assert rows and all(cls == "" for cls, _ in rows)  # both hosts launched identically: nothing highlighted


def test_log_excerpt_shows_the_lines_around_the_signature(tmp_path, capsys):
    _, html = _report(tmp_path)
    logs = html[html.index('id="logs"'):]
    assert "cuda-oom" in logs and "sampled completion: &lt;script&gt;" in logs and 'class="hit"' in logs
