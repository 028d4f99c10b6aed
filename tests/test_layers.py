"""The layers of docs/architecture.md, held: an import that runs up a floor, or a library a part may not
use, fails here naming the file, the line, the import and the rule it breaks.

Every import statement counts, inside functions too (the whole syntax tree is walked, nothing is
imported); `from __future__` and imports under `if TYPE_CHECKING:` are exempt (they never run).
Also: the package's top level holds only its face, its version and packages; pyproject.toml lists
every package (a subpackage left out would be missing from the wheel); no top-level `trainer` is
installed. Reading the ~200 files takes well under a second.

Typical use:
    .venv/bin/python -m pytest -q tests/test_layers.py
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "grpo_doctor"
TRAINER = REPO / "trainer"  # installs as grpo_doctor_trainer (pyproject.toml, package-dir)
PAGE = REPO / "docs" / "architecture.md"
OWN = ("grpo_doctor", "grpo_doctor_trainer")

# The parts and what each may import of grpo_doctor besides itself: the table in docs/architecture.md
# (test_the_page_names_the_same_layers keeps the two equal). "face" is grpo_doctor/__init__.py,
# the rank API that `import grpo_doctor` gives; "trainer" the reference trainer.
FLOOR_0 = {"schema", "_version"}
MAY_IMPORT: dict[str, set[str]] = {
    "_version": set(),
    "schema": set(),
    "logs": {"schema"},
    "checks": {"schema"},
    "host": {"schema"},
    "plan": {"schema", "host"},
    "rank": {"schema", "checks", "host"},
    "rank.integrations": {"schema", "checks", "host", "rank", "face"},
    "runlog": {"schema"},
    "supervisor": {"schema", "logs", "checks", "host", "runlog", "plan"},
    "probe": {"schema", "logs", "checks", "host"},
    "analysis": {"schema", "logs", "checks", "runlog", "plan"},
    # The rules stand above the rest of the analysis: incidents.py, remedies.py and the views never import
    # a rule (remedies.py once ran config-mismatch again to choose other rules' hints: an import loop).
    "analysis.rules": {"schema", "logs", "checks", "runlog", "plan", "analysis"},
    "report": {"schema", "logs", "checks", "runlog", "analysis", "analysis.rules", "plan"},
    "face": {"schema", "rank"},
    "trainer": {"face", "rank.integrations"},
}
EVERYTHING = "every part"
MAY_IMPORT_ALL = {"cli"}  # the commands tie the parts together (every part of grpo_doctor, not the trainer)

# Third-party libraries (any top-level name outside sys.stdlib_module_names and grpo_doctor).
ONLY_LIBRARIES: dict[str, set[str]] = {  # parts with an allow-list
    "_version": set(),
    "schema": set(),
    "logs": set(),
    "checks": {"numpy"},
    "host": {"pynvml"},
    "runlog": {"numpy", "orjson"},
    "plan": {"yaml"},
    "face": set(),
}
# The analysis stack stays out of the rank side (a training process imports it) and out of the parts
# that run beside training (watch, probe): DataFrames live only in analysis/ and report/.
LIBRARY_HOMES: dict[str, set[str]] = {
    "pandas": {"analysis", "analysis.rules", "report"},
    "matplotlib": {"report"},
    "jinja2": {"report"},
    "markupsafe": {"report"},
}
NEVER_LIBRARIES: dict[str, set[str]] = {"rank": {"rich"}, "rank.integrations": {"rich"}}
# Imported only inside a function, so that importing the part does not load them.
LAZY_LIBRARIES: dict[str, set[str]] = {"host": {"pynvml"}, "plan": {"yaml"}}

# Exceptions, each named in docs/architecture.md. OPTIONAL: an accelerator imported in a try with a
# stdlib fallback (the part still works with the stdlib alone). KNOWN: violations that are being
# removed; test_known_violations_are_still_there fails once one is gone, so the list only shrinks.
OPTIONAL = {("grpo_doctor/logs/chunk_keywords.py", "hyperscan"), ("grpo_doctor/checks/diversity.py", "rapidfuzz")}
KNOWN: dict[tuple[str, str], str] = {}  # (file, imported module or library): why, and what removes it


@dataclass(frozen=True)
class Import:
    line: int
    text: str  # the statement, as written (ast.unparse)
    target: str  # the module imported: grpo_doctor.x.y, or a library's dotted name
    in_function: bool


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "trainer":
        parts[0] = "grpo_doctor_trainer"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def part_of(module: str) -> str:
    """The layer a module of grpo_doctor (or of the trainer) belongs to."""
    names = module.split(".")
    if names[0] == "grpo_doctor_trainer":
        return "trainer"
    if len(names) == 1:
        return "face"
    if names[1:3] in (["rank", "integrations"], ["analysis", "rules"]):
        return ".".join(names[1:3])
    return names[1]


def _is_module(dotted: str) -> bool:
    """Whether grpo_doctor.a.b (or grpo_doctor_trainer.a) is a module or package on disk."""
    names = dotted.split(".")
    base = TRAINER if names[0] == "grpo_doctor_trainer" else PACKAGE
    path = base.joinpath(*names[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def imports_of(path: Path) -> list[Import]:
    """Every import statement of the file, functions included; TYPE_CHECKING blocks and __future__ left out."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                for orelse in child.orelse:
                    visit_one(orelse, in_function)
                continue
            visit_one(child, in_function)

    def visit_one(node: ast.AST, in_function: bool) -> None:
        text = ast.unparse(node) if isinstance(node, (ast.Import, ast.ImportFrom)) else ""
        if isinstance(node, ast.Import):
            found.extend(Import(node.lineno, text, alias.name, in_function) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source == "__future__":
                return
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                own_submodule = source.split(".")[0] in OWN and _is_module(sub)
                found.append(Import(node.lineno, text, sub if own_submodule else source, in_function))
        visit(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return found


def source_files() -> list[Path]:
    files = list(PACKAGE.rglob("*.py")) + list(TRAINER.rglob("*.py"))
    return sorted(p for p in files if "__pycache__" not in p.parts)


@cache
def violations_of(path: Path) -> tuple[tuple[str, str, str], ...]:
    """(file, import target, message) for each import of the file that breaks a rule."""
    rel = path.relative_to(REPO).as_posix()
    part = part_of(module_name(path))
    out = []
    for imp in imports_of(path):
        top = imp.target.split(".")[0]
        where = f"{rel}:{imp.line}: `{imp.text}`"
        if top in OWN:
            target_part = part_of(imp.target)
            if target_part == "trainer" and part != "trainer":
                out.append((rel, imp.target, f"{where} imports the reference trainer: grpo_doctor runs it as a child "
                                             "process (python -m grpo_doctor_trainer.train), never imports it, so "
                                             "its dependencies stay out (docs/architecture.md, Layers)"))
            elif target_part != part and part not in MAY_IMPORT_ALL and target_part not in _allowed(part):
                out.append((rel, imp.target, f"{where} imports {_label(target_part)} ({imp.target}): {_rule(part)}"))
            continue
        if top in sys.stdlib_module_names or (rel, top) in OPTIONAL:
            continue
        if part in ONLY_LIBRARIES and top not in ONLY_LIBRARIES[part]:
            allowed = ", ".join(sorted(ONLY_LIBRARIES[part]))
            out.append((rel, top, f"{where} imports the library {top}: {_label(part)} may use the stdlib"
                                  + (f" and {allowed} only" if allowed else " only") + " (docs/architecture.md, Layers)"))
        elif top in LIBRARY_HOMES and part not in LIBRARY_HOMES[top] | MAY_IMPORT_ALL:
            homes = " and ".join(_label(h) for h in sorted(LIBRARY_HOMES[top]))
            out.append((rel, top, f"{where} imports {top}, which only {homes} may import (docs/architecture.md, "
                                  "Layers): it must not load in a training process or beside it"))
        elif top in NEVER_LIBRARIES.get(part, ()):
            out.append((rel, top, f"{where} imports {top}: the rank side never does (docs/architecture.md, Layers)"))
        if top in LAZY_LIBRARIES.get(part, ()) and not imp.in_function:
            out.append((rel, top, f"{where} imports {top} at module level: {_label(part)} loads it lazily, inside "
                                  "the function that needs it (docs/architecture.md, Layers)"))
    return tuple(dict.fromkeys(out))  # one message for `from x import a, b`


def _label(part: str) -> str:
    return {"face": "grpo_doctor/__init__.py", "_version": "grpo_doctor/_version.py",
            "trainer": "the trainer (grpo_doctor_trainer)"}.get(part, f"{part.replace('.', '/')}/")


def _allowed(part: str) -> set[str]:
    """The parts `part` may import: its row, and floor 0 for every part of grpo_doctor (not the trainer,
    which uses only the public API)."""
    return MAY_IMPORT[part] | (FLOOR_0 if part != "trainer" else set())


def _rule(part: str) -> str:
    names = ", ".join(_label(p) for p in sorted(_allowed(part) - {part})) or "nothing of grpo_doctor"
    return f"{_label(part)} may import only {names} (imports point down the floors of docs/architecture.md)"


@pytest.mark.parametrize("path", source_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_imports_point_down_the_floors_and_use_only_the_libraries_of_their_part(path):
    part = part_of(module_name(path))
    assert part in MAY_IMPORT or part in MAY_IMPORT_ALL, (
        f"{path.relative_to(REPO)} is in {_label(part)}, a part docs/architecture.md does not name: add it to the "
        "layer table there and to MAY_IMPORT in tests/test_layers.py")
    broken = [message for rel, target, message in violations_of(path) if (rel, target) not in KNOWN]
    assert not broken, "\n".join(broken)


def test_known_violations_are_still_there():
    """A known violation fixed is taken off the list (here and in docs/architecture.md), so it cannot return."""
    seen = {(rel, target) for path in source_files() for rel, target, _ in violations_of(path)}
    gone = sorted(set(KNOWN) - seen)
    assert not gone, f"fixed, so remove from KNOWN in tests/test_layers.py and from docs/architecture.md: {gone}"


def test_the_page_names_the_same_layers():
    """The layer table of docs/architecture.md and MAY_IMPORT above say the same: per row, the parts
    (`name/` in the second column) and what they may import of grpo_doctor (`name/` in the third)."""
    rows: dict[str, set[str] | str] = {}
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| floor |")) + 2
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        imports = {_part_of_label(n) for n in re.findall(r"`([^`]+)`", cells[2])}
        for name in re.findall(r"`([^`]+)`", cells[1]):
            rows[_part_of_label(name)] = EVERYTHING if EVERYTHING in cells[2] else imports - FLOOR_0
    expected = {part: allowed - FLOOR_0 for part, allowed in MAY_IMPORT.items()}
    expected |= {part: EVERYTHING for part in MAY_IMPORT_ALL}
    differ = [f"{_label(part)}: the page says {_said(rows.get(part))}; the test says {_said(expected.get(part))}"
              for part in sorted(rows.keys() | expected.keys()) if rows.get(part) != expected.get(part)]
    assert not differ, "docs/architecture.md's layer table and MAY_IMPORT differ:\n" + "\n".join(differ)


def _said(allowed: set[str] | str | None) -> str:
    if allowed is None:
        return "no row"
    return allowed if isinstance(allowed, str) else ", ".join(_label(p) for p in sorted(allowed)) or "floor 0 only"


def _part_of_label(label: str) -> str:
    label = label.strip().rstrip("/")
    named = {"grpo_doctor/__init__.py": "face", "_version.py": "_version", "grpo_doctor_trainer": "trainer"}
    return named.get(label, label.replace("/", "."))


def test_the_package_top_level_holds_only_its_face_its_version_and_packages():
    strays = []
    for entry in sorted(PACKAGE.iterdir()):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            if not (entry / "__init__.py").is_file():
                strays.append(f"{entry.name}/ (a folder without __init__.py)")
        elif entry.name not in ("__init__.py", "_version.py"):
            strays.append(entry.name)
    assert not strays, (f"grpo_doctor/ holds {', '.join(strays)}: a module lives in the package of its layer "
                        "(docs/architecture.md), the top level only __init__.py, _version.py and packages")


def _setuptools_table() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    with (REPO / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def test_pyproject_lists_every_package_directory_so_the_wheel_holds_it():
    on_disk = {".".join(d.relative_to(REPO).parts) for d in [PACKAGE, *PACKAGE.rglob("*")]
               if d.is_dir() and "__pycache__" not in d.parts and any(d.glob("*.py"))}
    table = _setuptools_table()
    listed = set(table["packages"])
    missing, stale = sorted(on_disk - listed), sorted(p for p in listed - on_disk if p.startswith("grpo_doctor."))
    assert not missing, f"pyproject.toml [tool.setuptools] packages does not list {missing}: a wheel would lack them"
    assert not stale, f"pyproject.toml lists {stale}, which hold no module"
    assert "grpo_doctor_trainer" in listed and "trainer" not in listed
    assert table.get("package-dir", {}).get("grpo_doctor_trainer") == "trainer", "trainer/ installs as grpo_doctor_trainer"


def test_no_top_level_trainer_package_is_installed(tmp_path):
    """Outside the repository, `trainer` is the user's own name: only grpo_doctor_trainer is installed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import importlib.util as u; "
            "print(u.find_spec('trainer') is None, u.find_spec('grpo_doctor_trainer') is not None)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    no_trainer, has_ours = out.stdout.split()
    assert no_trainer == "True", "a top-level `trainer` package is importable: it collides with users' own"
    assert has_ours == "True", "grpo_doctor_trainer is not installed (pip install -e .)"
