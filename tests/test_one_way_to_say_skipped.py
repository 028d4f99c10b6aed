"""The reading side says what it skipped, and why, one way: a line appended to the `warnings` list it was
handed (Evidence.warnings, RankLog.warnings, a reader's `warnings` argument), which reaches findings.json's
`warnings` and the report's page. Never a log record, a Python warning or a print, which `grpo-doctor report`
would lose or scatter over the terminal (docs/architecture.md, "Where to add")."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "grpo_doctor"
READING_SIDE = ("schema", "runlog", "logs", "analysis", "report")


def _other_ways(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"line {node.lineno}: imports {n}" for n in names if n.split(".")[0] == "logging"]
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func in ("print", "warn", "warnings.warn") or func.startswith(("sys.stderr", "sys.stdout")):
                found += [f"line {node.lineno}: {func}(...)"]
    return found


@pytest.mark.parametrize("part", READING_SIDE)
def test_the_reading_side_says_what_it_skipped_only_in_its_warnings(part):
    found = {str(p.relative_to(PACKAGE)): ways for p in sorted((PACKAGE / part).rglob("*.py"))
             if (ways := _other_ways(p))}
    assert found == {}, f"append to the `warnings` list instead: {found}"


def test_the_check_sees_each_other_way(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import logging\nimport sys, warnings\nwarnings.warn('w')\nprint('x')\nsys.stderr.write('y')\n")
    assert [w.split(": ")[1] for w in _other_ways(bad)] == [
        "imports logging", "warnings.warn(...)", "print(...)", "sys.stderr.write(...)"]
