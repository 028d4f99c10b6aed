import re
from pathlib import Path

from helpers import write_rank
from hostile import IMG, SCRIPT, write_hostile_run

from grpo_doctor.cli.main import main
from grpo_doctor.schema import End, EndReason, Header, Step

DATA = Path(__file__).resolve().parents[1] / "data"


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
    # Two nodes launched alike but for their torch build and network interface (ranks 0 and 1 on node-a).
    run = tmp_path / "run"
    settings = {"node-a": ("2.13.0+cu128", "ib0"), "node-b": ("2.5.1+cu124", "eth0")}
    for rank, host in enumerate(("node-a", "node-a", "node-b", "node-b")):
        torch_version, ifname = settings[host]
        c = dict(rank=rank, host=host, pid=1000 + rank, mono=1.0, t=1.0)
        write_rank(run, rank, [
            Header(**c, step=None, local_rank=rank % 2, world_size=4, node_rank=rank // 2, local_world_size=2,
                   gpu_uuid=None, versions={"torch": torch_version, "trl": "0.19.1"},
                   launch={"NCCL_SOCKET_IFNAME": ifname, "NPROC_PER_NODE": "2"}, argv=["train.py"]),
            Step(**dict(c, mono=2.0, t=2.0), step=0, metrics={"loss": 0.5}),
            End(**dict(c, mono=3.0, t=3.0), step=1, reason=EndReason.EXIT)])
    main(["report", str(run)])
    html = (run / "report.html").read_text()
    start = html.index('id="environment"')
    table = html[start:html.index("</table>", start)]
    rows = re.findall(r'<tr class="([^"]*)"><td>([^<]*)</td>\s*((?:<td>[^<]*</td>)*)', table)
    highlighted = [key for cls, key, _ in rows if cls == "differs"]
    assert sorted(highlighted) == ["NCCL_SOCKET_IFNAME", "version: torch"], rows
    assert [key for _, key, _ in rows[:2]] == highlighted  # first in the table
    assert {key for cls, key, _ in rows if cls == ""} == {"NPROC_PER_NODE", "ranks on this host", "version: trl"}
    cells = dict((key, values) for _, key, values in rows)
    assert cells["version: torch"] == "<td>2.13.0+cu128</td><td>2.5.1+cu124</td>"  # one column per host


def test_log_excerpt_shows_the_lines_around_the_signature(tmp_path, capsys):
    _, html = _report(tmp_path)
    logs = html[html.index('id="logs"'):]
    assert "cuda-oom" in logs and "sampled completion: &lt;script&gt;" in logs and 'class="hit"' in logs


def test_a_time_no_figure_can_draw_leaves_the_page_its_findings_and_says_which_figure_is_missing(tmp_path, capsys):
    # tests/data/damaged_time: a phase end at t = 2**64 + 1 s; the timeline would need a canvas 2.5e19
    # pixels wide, and matplotlib's TypeError ended `report` in a traceback, with no page and no verdict.
    status = main(["report", str(DATA / "damaged_time" / "run"), "--out", str(tmp_path / "out")])
    assert status in (0, 1, 2)  # judged, whatever the verdict: no exception out of `report`
    html = (tmp_path / "out" / "report.html").read_text()
    assert "phase timeline not drawn: TypeError" in html and (tmp_path / "out" / "findings.json").is_file()
    assert html.count("data:image/png;base64,") >= 2  # the figures that could be drawn still are
