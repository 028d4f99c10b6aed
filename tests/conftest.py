"""GPU tests are skipped where CUDA is not available."""
from __future__ import annotations

import pytest
from helpers import has_cuda


def pytest_collection_modifyitems(config, items):
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
