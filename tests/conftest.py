"""GPU tests are skipped where CUDA is not available; a test that leaves watch's internal-error log
behind fails, so that a guard further in cannot hide an error the test's own guard should have met."""
from __future__ import annotations

import pytest
from helpers import has_cuda

WATCH_ERRORS = "watch-errors.log"


def pytest_configure(config):
    config.addinivalue_line("markers", "watch_errors: the test expects watch to log an internal error")


def pytest_collection_modifyitems(config, items):
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
