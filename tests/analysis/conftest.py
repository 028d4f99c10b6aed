"""The analysis tests reuse the trainer tests' real torchrun launcher (tests/trainer/conftest.py) for
end-to-end runs; it is loaded by path since `trainer` names the reference trainer package."""
import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "trainer_test_launch", Path(__file__).resolve().parents[1] / "trainer" / "conftest.py")
_launch_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _launch_module  # dataclasses look their module up
_spec.loader.exec_module(_launch_module)


@pytest.fixture(scope="session")
def launch_trainer():
    return _launch_module.launch
