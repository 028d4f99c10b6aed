"""Read argument names out of real package sources without importing them: dataclass fields (as
HfArgumentParser turns them into options) followed through imports, and argparse `add_argument` calls, in a git
tag, a directory or a wheel. Used by tools/refresh_flag_names.py, which writes grpo_doctor/plan/flag_names/.

Typical use:
    snap = Snapshot.git(Path("/work/.mirror/modelscope+ms-swift/repo"), "v3.4.0")
    fields = dataclass_fields({"swift": snap, "transformers": Snapshot.wheel(whl)},
                              "swift.llm.argument.rlhf_args", "RLHFArguments")
    names = hf_names(fields)        # {"num_infer_workers", "vllm_device", ..., "no_<bool defaulting to True>"}
"""
from __future__ import annotations

import ast
import re
import subprocess
import zipfile
from pathlib import Path

# ---------------------------------------------------------------- reading a package snapshot's sources

class Snapshot:
    """Python sources of one package version: a git tag, a directory or a wheel, read by relative path."""

    def __init__(self, read):
        self._read, self._cache = read, {}

    @classmethod
    def git(cls, git_dir: Path, rev: str) -> Snapshot:
        def read(path):
            out = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{rev}:{path}"], capture_output=True)
            return out.stdout.decode() if out.returncode == 0 else None
        return cls(read)

    @classmethod
    def directory(cls, root: Path) -> Snapshot:
        return cls(lambda path: (root / path).read_text() if (root / path).is_file() else None)

    @classmethod
    def wheel(cls, whl: Path) -> Snapshot:
        names = set(zipfile.ZipFile(whl).namelist())
        return cls(lambda path: zipfile.ZipFile(whl).read(path).decode() if path in names else None)

    def module(self, dotted: str) -> ast.Module | None:
        if dotted not in self._cache:
            base = dotted.replace(".", "/")
            text = self._read(f"{base}.py") or self._read(f"{base}/__init__.py")
            self._cache[dotted] = ast.parse(text) if text is not None else None
        return self._cache[dotted]

    def text(self, path: str) -> str | None:
        return self._read(path)


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join(parts + ([node.module] if node.module else []))


def dataclass_fields(snaps: dict[str, Snapshot], module: str, name: str, seen=None) -> dict[str, bool]:
    """{field: becomes --no_<field> too} of a dataclass and its bases, followed through imports across the
    snapshots ({top-level package: Snapshot}); a base in a package without a snapshot is an error."""
    seen = set() if seen is None else seen
    if (module, name) in seen:
        return {}
    seen.add((module, name))
    snap = snaps.get(module.split(".")[0])
    tree = snap.module(module) if snap else None
    if tree is None:
        raise LookupError(f"no source for {module}.{name}")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            fields = {}
            for base in reversed(node.bases):  # the leftmost base wins, as in the MRO
                base_name = ast.unparse(base)
                if base_name in ("object", "Generic") or base_name.startswith("Generic["):
                    continue
                fields.update(_base_fields(snaps, module, tree, base_name, seen))
            fields.update(_own_fields(node))
            return fields
    # not defined here: follow `from X import name` (package __init__ files re-export, lazily or not)
    is_package = snap.text(module.replace(".", "/") + "/__init__.py") is not None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return dataclass_fields(snaps, _absolute(module, node, is_package), alias.name, seen)
    lazy = _lazy_import_structure(tree, name)
    if lazy:
        return dataclass_fields(snaps, f"{module}.{lazy}", name, seen)
    raise LookupError(f"{module} neither defines nor imports {name}")


def _base_fields(snaps, module, tree, base_name, seen):
    if "." in base_name:  # e.g. transformers.TrainingArguments
        head, _, attr = base_name.rpartition(".")
        return dataclass_fields(snaps, head, attr, seen)
    return dataclass_fields(snaps, module, base_name, seen)


def _lazy_import_structure(tree: ast.Module, name: str) -> str | None:
    """The submodule a transformers-style `_import_structure = {"sub": ["Name", ...]}` maps a name to."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, (ast.List, ast.Tuple)):
                    if any(isinstance(e, ast.Constant) and e.value == name for e in value.elts):
                        return key.value
    return None


def _own_fields(cls: ast.ClassDef) -> dict[str, bool]:
    """Fields HfArgumentParser makes options of: annotated class attributes, not ClassVar, not init=False."""
    out = {}
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        annotation = ast.unparse(stmt.annotation).replace(" ", "")
        if "ClassVar" in annotation or "InitVar" in annotation:
            continue
        default = stmt.value
        if isinstance(default, ast.Call) and ast.unparse(default.func) in ("field", "dataclasses.field"):
            kwargs = {kw.arg: kw.value for kw in default.keywords}
            if isinstance(kwargs.get("init"), ast.Constant) and kwargs["init"].value is False:
                continue
            default = kwargs.get("default")
        is_bool = annotation.strip("'\"") in ("bool", "Optional[bool]", "bool|None", "Union[bool,None]")
        out[stmt.target.id] = is_bool and isinstance(default, ast.Constant) and default.value is True
    return out


def hf_names(fields: dict[str, bool]) -> set[str]:
    """Option names HfArgumentParser derives from fields: each name, and no_<name> for a bool defaulting to True."""
    return set(fields) | {f"no_{name}" for name, negated in fields.items() if negated}


# ---------------------------------------------------------------- argparse sources read with ast

def argparse_options(source: str) -> tuple[set[str], set[str]]:
    """(every option string, those taking no value) of the add_argument calls in a file, with `for x in
    ("a", "b"):` loops unrolled so that f"--{x}.lr" gives --a.lr and --b.lr."""
    options, switches = set(), set()

    def visit(nodes, env):
        for node in nodes:
            if (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
                    and isinstance(node.iter, (ast.Tuple, ast.List))):
                for element in node.iter.elts:
                    visit(node.body, {**env, node.target.id: ast.literal_eval(element)})
                continue
            for call in _calls(node):
                if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
                    action = next((kw.value for kw in call.keywords if kw.arg == "action"), None)
                    no_value = isinstance(action, ast.Constant) and action.value in (
                        "store_true", "store_false", "store_const", "count", "help", "version")
                    for arg in call.args:
                        text = _string(arg, env)
                        if text.startswith("-"):
                            options.add(text)
                            if no_value:
                                switches.add(text)
            for child in ("body", "orelse", "finalbody", "handlers"):
                if isinstance(getattr(node, child, None), list):
                    visit(getattr(node, child), env)

    visit(ast.parse(source).body, {})
    return options, switches


def _calls(node):
    """Calls in a statement, not descending into nested blocks (visit() walks those with their loop bindings)."""
    if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return)):
        return [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return []


def _string(node, env) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(value.value)
            elif isinstance(value.value, ast.Name) and value.value.id in env:
                parts.append(str(env[value.value.id]))
            else:
                raise ValueError(f"cannot evaluate {ast.unparse(node)}")
        return "".join(parts)
    raise ValueError(f"option name is not a string: {ast.unparse(node)}")


def strip_dashes(options) -> set[str]:
    return {o.lstrip("-") for o in options}


# ---------------------------------------------------------------- git and downloads

def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=True).stdout


def release_tags(git_dir: Path, pattern: str) -> list[str]:
    """Tags like v1.2.3 / v1.2.3.post1 matching pattern, in version order."""
    tags = [t for t in git(git_dir, "tag").split() if re.fullmatch(pattern, t)]
    return sorted(tags, key=lambda t: [int(x) if x.isdigit() else -1 for x in re.findall(r"\d+|[a-z]+", t)])
