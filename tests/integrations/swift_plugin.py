"""The tests' own ms-swift plugin file (`--external_plugins`): the two rule rewards the test runs train
with (ms-swift's own `accuracy` needs math_verify). grpo-doctor comes in through the plugin file the
package ships, named beside this one (test_swift_run.py)."""
from swift.rewards import orms


class DigitShare:
    """The share of digits in the completion: varies between the copies of a prompt."""

    def __init__(self, args=None, **kwargs) -> None:
        pass

    def __call__(self, completions, **kwargs) -> list[float]:
        return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


class AlwaysOne(DigitShare):
    """The broken reward function of case 2: 1 for everything."""

    def __call__(self, completions, **kwargs) -> list[float]:
        return [1.0] * len(completions)


orms["digit_share"] = DigitShare
orms["always_one"] = AlwaysOne
