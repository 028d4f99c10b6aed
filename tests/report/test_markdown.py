"""`grpo-doctor report --format md`: Markdown that a GitHub-flavoured parser reads as the verdict,
the root cause, its evidence, the culprit's stack in a fenced block and the remedies; run data stays
text (no HTML token, no cell split, no fence closed early); the whole stays under GitHub's limit."""
from pathlib import Path

from hang_run import write_hang_run
from hostile import IMG, SCRIPT, write_hostile_run
from markdown_it import MarkdownIt
from test_incident_report import HANG, SIGTERM, STRAGGLER, TIMEOUT

from grpo_doctor.analysis.findings import Finding, FindingsFile
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.cli.main import main
from grpo_doctor.report.markdown import GITHUB_COMMENT_MAX_CHARS, MAX_CHARS, render_markdown

DATA = Path(__file__).parents[1] / "data"
# GitHub's dialect as markdown-it-py has it ("gfm-like" without linkify, which needs another
# package); raw HTML on, so that any HTML reaching the output shows up as an html_* token.
GFM = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
TICKS = "`" * 5


def tokens(md: str) -> list:
    out = []
    for token in GFM.parse(md):
        out.append(token)
        out += token.children or []
    return out


def headings(md: str) -> list[str]:
    toks = GFM.parse(md)
    return [toks[i + 1].content for i, t in enumerate(toks) if t.type == "heading_open"]


def assert_no_html(md: str) -> None:
    assert [t.content for t in tokens(md) if t.type in ("html_block", "html_inline")] == []


def test_a_hang_run_renders_its_verdict_evidence_culprit_stack_and_remedies():
    run = DATA / "inject" / "watch_hang"
    ev = load_evidence([run])
    findings, warnings = run_rules(ev)
    md = render_markdown(ev, FindingsFile(run=[str(run)], findings=findings, warnings=warnings))
    assert headings(md)[:2] == ["grpo-doctor report", "Critical: `hang`"]
    stack = next(t for t in GFM.parse(md) if t.type == "fence")
    assert stack.info == "text" and stack.content.startswith("_block_forever (inject.py:201)\nInjector.at")
    order = [md.index(x) for x in ("**Verdict: 1 critical", "**Evidence**", "**Culprit's stack**", "**What to change**")]
    assert order == sorted(order)
    assert "Ranks" in headings(md)
    assert_no_html(md)


def test_a_root_cause_comes_with_its_consequences_and_the_rest_after_it(tmp_path):
    run = write_hang_run(tmp_path)
    md = render_markdown(load_evidence([run]), FindingsFile(run=[str(run)], findings=[STRAGGLER, TIMEOUT, SIGTERM, HANG],
                                                           warnings=["rank files read by window"]))
    assert headings(md)[:3] == ["grpo-doctor report", "Root cause: `hang` (critical)", "Warning: `straggler`"]
    assert "Root cause (`hang`): rank 1 stayed in rollout at step 10 while rank 0 waited (explains 2 other findings)" in md
    root = md[md.index("### Root cause"):md.index("### Warning")]
    assert "- rank 0: `nccl-timeout` (critical): rank 0 timed out in all\\_reduce after 20 s" in root
    stack = [t.content for t in GFM.parse(root) if t.type == "fence"]
    assert stack[0] == "sleep (time.py:1)\nreward_fn (train.py:88)\nrollout (train.py:120)\n"
    assert "rank 0: all_gather (torch/distributed/distributed_c10d.py:4287) <- all_gather_floats (dist.py:75)\n" in stack
    assert "Notes on the evidence" in headings(md)


def test_an_oom_log_renders_on_stdout_or_to_the_file_out_names(tmp_path, capsys):
    log = str(DATA / "inject" / "oom_console.log")
    status = main(["report", log, "--out", str(tmp_path), "--format", "md"])
    captured = capsys.readouterr()
    md = captured.out
    assert status == 1 and (tmp_path / "report.html").exists() and "report:" in captured.err
    assert headings(md)[1] == "Root cause: `host-oom` (critical)"
    excerpts = md[md.index("### Log excerpts"):]
    assert any(t.type == "fence" and "MemoryError" in t.content for t in GFM.parse(excerpts))
    assert_no_html(md)
    out = tmp_path / "share" / "oom.md"
    assert main(["report", log, "--out", str(out)]) == 1
    assert out.read_text() == md and (out.parent / "findings.json").exists()
    assert "CRITICAL host-oom" in capsys.readouterr().out  # stdout keeps the terminal verdict


