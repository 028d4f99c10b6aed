"""Every entry of tests/slow_tests.py names a test that exists: a renamed or moved test would
otherwise fall silently into the quick tier."""
from __future__ import annotations

from pathlib import Path

from slow_tests import SLOW_TESTS

REPO = Path(__file__).resolve().parents[1]


def test_every_slow_entry_names_an_existing_test_file_and_function():
    missing = []
    for entry in sorted(SLOW_TESTS):
        path, _, name = entry.partition("::")
        source = REPO / path
        if not source.is_file() or (name and f"def {name.split('::')[-1]}(" not in source.read_text()):
            missing.append(entry)
    assert not missing, f"tests/slow_tests.py names tests that do not exist: {missing}"
