"""GPU tests are skipped where CUDA is not available; a test that leaves watch's internal-error log
behind fails, so that a guard further in cannot hide an error the test's own guard should have met;
the slow tests get the `slow` marker here (slow_tests.py), so that `pytest -m "not slow"` is the
quick tier of docs/testing.md."""
from __future__ import annotations

import pytest
from helpers import has_cuda
from slow_tests import SLOW_FIXTURES, SLOW_MARKERS, SLOW_TESTS

WATCH_ERRORS = "watch-errors.log"


def pytest_configure(config):
    config.addinivalue_line("markers", "watch_errors: the test expects watch to log an internal error")


def pytest_collection_modifyitems(config, items):
    mark_slow(items)
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def mark_slow(items) -> None:
    """`slow` on what the quick tier (`pytest -m "not slow"`, README "Tests") leaves out: every test
    marked distributed, browser or gpu, every test using a fixture that starts a real run, and the
    tests of slow_tests.SLOW_TESTS (over about a second each on the 2-core machine, from --durations)."""
    for item in items:
        if "slow" in item.keywords:
            continue
        name = item.nodeid.split("[")[0]
        if (SLOW_MARKERS & item.keywords.keys() or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
                or name in SLOW_TESTS or name.split("::")[0] in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def no_watch_internal_errors(request):
    """watch survives its own exceptions (one line, details in watch-errors.log) and the job goes on:
    a test that only looks at the job would pass whatever went wrong inside watch."""
    if "tmp_path" not in request.fixturenames or request.node.get_closest_marker("watch_errors"):
        yield
        return
    tmp_path = request.getfixturevalue("tmp_path")
    yield
    logs = sorted(tmp_path.rglob(WATCH_ERRORS))
    if logs:
        pytest.fail(f"watch logged internal errors in {logs[0]}:\n{logs[0].read_text(errors='replace')[-3000:]}")
