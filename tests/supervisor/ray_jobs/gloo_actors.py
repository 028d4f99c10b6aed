"""A Ray job as verl and OpenRLHF run one, small enough for CPUs, and never importing grpo_doctor.

The driver starts a local Ray instance and two `PolicyWorker` actors that form a gloo process group
and train a tiny model (a reward per step, a backward, an all_reduce of the gradients, an optimizer
step), plus a `RolloutWorker` actor outside the group. What goes wrong is chosen by the environment:
  FAULT=hang-reward  rank 1 never returns from its reward function at step FAULT_STEP
  FAULT=kill         rank 1 SIGKILLs itself at step FAULT_STEP
  FAULT=raise        rank 1's reward function raises at step FAULT_STEP
  RANK_FROM=runtime-env  RANK set through the actor's runtime_env (verl), else inside the actor (OpenRLHF)
  RAY_ADDRESS            join a cluster started with `ray start` instead of starting one
"""
import os
import signal
import sys
import time

import ray
import torch
import torch.distributed as dist

FAULT = os.environ.get("FAULT", "")
FAULT_STEP = int(os.environ.get("FAULT_STEP", "2"))
STEPS = int(os.environ.get("STEPS", "6"))
PORT = int(os.environ.get("GLOO_PORT", "29631"))


@ray.remote
class PolicyWorker:
    def __init__(self, rank: int, world_size: int) -> None:
        if "RANK" not in os.environ:  # OpenRLHF sets them inside the actor
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(PORT))
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        self.rank = rank
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def reward(self, step: int) -> float:
        if self.rank == 1 and step == FAULT_STEP:
            if FAULT == "hang-reward":
                while True:
                    time.sleep(1)
            if FAULT == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if FAULT == "raise":
                raise ValueError("reward model returned no score for prompt 17")
        return 1.0

    def train_step(self, step: int) -> float:
        loss = self.model(torch.ones(4, 8)).mean() * self.reward(step)
        loss.backward()
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
        self.opt.step()
        self.opt.zero_grad()
        return loss.item()


@ray.remote
class RolloutWorker:
    def generate(self, step: int) -> list[int]:
        return [step] * 4


def main() -> int:
    if os.environ.get("RAY_ADDRESS"):  # a cluster started by `ray start` (under one watch per node)
        ray.init()
    else:
        # "local": a new instance even where an earlier `ray start` left its address in /tmp/ray.
        ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=True)
    def options(rank):
        if os.environ.get("RANK_FROM") == "runtime-env":
            return {"runtime_env": {"env_vars": {"RANK": str(rank), "WORLD_SIZE": "2"}}}
        return {}
    workers = [PolicyWorker.options(**options(r)).remote(r, 2) for r in range(2)]
    rollout = RolloutWorker.remote()
    for step in range(STEPS):
        ray.get(rollout.generate.remote(step))
        losses = ray.get([w.train_step.remote(step) for w in workers])
        print(f"step {step} loss {losses[0]:.4f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
