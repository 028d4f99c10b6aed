"""Arithmetic prompts with known answers, and how one step's batch is laid out over ranks.

Every rank builds the same global list of prompts from (seed, step), repeats each prompt
G times consecutively and keeps its own slice of B completions: rank r takes
[r*B, (r+1)*B). This is the layout TRL's RepeatSampler produces, so with B < G the copies of
one prompt are spread over several ranks (which is what makes a seed collision between
ranks visible as identical group members, case 2 of CASES.md).

Typical use:
    problems = make_problems(seed=0, step=3, num_prompts=2)       # [Problem("12+7=", "19"), ...]
    mine = rank_slice(problems, rank=1, per_device_batch=4, num_generations=4)
"""
from __future__ import annotations

import random
from dataclasses import dataclass

MAX_OPERAND = 20
OPERATORS = ("+", "-", "*")


@dataclass(frozen=True)
class Problem:
    prompt: str  # "12+7="
    answer: str  # "19"


def make_problem(rng: random.Random) -> Problem:
    op = rng.choice(OPERATORS)
    a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
    if op == "-" and b > a:
        a, b = b, a  # answers stay non-negative: digits only
    answer = {"+": a + b, "-": a - b, "*": a * b}[op]
    return Problem(prompt=f"{a}{op}{b}=", answer=str(answer))


def make_problems(seed: int, step: int, num_prompts: int) -> list[Problem]:
    """The step's unique prompts, the same on every rank (no communication needed)."""
    rng = random.Random(f"{seed}:{step}")
    return [make_problem(rng) for _ in range(num_prompts)]


def repeat_for_groups(items: list, num_generations: int) -> list:
    """[a, b] -> [a, a, a, a, b, b, b, b] for G = 4: a group's members are consecutive."""
    return [item for item in items for _ in range(num_generations)]


def rank_slice(items: list, rank: int, per_device_batch: int, num_generations: int) -> list:
    """This rank's B completions' worth of the repeated global list."""
    repeated = repeat_for_groups(items, num_generations)
    return repeated[rank * per_device_batch : (rank + 1) * per_device_batch]