def test_run_data_stays_text_backticks_html_and_pipes_included(tmp_path):
    run, log = write_hostile_run(tmp_path)
    hostile = f"{TICKS} x | y {SCRIPT} {IMG} [link](javascript:alert(1)) ~~gone~~ *bold*"
    finding = Finding(id="hang", severity="critical", title=f"hang in {hostile}", ranks=(1,), hosts=(f"node|{IMG}",),
                      phase=f"roll`out{SCRIPT}", step=3, role="root-cause",
                      evidence={"culprit_stacks": {"1": [f"{TICKS}", f"{SCRIPT} (x.py:1)", "a | b"]},
                                "note": hostile, f"key|{SCRIPT}": "v|w"},
                      hints=(f"look at `{hostile}` and {hostile}",))
    ev = load_evidence([run, log])
    md = render_markdown(ev, FindingsFile(run=[str(run), str(log)], findings=[finding], warnings=[hostile]))
    assert_no_html(md)
    toks = tokens(md)
    assert not any(t.type in ("link_open", "image", "s_open", "strong_open") and not _ours(t, toks) for t in toks)
    fence = next(t for t in GFM.parse(md) if t.type == "fence")
    assert fence.content == f"{TICKS}\n{SCRIPT} (x.py:1)\na | b\n"  # the fence outlasts the backtick run
    rows = _table_rows(md, "evidence")
    assert [f"key|{SCRIPT}", "v|w"] in rows and all(len(r) == 2 for r in rows)  # a pipe never splits a cell
    text = "".join(t.content for t in toks if t.type in ("text", "code_inline"))
    assert SCRIPT in text and IMG in text  # shown as the text it is


def test_a_run_too_big_for_one_comment_is_shortened_lowest_parts_first_and_says_so(tmp_path):
    run = write_hang_run(tmp_path)
    many = [Finding(id="straggler", severity="warning", title=f"rank {r} is a straggler in rollout `x`",
                    ranks=(r,), evidence={"step_times_s": list(range(300)), "detail": "y" * 500},
                    hints=("check its GPU " * 20,)) for r in range(400)]
    md = render_markdown(load_evidence([run]), FindingsFile(run=[str(run)], findings=[HANG, TIMEOUT, *many],
                                                           warnings=["w " * 400] * 50))
    assert len(md) <= MAX_CHARS < GITHUB_COMMENT_MAX_CHARS
    assert "Shortened to stay under GitHub's 65,536-character comment limit" in md
    assert md.index("Shortened") < md.index("### Root cause")  # said under the verdict
    assert "**Culprit's stack**" in md and "**What to change**" in md  # the lead incident is whole
    assert "findings" in md[md.index("Left out:"):].split("\n")[0]  # some standalone findings went
    assert_no_html(md)


def test_json_and_md_on_stdout_at_once_is_refused(tmp_path, capsys):
    status = main(["report", str(DATA / "inject" / "oom_console.log"), "--json", "--format", "md",
                   "--out", str(tmp_path)])
    assert status == 2 and "--json and --format md" in capsys.readouterr().err


def _ours(token, toks) -> bool:
    """Bold we write ourselves: the labels ("**Evidence**"), never run data."""
    if token.type != "strong_open":
        return False
    i = toks.index(token)
    return toks[i + 1].content in ("Evidence", "What to change", "Culprit's stack", "Consequences") or \
        toks[i + 1].content.startswith(("Verdict:", "Shortened"))


def _table_rows(md: str, first_header: str) -> list[list[str]]:
    toks = GFM.parse(md)
    rows, row, inside = [], None, False
    for i, t in enumerate(toks):
        if t.type == "table_open":
            inside = toks[i + 3].type == "th_open" and toks[i + 4].content == first_header
        elif t.type == "tr_open" and inside:
            row = []
        elif t.type == "inline" and inside and row is not None:
            row.append("".join(c.content for c in t.children))
        elif t.type == "tr_close" and inside:
            rows.append(row)
            row = None
    return rows[1:]  # without the header row
