"""`seed-collision`: several ranks sample with the same random seed, so their completions are copies (CASES.md case 2).

Two kinds of evidence, from the ranks' records:
- Completion hashes (critical): GRPO spreads the copies of one prompt over ranks; for each step,
  each pair of ranks holding copies of a common prompt is compared (rollout_tables.py). A pair
  collides in a step when the share of its completions with an identical copy on the other rank is
  at least `min_identical_frac` and exceeds a baseline by `min_excess_over_within`. The baseline is
  what a policy that always writes the same answer makes identical anyway: the ranks' own
  within-group duplicate rate, or, where no rank held two copies of a prompt (per-device batch 1),
  the share of the prompts whose copies were one text on every rank holding them. Pairs colliding
  in at least `min_step_share` of the steps they were compared in are joined into sets. Greedy
  sampling (temperature 0) is left out, and so are pairs in one tensor-parallel group (they share
  an engine by design).
- Rng snapshots: ranks of different tensor-parallel groups whose sampling generator (the engine's
  sampling seed, else the torch CUDA, else the torch CPU fingerprint) agrees in a snapshot and does
  not diverge later. Without hash evidence: critical for a shared sampling seed (stated by the
  trainer), a warning for shared generator states.

The copies of a prompt sit on a few ranks (pairs, in TRL's RepeatSampler layout), so hashes alone
split one node-wide seed into pairs: the rng sets join them (one node's ranks sharing a fingerprint
are one set), and an rng set the hashes never compared stands on its own, unless the hashes show
two of its ranks differing; only colliding ranks are named.

Copies identical on every rank, with no rank holding two (nothing shows the policy sampling
apart), are a collapsed policy or a shared seed. The rng snapshots decide: a shared sampling
generator makes them a collision (critical), distinct ones a collapse (no finding; entropy-collapse,
length-collapse and constant-reward cover it). Without rng records for those ranks the finding is
`info`, titled as either, with `cannot_tell_from_collapse` true and hints on how to tell.

Evidence keys: `sources` (["completion hashes", "rng fingerprints"], those that show it),
`rank_sets` (sorted lists of colliding ranks), `hash_rank_sets` (the sets the completion hashes
show alone, before the rng sets join them; [] without them), `set_hosts` (the hosts of each set),
`lines_up_with_hosts` (every set is exactly the compared ranks of one host: a per-node seed),
`lines_up_with_tp_groups` (every set is a union of whole tensor-parallel groups: a seed per group
that ignores the data-parallel rank; None without tp information), `first_step`,
`identical_frac` (mean share of identical copies over the colliding pairs' comparisons),
`within_duplicate_rate` (the ranks' own duplicate rate over the same comparisons; None where no
rank held two copies of a prompt), `num_steps_colliding`, `num_steps_compared`, `temperature`
(median over the rollout records; None when not recorded), `generator` and `shared_generators`
(from the rng snapshots; None / [] without them), `rng_rank_sets` (the sets the rng snapshots
show), `cannot_tell_from_collapse` (true for the info finding above).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.rollout_tables import cross_rank_overlaps, fingerprinted_ranks, rng_collisions
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.schema.ranks import format_ranks

ID = "seed-collision"
READS = {View.ROLLOUT_TABLES}

HINTS = (
    "Give every sampling process its own seed: TRL set_seed(seed, device_specific=True) (seed + process index); "
    "vLLM: one seed per tensor-parallel group, different across groups (seed = base + data-parallel rank).",
    "ms-swift in colocate mode seeded the vLLM engines of different ranks alike in affected versions (issues #3745, "
    "#3780): upgrade to ms-swift 3.5.3 or later, which has PR #4209 (one seed per tensor-parallel group, different "
    "across groups) and PR #4712 (the colocate seed fix).",
    "If the sets are whole nodes, the seed is computed from LOCAL_RANK or NODE_RANK alone: derive it from the "
    "global RANK. Check afterwards that completions for the same prompt differ across ranks.",
    "A fixed `seed` in TRL's generation_kwargs (vLLM SamplingParams) draws every copy of a prompt alike on every "
    "rank in colocate mode: remove it.",
)
UNDECIDED_HINTS = (
    "Record the seeds so the report can tell: grpo_doctor.seed_audit(sampling_seed=...) once they are set (the TRL "
    "and ms-swift integrations do it). Shared fingerprints mean a seed collision, distinct ones a collapsed policy.",
    "Or check by hand that each sampling process gets its own seed. If they do, the policy writes one answer per "
    "prompt: see entropy-collapse, length-collapse and constant-reward.",
)


@dataclass(frozen=True)
class Config:
    min_identical_frac: float = 0.5  # share of a pair's copies identical to one on the other rank, per step
    min_excess_over_within: float = 0.3  # ... above the baseline (within-rank duplicates, else unanimous prompts)
    min_step_share: float = 0.5  # steps a pair collides in / steps it was compared in


@dataclass
class _Pairs:
    """Rank pairs (a < b) holding copies of common prompts, by what their completion hashes say."""

    colliding: list[tuple[int, int]] = field(default_factory=list)  # identical beyond the baseline
    unanimous: list[tuple[int, int]] = field(default_factory=list)  # identical, but so is every copy anywhere
    differing: list[tuple[int, int]] = field(default_factory=list)  # compared, not shown alike
    hits: dict[tuple[int, int], list[tuple[int, float, float | None]]] = field(default_factory=dict)
    compared_ranks: set[int] = field(default_factory=set)
    num_steps_compared: int = 0


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    tp_group = _tp_groups(run)
    pairs = _compare_pairs(run, cfg, tp_group)
    rng = rng_collisions(run.rng)
    rng_sets = _components(c.ranks for c in rng)
    fingerprinted = fingerprinted_ranks(run.rng)
    # Copies identical on every rank: a shared fingerprint makes that a collision, distinct ones a collapsed policy.
    shares_rng = {p for p in pairs.unanimous if any(set(p) <= set(s) for s in rng_sets)}
    undecided = [p for p in pairs.unanimous if p not in shares_rng and not set(p) <= fingerprinted]
    colliding = pairs.colliding + sorted(shares_rng)
    hash_sets = _components(colliding)
    if hash_sets:
        sets = _join_fingerprint_sets(hash_sets, rng_sets, pairs.differing)
        compared = pairs.compared_ranks | fingerprinted
    elif rng_sets or undecided:
        sets = rng_sets or _components(undecided)
        compared = set(run.rng["rank"].astype(int)) if rng_sets else pairs.compared_ranks
    else:
        return
    reported = colliding if hash_sets else [] if rng_sets else undecided
    stats = _stats(pairs, reported)
    hosts = _hosts(run)
    set_hosts = [sorted({hosts[r] for r in s if r in hosts}) for s in sets]
    by_node = all(len(h) == 1 and set(s) == {r for r in compared if hosts.get(r) == h[0]}
                  for s, h in zip(sets, set_hosts, strict=True))
    by_tp = None
    if tp_group:
        members = defaultdict(set)
        for rank, group in tp_group.items():
            members[group].add(rank)
        by_tp = all(len({tp_group.get(r) for r in s}) > 1 and None not in {tp_group.get(r) for r in s}
                    and all(members[tp_group[r]] <= set(s) for r in s) for s in sets)
    first_step = stats.get("first_step") if reported else min((c.step for c in rng if c.step is not None),
                                                               default=None)
    cannot_tell = not hash_sets and not rng_sets
    text = " and ".join("{" + format_ranks(s) + "}" for s in sets)
    where = " (one seed per node)" if by_node else " (one seed per tensor-parallel group)" if by_tp else ""
    if hash_sets:
        title = f"ranks {text} generated identical completions for the same prompts: shared sampling seed{where}"
    elif rng_sets:
        title = f"ranks {text} share a sampling random state ({rng[0].generator}){where}"
    else:
        title = (f"ranks {text} generated identical completions for the same prompts, as did every rank holding "
                 "them: a shared sampling seed or a collapsed policy (no seed records to tell which)")
    # A guess between two causes with opposite remedies is no alarm: info, with the way to settle it;
    # a collapsed policy is reported by entropy-collapse / length-collapse / constant-reward anyway.
    severity = ("info" if cannot_tell else
                "critical" if hash_sets or (rng and rng[0].generator == "sampling_seed") else "warning")
    yield Finding(
        id=ID, severity=severity, title=title,
        ranks=tuple(sorted({r for s in sets for r in s})), hosts=tuple(sorted({h for hs in set_hosts for h in hs})),
        step=first_step,
        evidence={"sources": (["completion hashes"] if reported else []) + (["rng fingerprints"] if rng_sets else []),
                  "rank_sets": sets, "hash_rank_sets": _components(pairs.colliding),
                  "set_hosts": set_hosts, "lines_up_with_hosts": by_node,
                  "lines_up_with_tp_groups": by_tp, "first_step": first_step,
                  "identical_frac": stats.get("identical_frac"), "within_duplicate_rate": stats.get("within"),
                  "num_steps_colliding": stats.get("num_steps_colliding"),
                  "num_steps_compared": stats.get("num_steps_compared"), "temperature": _temperature(run),
                  "generator": rng[0].generator if rng else None,
                  "shared_generators": sorted({g for c in rng for g in c.shared_generators}),
                  "rng_rank_sets": rng_sets, "cannot_tell_from_collapse": cannot_tell},
        hints=UNDECIDED_HINTS if cannot_tell else HINTS,
    )


def _compare_pairs(run: RunView, cfg: Config, tp_group: dict[int, int]) -> _Pairs:
    overlaps = cross_rank_overlaps(run.rollout_records)
    counts: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0, 0])  # collided, unanimous, compared
    out = _Pairs(hits=defaultdict(list), num_steps_compared=len(overlaps))
    for step, step_pairs in overlaps.items():
        for (a, b), o in step_pairs.items():
            out.compared_ranks |= {a, b}
            if a in tp_group and tp_group.get(a) == tp_group.get(b):
                continue  # one engine serves a tensor-parallel group: its ranks may record the same output
            counts[(a, b)][2] += 1
            if o.identical_frac < cfg.min_identical_frac:
                continue
            # the baseline: copies a collapsed policy makes identical anyway, seen inside a rank when it holds
            # two copies of a prompt, else the prompts whose copies are one text on every rank holding them
            within = o.within_duplicate_rate
            baseline = within if within is not None else o.unanimous_frac
            if o.identical_frac - baseline >= cfg.min_excess_over_within:
                counts[(a, b)][0] += 1
            elif within is None:
                counts[(a, b)][1] += 1
            else:
                continue
            out.hits[(a, b)].append((step, o.identical_frac, within))
    for pair, (hit, unanimous, num) in counts.items():
        if hit / num >= cfg.min_step_share:
            out.colliding.append(pair)
        elif (hit + unanimous) / num >= cfg.min_step_share:
            out.unanimous.append(pair)
        else:
            out.differing.append(pair)
    return out


def _stats(pairs: _Pairs, reported: list[tuple[int, int]]) -> dict:
    found = [h for pair in reported for h in pairs.hits[pair]]
    if not found:
        return {}
    within = [h[2] for h in found if h[2] is not None]
    return {"first_step": min(h[0] for h in found),
            "identical_frac": round(sum(h[1] for h in found) / len(found), 4),
            "within": round(sum(within) / len(within), 4) if within else None,
            "num_steps_colliding": len({h[0] for h in found}), "num_steps_compared": pairs.num_steps_compared}


def _join_fingerprint_sets(hash_sets: list[list[int]], rng_sets: list[list[int]],
                           differing: list[tuple[int, int]]) -> list[list[int]]:
    """Hash sets joined with the rng sets.

    The copies of a prompt sit on a few ranks (pairs, in TRL's layout), so hashes alone split one
    node-wide seed into those pairs; the shared fingerprint says they are one set. An rng set whose
    ranks never shared a prompt stands on its own, as it would without any hash evidence. An rng
    set with two ranks the hashes show differing is left out: it would name ranks that do not collide.
    """
    joinable = [s for s in rng_sets if not any(a in s and b in s for a, b in differing)]
    return _components([*hash_sets, *joinable])


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


def _tp_groups(run: RunView) -> dict[int, int]:
    rows = run.rng.dropna(subset=["tp_group"]).drop_duplicates("rank", keep="last")
    return {int(r): int(g) for r, g in zip(rows["rank"], rows["tp_group"], strict=True)}


def _hosts(run: RunView) -> dict[int, str]:
    hosts = {int(r): h for r, h in zip(run.rng["rank"], run.rng["host"], strict=True)}
    hosts.update({r.rank: r.host for r in run.rollout_records})
    return hosts


def _temperature(run: RunView) -> float | None:
    values = sorted(r.temperature for r in run.rollout_records if r.temperature is not None)
    return values[len(values) // 2] if values else None
