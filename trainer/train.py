"""The GRPO training loop, instrumented with grpo-doctor phases, steps and memory snapshots.

One step: weight-sync (the policy's weights pushed into the rollout engine: HF's rollout copy or
vLLM, then compared with grpo-doctor's weight-sync check) -> rollout of B completions per rank ->
reward, gathered over ranks, group-normalised advantages -> reference log-probs -> policy log-probs
and loss -> backward -> optimizer step. Faults from `--inject` fire just inside the phase they name.
Each rank records its rollouts (`gd.rollouts`) every step and its random state
(`gd.seed_audit`) at start and every SEED_AUDIT_EVERY steps.

Typical use:
    torchrun --nproc-per-node 2 -m grpo_doctor_trainer.train --steps 6 --run-dir runs/demo
    python -m grpo_doctor_trainer.train --steps 2 --no-record        # one process, world size 1
"""
from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

import grpo_doctor as gd

from .config import TrainConfig, UsageError, parse_args
from .data import make_problems, rank_slice
from .dist import (
    DistInfo,
    all_gather_floats,
    all_gather_objects,
    init_distributed,
    shutdown_distributed,
)
from .engine import DDPEngine, DeepSpeedEngine, build_engine
from .grpo import group_advantages, grpo_loss, reward_stats, token_logprobs
from .inject import Injector
from .model import build_policy_and_reference, save_model
from .reward import score_completions
from .rollout import HFRollout, VLLMRollout

SEED_AUDIT_EVERY = 10


