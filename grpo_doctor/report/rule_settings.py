"""Rule thresholds set by the user: `RULE_ID.FIELD=VALUE` settings and a TOML file, turned into Configs.

A setting names a finding id and a field of that rule's `Config` (docs/findings.md lists them all);
its value is converted to the field's type. The file holds one table per rule id. Settings given
on the command line win over the file's. Every mistake is a RuleSettingsError naming the setting
and the valid choices, so `grpo-doctor report` can print it as one line and a hint.

Typical use:
    configs = rule_configs(["dead-step.min_consecutive_steps=3"], Path("thresholds.toml"))
    findings, warnings = run_rules(evidence, configs=configs)
    # thresholds.toml:
    #   [seed-collision]
    #   min_identical_frac = 0.6
"""
from __future__ import annotations

import dataclasses
import errno
import math
import sys
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from grpo_doctor.analysis.rules import RULES
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.safe_read import UnreadableFile, read_bytes

STR_TUPLE = tuple[str, ...]
KINDS = {bool: "true or false", int: "an integer", float: "a finite number", str: "text",
         STR_TUPLE: "a comma-separated list (in TOML: a list of strings)"}
BOOL_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
EXAMPLE = "seed-collision.min_identical_frac=0.6"
TOML_EXAMPLE = "one table per rule id: [seed-collision] then min_identical_frac = 0.6 on the next line"


class RuleSettingsError(DoctorError, ValueError):
    """A setting or settings file that cannot be used; carries a hint for the user."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def rule_configs(settings: Iterable[str] = (), config_file: Path | None = None,
                 rules: list[ModuleType] | None = None) -> dict[str, Any]:
    """{rule id: its Config with the changes} for every rule a setting names; the file's settings
    first, then `settings` (`RULE_ID.FIELD=VALUE`), so a setting given here wins."""
    by_id = {rule.ID: rule for rule in (RULES if rules is None else rules)}
    changes: dict[str, dict[str, Any]] = {}
    if config_file is not None:
        for rule_id, table in _read_toml(config_file).items():
            where = f"{config_file} [{rule_id}]"
            if not isinstance(table, dict):
                raise RuleSettingsError(f"{config_file}: {rule_id} = {table!r} is not inside a rule table",
                                        f"write {TOML_EXAMPLE}")
            for name, value in table.items():
                _set(changes, by_id, rule_id, name, value, where, _from_toml)
    for text in settings:
        key, equals, value = text.partition("=")
        rule_id, dot, name = key.strip().partition(".")
        if not (equals and dot and rule_id and name):
            raise RuleSettingsError(f"--set {text!r} is not RULE_ID.FIELD=VALUE", f"e.g. --set {EXAMPLE}")
        _set(changes, by_id, rule_id.strip(), name.strip(), value.strip(), f"--set {text}", _from_text)
    return {rule_id: dataclasses.replace(by_id[rule_id].Config(), **fields) for rule_id, fields in changes.items()}


def changed_settings(configs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{rule id: {field: value}} of the values that differ from the rule's defaults (for findings.json)."""
    out = {}
    for rule_id, cfg in configs.items():
        default = type(cfg)()
        changed = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
                   if getattr(cfg, f.name) != getattr(default, f.name)}
        if changed:
            out[rule_id] = changed
    return out


def field_types(rule: ModuleType) -> dict[str, Any]:
    """{field: type} of a rule's Config; the annotations are strings (postponed), so they are resolved."""
    hints = typing.get_type_hints(rule.Config)
    return {f.name: hints[f.name] for f in dataclasses.fields(rule.Config)}


def _set(changes: dict, by_id: dict[str, ModuleType], rule_id: str, name: str, value: Any, where: str,
         convert: Callable[[Any, Any], Any]) -> None:
    rule = by_id.get(rule_id)
    if rule is None:
        raise RuleSettingsError(f"{where}: no rule {rule_id!r}", f"rule ids: {', '.join(sorted(by_id))}")
    types = field_types(rule)
    if name not in types:
        valid = f"its fields: {', '.join(types)}" if types else f"{rule_id} has no thresholds to set"
        raise RuleSettingsError(f"{where}: rule {rule_id} has no field {name!r}", valid)
    kind = types[name]
    try:
        converted = convert(value, kind)
    except ValueError:
        default = getattr(rule.Config(), name)
        raise RuleSettingsError(f"{where}: {rule_id}.{name} must be {KINDS[kind]}, not {value!r}",
                                f"its default is {_as_text(default)}") from None
    changes.setdefault(rule_id, {})[name] = converted


def _from_text(text: str, kind: Any) -> Any:
    if kind is bool:
        if text.lower() not in BOOL_WORDS:
            raise ValueError(text)
        return BOOL_WORDS[text.lower()]
    if kind == STR_TUPLE:
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return _finite(kind(text))  # int, float, str: their constructors reject what is not one


def _from_toml(value: Any, kind: Any) -> Any:
    """TOML's own types, checked: a bool is no number here, although Python counts it as an int,
    and a quoted "0.5" is text, not a number."""
    if kind is str and isinstance(value, str):
        return value
    if kind is bool and isinstance(value, bool):
        return value
    if kind in (int, float) and isinstance(value, int) and not isinstance(value, bool):
        return kind(value)
    if kind is float and isinstance(value, float):
        return _finite(value)
    if kind == STR_TUPLE and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(value)


def _finite(value: Any) -> Any:
    """nan would switch a threshold off without a word (every comparison with it is false)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(value)
    return value


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(value) or "(empty)"
    return str(value)


MAX_RULES_CONFIG_BYTES = 2**20  # a table per rule and a few thresholds each: a few KB


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the same parser, installed for 3.10 (pyproject.toml)
        import tomli as tomllib
    try:  # a device, a FIFO or a file past the cap is refused without being read (schema/safe_read.py)
        data = read_bytes(path, cap=MAX_RULES_CONFIG_BYTES, what="a rules config")
    except UnreadableFile as exc:
        if exc.errno == errno.ENOENT:
            raise RuleSettingsError(f"--rules-config {path} does not exist",
                                    f"give the path of a TOML file with {TOML_EXAMPLE}") from None
        raise RuleSettingsError(f"--rules-config {path} cannot be read ({exc.why})",
                                f"give the path of a TOML file with {TOML_EXAMPLE}") from None
    try:
        return tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RuleSettingsError(f"{path} is not valid TOML ({exc})", f"write {TOML_EXAMPLE}") from None
    except RecursionError:  # arrays nested a thousand deep
        raise RuleSettingsError(f"{path} is not valid TOML (nested too deeply)", f"write {TOML_EXAMPLE}") from None
