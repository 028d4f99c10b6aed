"""Rule-based reward for arithmetic completions: correctness plus a small format term.

A random tiny model is almost never right, so the format term is what gives early groups
some reward variance (and the policy a gradient): it pays for answering with digits only
and stopping with EOS.

Typical use:
    score_completion("19", ended_with_eos=True, answer="19")    # 1.1
    score_completion("1 9", ended_with_eos=False, answer="19")  # 0.0
"""
from __future__ import annotations

CORRECT_REWARD = 1.0
FORMAT_REWARD = 0.1


def is_well_formed(text: str, ended_with_eos: bool) -> bool:
    return ended_with_eos and text.isdigit()


def score_completion(text: str, ended_with_eos: bool, answer: str) -> float:
    """text: the completion decoded without special tokens."""
    reward = CORRECT_REWARD if text.strip() == answer else 0.0
    if is_well_formed(text, ended_with_eos):
        reward += FORMAT_REWARD
    return reward


def score_completions(texts: list[str], ended_with_eos: list[bool], answers: list[str],
                      constant: float | None = None) -> list[float]:
    """One reward per completion; `constant` (fault injection) replaces every reward."""
    if constant is not None:
        return [constant] * len(texts)
    return [score_completion(t, e, a) for t, e, a in zip(texts, ended_with_eos, answers, strict=True)]