@dataclass
class Trainer:
    cfg: TrainConfig
    info: DistInfo
    engine: DDPEngine | DeepSpeedEngine
    reference: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    injector: Injector
    sampling_seed: int  # the seed this rank's rollouts sample with (vLLM's, or torch's for hf)
    vllm: VLLMRollout | None = None
    rollout_copy: HFRollout | None = None  # --rollout hf: generate from a copy the weights are pushed into

    def run_step(self, n: int) -> dict[str, float]:
        cfg, info, inj = self.cfg, self.info, self.injector
        problems = make_problems(cfg.seed, n, cfg.num_prompts(info.world_size))
        mine = rank_slice(problems, info.rank, cfg.per_device_batch, cfg.num_generations)
        if n and n % SEED_AUDIT_EVERY == 0:
            gd.seed_audit("step", sampling_seed=self.sampling_seed)

        with gd.phase("weight-sync"):
            inj.at("weight-sync", n)
            self.push_weights(n)

        with gd.phase("rollout"):
            inj.at("rollout", n)
            prompts = [p.prompt for p in mine]
            comp = (self.vllm or self.rollout_copy).generate(prompts, info.device)

        with gd.phase("reward"):
            inj.at("reward", n)
            local = score_completions(comp.texts, comp.ended_with_eos, [p.answer for p in mine],
                                      constant=inj.reward_override())
            rewards = all_gather_floats(local, info)
            mine_samples = list(zip(comp.texts, comp.ended_with_eos, strict=True))
            samples = [s for per_rank in all_gather_objects(mine_samples, info) for s in per_rank]
            stats = reward_stats(rewards, cfg.num_generations)
            lo, hi = info.rank * cfg.per_device_batch, (info.rank + 1) * cfg.per_device_batch
            advantages = group_advantages(rewards, cfg.num_generations)[lo:hi].to(info.device)
        self.record_rollouts(n, prompts, comp, local, lo)

        input_ids, attention_mask = comp.input_ids, comp.attention_mask
        num_prompt_tokens = comp.prompt_ids.shape[1]
        ref_logp = None
        if cfg.beta != 0:
            with gd.phase("ref-logprob"):
                inj.at("ref-logprob", n)
                with torch.no_grad():
                    ref_logp = token_logprobs(self.reference, input_ids, attention_mask, num_prompt_tokens,
                                              cfg.temperature)

        with gd.phase("forward"):
            inj.at("forward", n)
            logp = token_logprobs(self.engine.forward, input_ids, attention_mask, num_prompt_tokens,
                                  cfg.temperature)
            loss, kl = grpo_loss(logp, ref_logp, advantages, comp.completion_mask, cfg.beta, cfg.epsilon)
            if inj.nan_loss(n):
                loss = loss * float("nan")  # poisons the gradients too, as a real NaN would

        with gd.phase("backward"):
            inj.at("backward", n)
            self.engine.backward(loss)

        with gd.phase("optimizer-step"):
            inj.at("optimizer-step", n)
            grad_norm = self.engine.step()

        metrics = {
            "loss": loss.item(),
            "reward": stats.mean,
            "reward_std": stats.std,
            "frac_reward_zero_std": stats.frac_zero_std,
            "frac_identical_groups": frac_identical_groups(samples, cfg.num_generations),
            "grad_norm": grad_norm,
            "lr": self.engine.lr,
            "completion_length": comp.completion_mask.sum(dim=1).float().mean().item(),
            "num_tokens": int(attention_mask.sum().item()),
        }
        if kl is not None:
            metrics["kl"] = kl.item()
        if comp.logprobs is not None:  # the engine's log-probs against the trainer's: stale-rollout-weights' drift
            metrics["logprob_diff"] = ((logp.detach() - comp.logprobs).abs() * comp.completion_mask).sum().item() / max(
                1, int(comp.completion_mask.sum().item()))
        return metrics

    def push_weights(self, n: int) -> None:
        """The policy's weights into the rollout engine, then (every Nth step) grpo-doctor's check that the
        engine holds them: the trainer's side is fingerprinted as the push walks it (ZeRO-3 gathers once)."""
        engine = self.vllm or self.rollout_copy
        params = self.engine.named_full_parameters()
        every = self.cfg.weight_sync_check_every
        check = None
        if every and n % every == 0:
            check = gd.WeightSyncCheck(engine.engine_weights, name_map=engine.name_map, engine=engine.engine_name)
            params = check.tap(params)
        engine.sync_weights(params, skip=self.injector.stale_weights(n))
        if check is not None:
            check.compare(step=n)

    def record_rollouts(self, n: int, prompts: list[str], comp, rewards: list[float], first: int) -> None:
        """This rank's completions as grpo-doctor sees them; `first`: index of the first in the global batch."""
        lengths = comp.completion_mask.sum(dim=1).tolist()  # up to and including EOS, as the loss counts
        ids = [row[:k] for row, k in zip(comp.completion_ids.tolist(), lengths, strict=True)]
        groups = [(first + i) // self.cfg.num_generations for i in range(len(prompts))]  # global group index
        # Every rank records each step, so the cross-rank hash gather (2 KiB per rank) is safe here.
        gd.rollouts(prompts, comp.texts, rewards, groups, completion_ids=ids, max_length=self.cfg.max_new_tokens,
                    temperature=self.cfg.temperature, step=n, compare_across_ranks=True)


def frac_identical_groups(samples: list, num_generations: int) -> float:
    """Fraction of prompt groups whose completions are all the same (seed collision, case 2)."""
    groups = [samples[i : i + num_generations] for i in range(0, len(samples), num_generations)]
    return sum(len(set(g)) == 1 for g in groups) / len(groups)


def build_trainer(cfg: TrainConfig, info: DistInfo, workdir: Path) -> Trainer:
    """workdir: scratch space for this process (vLLM loads the tiny model from a directory)."""
    policy, reference, tokenizer = build_policy_and_reference(cfg.model, cfg.seed)
    injector = Injector(cfg.faults, info.rank, info.device)
    # TRL's set_seed(seed, device_specific=True): each sampling process its own stream.
    sampling_rank = injector.sampling_rank(info.rank, info.node_rank)
    vllm = rollout_copy = None
    sampling_seed = cfg.seed + sampling_rank
    if cfg.rollout == "vllm":
        model_dir = save_model(policy, tokenizer, workdir / "policy") if cfg.model == "tiny" else cfg.model
        base = cfg.seed if cfg.vllm_seed is None else cfg.vllm_seed
        sampling_seed = base + sampling_rank
        vllm = VLLMRollout(model_dir, tokenizer, cfg, seed=sampling_seed,
                           name_map=gd.vllm_name_map({n: p.shape for n, p in policy.named_parameters()}))
    else:  # before the engine wraps the policy: ZeRO-3 would leave the copy empty shards
        rollout_copy = HFRollout(policy, tokenizer, cfg, info.device)
    engine = build_engine(policy, cfg, info)
    torch.manual_seed(cfg.seed + sampling_rank)
    # Before the first rollout, as a collision must be seen; rank 0 prints ranks sharing a seed.
    gd.seed_audit("init", sampling_seed=sampling_seed, compare_across_ranks=True)
    return Trainer(cfg, info, engine, reference.to(info.device), tokenizer, injector, sampling_seed, vllm,
                   rollout_copy)


def main(argv: list[str] | None = None) -> int:
    info = None
    try:
        cfg = parse_args(argv)
        info = init_distributed(cfg.backend, cfg.dist_timeout_s)
        cfg.check_world(info.world_size)
        if cfg.rollout == "vllm" and not torch.cuda.is_available():
            raise UsageError("vLLM rollouts need a CUDA GPU and this machine has none", "use --rollout hf")
        gd.init(run_dir=cfg.run_dir, enabled=cfg.record, sync=cfg.sync_phases)
        with tempfile.TemporaryDirectory(prefix="grpo-trainer-") as workdir:
            train(build_trainer(cfg, info, Path(workdir)))
    except UsageError as exc:
        if info is None or info.rank == 0:  # every rank has the same options: say it once
            print(f"error: {exc}; {exc.hint}" if exc.hint else f"error: {exc}", file=sys.stderr, flush=True)
        shutdown_distributed()
        return 2
    gd.shutdown()
    shutdown_distributed()
    return 0


def train(trainer: Trainer) -> None:
    cfg, info = trainer.cfg, trainer.info
    if info.rank == 0:
        print(f"GRPO: world_size {info.world_size}, backend {info.backend}, engine {cfg.engine}"
              f"{f' ZeRO-{cfg.zero_stage}' if cfg.engine == 'deepspeed' else ''}, rollout {cfg.rollout}, "
              f"{cfg.num_prompts(info.world_size)} prompts x {cfg.num_generations} per step, "
              f"run dir {gd.run_dir()}", flush=True)
    for n in range(cfg.steps):
        began_s = time.monotonic()
        metrics = trainer.run_step(n)
        gd.memory_snapshot("step")
        gd.step(n, **metrics)
        if info.rank == 0 and (n % cfg.log_every == 0 or n == cfg.steps - 1):
            kl = f" kl {metrics['kl']:.4f}" if "kl" in metrics else ""
            print(f"step {n} loss {metrics['loss']:.4f} reward {metrics['reward']:.3f}"
                  f" reward_std {metrics['reward_std']:.3f}{kl} {time.monotonic() - began_s:.3f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
