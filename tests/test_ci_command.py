"""`.ci/run` runs exactly the README's test command: lint (ruff), the type check (mypy, configured in
pyproject.toml) and the whole suite, so what the README promises is what CI checks."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    part = text[text.index("Run the whole test suite:"):]
    return re.search(r"```bash\n(.*?)\n```", part, flags=re.S).group(1).strip()


def test_ci_runs_the_readme_test_command_and_it_lints_type_checks_and_tests_everything():
    command = readme_test_command()
    ci_lines = [line for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    assert ci_lines == [command]
    steps = command.split(" && ")
    assert ".venv/bin/ruff check ." in steps and ".venv/bin/mypy" in steps
    # The last two steps run every test (docs/testing.md): all but the `alone` ones in two workers, then those in
    # one process. No other marker or path narrows them (to the quick tier, say).
    pytest = ".venv/bin/python -m pytest -q -p no:cacheprovider"
    assert steps[-2:] == [f'{pytest} -n 2 --dist loadfile -m "not alone"', f"{pytest} -m alone"]


def test_the_alone_marker_is_declared_and_names_at_least_one_test():
    """A misspelt marker would select nothing in the second step and the first would still leave it out."""
    declared = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"alone:' in declared
    marking = re.compile(r"(?m)^(@pytest\.mark\.alone$|pytestmark = .*pytest\.mark\.alone\b)")
    marked = [p for p in (REPO / "tests").rglob("test_*.py") if marking.search(p.read_text(encoding="utf-8"))]
    assert len(marked) >= 1
