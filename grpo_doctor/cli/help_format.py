"""How every `grpo-doctor` command shows its help: the description and epilog as written (they
hold examples and exit-status tables), and each option's default after its help, as
"(default: 600.0)", unless the help already says what the default is.

A default of None, False or [] is not shown: for those the help says in words what happens
without the flag ("default: $GRPO_DOCTOR_RUN_DIR or ...").

Typical use:
    sub.add_parser("report", help=..., formatter_class=HelpFormatter)
"""
from __future__ import annotations

import argparse


def shows_default(action: argparse.Action) -> bool:
    """Whether the option has a default worth printing (not None / False / [] / suppressed)."""
    default = action.default
    return default not in (None, False, argparse.SUPPRESS) and default != [] and bool(action.option_strings)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if shows_default(action) and "default" not in text:
            text += " (default: %(default)s)"
        return text
