"""`--on-hang kill` ends a job only when a rank is stuck: a stall whose stacks move between the two looks
(an unmarked evaluation, a slow step) or a stuck rank writing a checkpoint is said, and the job runs on."""
import subprocess
import sys

from helpers import clean_env

from grpo_doctor.schema.stacks import Frame, ThreadStack
from grpo_doctor.schema.watch_files import HangRank, HangReport
from grpo_doctor.supervisor.kill_gate import reason_to_spare


def _report(verdicts: dict[int, str], frames: dict[int, list[Frame]] | None = None) -> HangReport:
    stacks = {r: ThreadStack(thread_id=r, name="MainThread", active=False, frames=tuple(f))
              for r, f in (frames or {}).items()}
    return HangReport(host="h", ranks={r: HangRank(verdict=v) for r, v in verdicts.items()}, stacks=stacks)


def test_a_stuck_rank_in_user_code_may_end_the_job():
    frames = {1: [Frame("sleep", "<built-in>", 0), Frame("reward", "train.py", 39)]}
    assert reason_to_spare(_report({0: "stuck", 1: "stuck"}, frames)) is None


def test_no_stack_at_all_leaves_the_records_verdict_standing():
    assert reason_to_spare(_report({0: "unknown", 1: "unknown"})) is None


def test_every_rank_moving_spares_the_job():
    assert "slow, not stuck" in reason_to_spare(_report({0: "moving", 1: "moving"}))


def test_a_stuck_rank_writing_a_checkpoint_spares_the_job():
    frames = {0: [Frame("_write", "torch/serialization.py", 650), Frame("save", "torch/serialization.py", 620),
                  Frame("_save_checkpoint", "transformers/trainer.py", 3100)]}
    assert "checkpoint" in reason_to_spare(_report({0: "stuck", 1: "stuck"}, frames))


# Three quick steps, then 15 s outside any phase going deeper every 0.2 s (an unmarked evaluation whose
# stack keeps changing), then a last step and a clean exit.
JOB = """
import sys, time
import grpo_doctor as gd
gd.init()
for n in range(3):
    with gd.phase("rollout"):
        time.sleep(0.05)
    gd.step(n, loss=0.5)
end = time.monotonic() + 15
def deeper(depth):
    time.sleep(0.2)
    if time.monotonic() < end:
        deeper(depth + 1)
deeper(0)
gd.step(3, loss=0.5)
print("evaluation done", flush=True)
"""


def test_a_stall_whose_stacks_keep_moving_is_not_ended_by_on_hang_kill(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    watch = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(tmp_path / "run"),
                            "--hang-timeout", "3", "--second-look", "1", "--on-hang", "kill", "--",
                            sys.executable, str(job)], env=clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"),
                           cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert "no progress from any running rank" in watch.stderr  # the stall was investigated
    assert "not ending the job (--on-hang kill): every rank's stack moved" in watch.stderr, watch.stderr[-3000:]
    assert watch.returncode == 0 and "evaluation done" in watch.stdout, watch.stderr[-3000:]
