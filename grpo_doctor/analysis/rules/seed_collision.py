"""`seed-collision`: several ranks sample with the same random seed, so their completions are copies (CASES.md case 2).

Two kinds of evidence, from the ranks' records:
- Completion hashes (critical): GRPO spreads the copies of one prompt over ranks; for each step,
  each pair of ranks holding copies of a common prompt is compared (rollout_tables.py). A pair
  collides in a step when the share of its completions with an identical copy on the other rank is
  at least `min_identical_frac` and exceeds both ranks' own within-group duplicate rate by
  `min_excess_over_within` (a policy that always writes the same answer duplicates inside a rank
  too: that is no seed collision). Pairs colliding in at least `min_step_share` of the steps they
  were compared in are joined into sets. Greedy sampling (temperature 0) is left out, and so are
  pairs in one tensor-parallel group (they share an engine by design).
- Rng snapshots: ranks of different tensor-parallel groups whose sampling generator (the engine's
  sampling seed, else the torch CUDA, else the torch CPU fingerprint) agrees in a snapshot and does
  not diverge later. Without hash evidence: critical for a shared sampling seed (stated by the
  trainer), a warning for shared generator states.

Evidence keys: `sources` (["completion hashes", "rng fingerprints"], those that show it),
`rank_sets` (sorted lists of colliding ranks), `set_hosts` (the hosts of each set),
`lines_up_with_hosts` (every set is exactly the compared ranks of one host: a per-node seed),
`lines_up_with_tp_groups` (every set is a union of whole tensor-parallel groups: a seed per group
that ignores the data-parallel rank; None without tp information), `first_step`,
`identical_frac` (mean share of identical copies over the colliding pairs' comparisons),
`within_duplicate_rate` (the ranks' own duplicate rate over the same comparisons),
`num_steps_colliding`, `num_steps_compared`, `temperature` (median over the rollout records;
None when not recorded), `generator` and `shared_generators` (from the rng snapshots; None / []
without them), `rng_rank_sets` (the sets the rng snapshots show).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.analysis.rollout_tables import cross_rank_overlaps, rng_collisions
from grpo_doctor.rankset import format_ranks

ID = "seed-collision"

HINTS = (
    "Give every sampling process its own seed: TRL set_seed(seed, device_specific=True) (seed + process index); "
    "vLLM: one seed per tensor-parallel group, different across groups (seed = base + data-parallel rank).",
    "ms-swift colocate mode derived the vLLM seed from the local / node rank in affected versions (issues #3745, "
    "#3780): upgrade to a release with the seed fixes (PRs #3486, #4209, #4712).",
    "If the sets are whole nodes, the seed is computed from LOCAL_RANK or NODE_RANK alone: derive it from the "
    "global RANK. Check afterwards that completions for the same prompt differ across ranks.",
)


@dataclass(frozen=True)
class Config:
    min_identical_frac: float = 0.5  # share of a pair's copies identical to one on the other rank, per step
    min_excess_over_within: float = 0.3  # ... above the ranks' own within-group duplicate rate
    min_step_share: float = 0.5  # steps a pair collides in / steps it was compared in


def check(run: Evidence, cfg: Config) -> Iterator[Finding]:
    tp_group = _tp_groups(run)
    hash_sets, stats = _hash_collisions(run, cfg, tp_group)
    rng = rng_collisions(run.rng)
    rng_sets = _components(c.ranks for c in rng)
    sets = hash_sets or rng_sets
    if not sets:
        return
    hosts = _hosts(run)
    set_hosts = [sorted({hosts[r] for r in s if r in hosts}) for s in sets]
    compared = set(stats.pop("compared_ranks")) if hash_sets else set(run.rng["rank"].astype(int))
    by_node = all(len(h) == 1 and set(s) == {r for r in compared if hosts.get(r) == h[0]}
                  for s, h in zip(sets, set_hosts, strict=True))
    by_tp = None
    if tp_group:
        members = defaultdict(set)
        for rank, group in tp_group.items():
            members[group].add(rank)
        by_tp = all(len({tp_group.get(r) for r in s}) > 1 and None not in {tp_group.get(r) for r in s}
                    and all(members[tp_group[r]] <= set(s) for r in s) for s in sets)
    first_step = stats.get("first_step") if hash_sets else min((c.step for c in rng if c.step is not None),
                                                                default=None)
    text = " and ".join("{" + format_ranks(s) + "}" for s in sets)
    where = " (one seed per node)" if by_node else " (one seed per tensor-parallel group)" if by_tp else ""
    title = (f"ranks {text} generated identical completions for the same prompts: shared sampling seed{where}"
             if hash_sets else f"ranks {text} share a sampling random state ({rng[0].generator}){where}")
    yield Finding(
        id=ID, severity="critical" if hash_sets or (rng and rng[0].generator == "sampling_seed") else "warning",
        title=title,
        ranks=tuple(sorted({r for s in sets for r in s})), hosts=tuple(sorted({h for hs in set_hosts for h in hs})),
        step=first_step,
        evidence={"sources": (["completion hashes"] if hash_sets else []) + (["rng fingerprints"] if rng_sets else []),
                  "rank_sets": sets, "set_hosts": set_hosts, "lines_up_with_hosts": by_node,
                  "lines_up_with_tp_groups": by_tp, "first_step": first_step,
                  "identical_frac": stats.get("identical_frac"), "within_duplicate_rate": stats.get("within"),
                  "num_steps_colliding": stats.get("num_steps_colliding"),
                  "num_steps_compared": stats.get("num_steps_compared"), "temperature": _temperature(run),
                  "generator": rng[0].generator if rng else None,
                  "shared_generators": sorted({g for c in rng for g in c.shared_generators}),
                  "rng_rank_sets": rng_sets},
        hints=HINTS,
    )


def _hash_collisions(run: Evidence, cfg: Config, tp_group: dict[int, int]) -> tuple[list[list[int]], dict]:
    overlaps = cross_rank_overlaps(run.rollout_records)
    counts: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])  # steps collided, steps compared
    hits: dict[tuple[int, int], list[tuple[int, float, float]]] = defaultdict(list)
    compared: set[int] = set()
    for step, pairs in overlaps.items():
        for (a, b), o in pairs.items():
            compared |= {a, b}
            if a in tp_group and tp_group.get(a) == tp_group.get(b):
                continue  # one engine serves a tensor-parallel group: its ranks may record the same output
            counts[(a, b)][1] += 1
            if (o.identical_frac >= cfg.min_identical_frac
                    and o.identical_frac - o.within_duplicate_rate >= cfg.min_excess_over_within):
                counts[(a, b)][0] += 1
                hits[(a, b)].append((step, o.identical_frac, o.within_duplicate_rate))
    colliding = [pair for pair, (hit, num) in counts.items() if hit and hit / num >= cfg.min_step_share]
    if not colliding:
        return [], {"compared_ranks": compared}
    found = [h for pair in colliding for h in hits[pair]]
    return _components(colliding), {
        "compared_ranks": compared, "first_step": min(h[0] for h in found),
        "identical_frac": round(sum(h[1] for h in found) / len(found), 4),
        "within": round(sum(h[2] for h in found) / len(found), 4),
        "num_steps_colliding": len({h[0] for h in found}), "num_steps_compared": len(overlaps)}


def _components(groups: Iterable[Iterable[int]]) -> list[list[int]]:
    """Rank sets joined wherever they share a rank (pairs {0,1} and {1,2} make {0,1,2})."""
    merged: list[set[int]] = []
    for group in groups:
        group = set(group)
        for other in [m for m in merged if m & group]:
            group |= other
            merged.remove(other)
        merged.append(group)
    return sorted(sorted(m) for m in merged)


def _tp_groups(run: Evidence) -> dict[int, int]:
    rows = run.rng.dropna(subset=["tp_group"]).drop_duplicates("rank", keep="last")
    return {int(r): int(g) for r, g in zip(rows["rank"], rows["tp_group"], strict=True)}


def _hosts(run: Evidence) -> dict[int, str]:
    hosts = {int(r): h for r, h in zip(run.rng["rank"], run.rng["host"], strict=True)}
    hosts.update({r.rank: r.host for r in run.rollout_records})
    return hosts


def _temperature(run: Evidence) -> float | None:
    values = sorted(r.temperature for r in run.rollout_records if r.temperature is not None)
    return values[len(values) // 2] if values else None
