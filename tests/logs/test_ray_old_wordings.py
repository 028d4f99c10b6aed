"""Ray workers' deaths in old Ray's words (real lines: ray-project/ray threads, in the corpus's ray/ cases)."""
from grpo_doctor.logs.kinds import WORKER_DIED
from grpo_doctor.logs.signatures import scan_text


def kinds(line: str) -> list[str]:
    return [s.kind for s in scan_text(line + "\n")]


def test_an_old_ray_get_error_of_a_worker_that_died_is_a_worker_death():
    assert WORKER_DIED in kinds("Invalid return value: likely worker died or was killed while executing the task.")


def test_a_worker_that_raised_because_its_raylet_went_away_is_a_worker_death_but_the_words_alone_are_not():
    assert WORKER_DIED in kinds("(pid=16490) Exception: [RayletClient] Raylet connection closed.")
    assert WORKER_DIED not in kinds("INFO worker.py:1123 -- Raylet connection closed, shutting down.")
