import pandas as pd
import pytest

from grpo_doctor.analysis.column_frames import joined
from grpo_doctor.runlog.columns import compact, repeated

# Each case: one column's values on three ranks; mixes a rank file may hold, sane or not.
CASES = {
    "ints": [[1, 2], [3], [4, 5]],
    "floats": [[1.5, 2.0], [3.25], [float("nan")]],
    "floats and None": [[1.5, None], [None, None], [2.0]],
    "ints and floats": [[1, 2], [3.5], [4]],
    "ints and None": [[1, None], [2], [3]],
    "strings": [["rollout", "reward"], ["rollout"], ["backward"]],
    "strings and None": [["ValueError", None], [None], ["KeyError"]],
    "strings and floats": [["late", 1.0], [2.0, None], [3.0]],
    "all None": [[None, None], [None], [None]],
    "booleans and ints": [[True, False], [1], [2]],
    "beyond int64": [[2**63 + 1], [1], [2]],
    "beyond uint64": [[2**70], [1], [2]],
    "lists": [[[1], None], [[2, 3]], [None]],
    "empty parts": [[], [1.0], []],
}


@pytest.mark.parametrize("parts", CASES.values(), ids=CASES.keys())
def test_a_joined_column_is_the_column_pandas_makes_of_the_values(parts):
    expected = pd.DataFrame({"column": [v for part in parts for v in part]})
    got = pd.DataFrame({"column": joined([compact(part) for part in parts])})
    pd.testing.assert_frame_equal(got, expected)


@pytest.mark.parametrize("value", [3, "node-1", None, 2**64])
def test_a_repeated_value_is_the_column_of_that_value(value):
    expected = pd.DataFrame({"column": [value] * 3 + [value] * 2})
    got = pd.DataFrame({"column": joined([repeated(value, 3), repeated(value, 2)])})
    pd.testing.assert_frame_equal(got, expected)
