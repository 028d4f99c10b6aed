"""The ms-swift plugin file of the tests (`--external_plugins`): grpo-doctor's two lines, plus the
two rule rewards the test runs train with (ms-swift's own `accuracy` needs math_verify)."""
from swift.rewards import orms

from grpo_doctor.rank.integrations.swift import register


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
register()
