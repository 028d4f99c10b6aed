"""How different the completions of a step are: distinct-n, and edit distance within groups.

All of it runs on a `TokenBatch` (the step's sequences concatenated into one int32 array), built
from token ids or, for plain text, from whitespace tokens. Costs stay linear in the tokens:
distinct-n sorts the step's n-grams once; the edit distance compares at most
`max_pairs_per_group` pairs per group and `max_pairs` per step, on each sequence's first
`max_tokens` tokens, all pairs at once with Myers' bit-parallel algorithm (one 64-bit lane per
pair inside one Python integer, so a pair costs a few machine words per token instead of a
64 x 64 table). Its cost is therefore bounded per step whatever the batch size. Where rapidfuzz
happens to be installed, it computes the same distances (the same integers, so the same mean) in
about half the CPU time (benchmarks/bench_edit_distance.py); it is never required, since the rank
side takes no new dependency.

Typical use:
    batch = TokenBatch.from_sequences([[5, 6, 7], [5, 6, 7], [9, 9]])
    distinct_n(batch, 1)                                   # 4 distinct / 8 tokens = 0.5
    mean_edit_distance(batch, groups=[[0, 1, 2]])         # mean of 0/3, 3/3, 3/3 = 0.667
    TokenBatch.from_words(["the cat", "the dog"])         # whitespace tokens, ids per call
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain

import numpy as np

from grpo_doctor.checks.hashing import INT32_MAX, INT32_MIN

try:  # optional: see the module docstring
    from rapidfuzz.distance.Levenshtein import distance as _rapidfuzz_distance
except ImportError:
    _rapidfuzz_distance = None

MAX_PAIRS_PER_GROUP = 16
# Per step, spread evenly over the groups. The loop over tokens costs the same for any number of
# pairs (about 0.5 ms), each pair about 15 us more; the mean of 32 distances in [0, 1] is within
# +-0.2 of the step's (95 %, at the largest possible spread), enough to tell clones (0) from
# sampled text (near 1).
MAX_PAIRS = 32
EDIT_MAX_TOKENS = 64  # one 64-bit word per pair: the bit-parallel loop's fixed cost per token
ENGINES = ("auto", "numpy", "rapidfuzz")
_LANE_BYTES = 9  # 8 bytes of pattern bits + 1 guard byte that absorbs carries and counts


@dataclass(frozen=True)
class TokenBatch:
    """Sequence i is flat[offsets[i]:offsets[i + 1]]."""

    flat: np.ndarray  # int32
    offsets: np.ndarray  # int64, one more than there are sequences

    @classmethod
    def from_sequences(cls, seqs) -> TokenBatch:
        """seqs: token-id sequences (lists, 1-D numpy arrays or 1-D tensors), unpadded."""
        seqs = [s.detach().cpu().numpy() if hasattr(s, "detach") else s for s in seqs]
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in seqs], out=offsets[1:])
        if all(type(s) in (list, tuple) for s in seqs):
            # One pass from Python ints straight into int32 (which refuses larger ids): converting
            # the Python objects is the costliest step of a whole rollout record for list input.
            try:
                flat = np.fromiter(chain.from_iterable(seqs), dtype=np.int32, count=int(offsets[-1]))
            except OverflowError:
                raise ValueError("token id outside int32") from None
            return cls(flat, offsets)
        flat = np.concatenate([np.asarray(s) for s in seqs]) if seqs else np.zeros(0, np.int32)
        if flat.dtype.kind not in "iub":
            raise TypeError(f"token ids must be integers, got dtype {flat.dtype}")
        if flat.size and (int(flat.min()) < INT32_MIN or int(flat.max()) > INT32_MAX):
            raise ValueError("token id outside int32")
        return cls(flat.astype(np.int32, copy=False), offsets)

    @classmethod
    def from_words(cls, texts: list[str]) -> TokenBatch:
        """Whitespace tokens of each text, as 31 bits of Python's string hash.

        The ids are only compared within one batch, so the per-process hash seed does not matter;
        hashing in C is several times faster than numbering words through a dict, and two of
        10,000 distinct words share an id with probability about 2 %, which moves distinct-n by
        1e-4 at most.
        """
        words = [t.split() for t in texts]
        offsets = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum([len(w) for w in words], out=offsets[1:])
        flat = np.fromiter(map(hash, chain.from_iterable(words)), dtype=np.int64, count=int(offsets[-1]))
        return cls((flat & 0x7FFFFFFF).astype(np.int32), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i] : self.offsets[i + 1]]


def distinct_n(batch: TokenBatch, n: int) -> float | None:
    """Distinct n-grams / n-grams over all sequences (n-grams never cross sequences); n is 1 or 2.

    None when there is no n-gram at all.
    """
    if n == 1:
        grams = np.sort(batch.flat)
    elif n == 2:
        ids = batch.flat.view(np.uint32).astype(np.uint64)  # unsigned: a negative id cannot spill over
        grams = ids[:-1] << np.uint64(32)
        grams |= ids[1:]
        ends = batch.offsets[1:-1] - 1  # a bigram starting at a sequence's last token crosses into the next
        ends = ends[(ends >= 0) & (ends < grams.size)]
        if ends.size:
            grams = np.delete(grams, ends)
        grams.sort()
    else:
        raise ValueError(f"distinct_n: n={n}, only 1 and 2 are computed")
    if grams.size == 0:
        return None
    # A sort and a count of the steps: np.unique takes several times longer here.
    return (1 + int(np.count_nonzero(grams[1:] != grams[:-1]))) / grams.size


def sample_pairs(members: list[int], max_pairs: int = MAX_PAIRS_PER_GROUP) -> list[tuple[int, int]]:
    """Every pair of a small group; for a large one, neighbours on a ring, then next-but-one, ...

    Deterministic (no random state is touched), and every member is in a pair once there are
    at least as many pairs as members.
    """
    size = len(members)
    if size * (size - 1) // 2 <= max_pairs:
        return [(members[i], members[j]) for i in range(size) for j in range(i + 1, size)]
    seen: set[tuple[int, int]] = set()
    pairs = []
    for gap in range(1, size // 2 + 1):
        for i in range(size):
            a, b = sorted((i, (i + gap) % size))
            if (a, b) not in seen:
                seen.add((a, b))
                pairs.append((members[a], members[b]))
                if len(pairs) == max_pairs:
                    return pairs
    return pairs


def step_pairs(
    groups: list[list[int]], max_pairs_per_group: int = MAX_PAIRS_PER_GROUP, max_pairs: int = MAX_PAIRS
) -> list[tuple[int, int]]:
    """The pairs a step's edit distance is taken on: the same number from every group of two or more."""
    groups = [g for g in groups if len(g) > 1]
    per_group = max(1, min(max_pairs_per_group, max_pairs // max(len(groups), 1)))
    return [p for g in groups for p in sample_pairs(g, per_group)]


def mean_edit_distance(
    batch: TokenBatch,
    groups: list[list[int]],
    max_pairs_per_group: int = MAX_PAIRS_PER_GROUP,
    max_pairs: int = MAX_PAIRS,
    max_tokens: int = EDIT_MAX_TOKENS,
    engine: str = "auto",
) -> float | None:
    """Mean over sampled pairs in each group of Levenshtein(a, b) / max(len a, len b).

    Each group of two or more gets at least one pair, so more groups than max_pairs may give a
    few more pairs. Sequences are cut to their first max_tokens (at most 64) tokens; two empty
    ones are at distance 0. None when no group has two members. engine: "numpy", "rapidfuzz"
    (ImportError without it) or "auto" (rapidfuzz where installed); all give the same number.
    """
    if not 0 < max_tokens <= 64:
        raise ValueError(f"max_tokens={max_tokens}: the bit-parallel distance takes 1 to 64 tokens")
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: one of {', '.join(ENGINES)}")
    if engine == "rapidfuzz" and _rapidfuzz_distance is None:
        raise ImportError("engine='rapidfuzz' needs rapidfuzz: pip install rapidfuzz")
    pairs = step_pairs(groups, max_pairs_per_group, max_pairs)
    if not pairs:
        return None
    if engine == "numpy" or _rapidfuzz_distance is None:
        first, second = np.array(pairs, dtype=np.int64).T
        prefixes, lengths = _prefixes(batch, max_tokens)
        la, lb = lengths[first], lengths[second]
        dist = levenshtein_pairs(prefixes[first], prefixes[second], la, lb).tolist()
        longest = np.maximum(la, lb).tolist()
    else:
        # Only the sequences in a pair, as Python lists: rapidfuzz reads a numpy row element by element.
        rows = {i: batch.row(i)[:max_tokens].tolist() for i in set(chain.from_iterable(pairs))}
        dist = [_rapidfuzz_distance(rows[a], rows[b]) for a, b in pairs]
        longest = [max(len(rows[a]), len(rows[b])) for a, b in pairs]
    return math.fsum(d / n if n else 0.0 for d, n in zip(dist, longest, strict=True)) / len(dist)


def _prefixes(batch: TokenBatch, width: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.minimum(batch.lengths, width)
    cols = np.arange(width)
    valid = cols < lengths[:, None]
    index = np.where(valid, batch.offsets[:-1, None] + cols, 0)
    prefixes = batch.flat[index] if batch.flat.size else np.zeros(index.shape, np.int32)
    return np.where(valid, prefixes, -1), lengths


def levenshtein_pairs(a: np.ndarray, b: np.ndarray, la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """Edit distances of P pairs at once: a[p, :la[p]] against b[p, :lb[p]], lengths <= 64.

    Myers (1999) in Hyyrö's formulation for the global distance, one column of the table per
    token of b. The P columns are 72-bit lanes of one Python integer: 64 bits for the vertical
    deltas of a's positions, 8 guard bits that stop carries and shifts at the lane's edge and,
    in the two score accumulators, hold each lane's count (at most 64). A lane's bits above its
    length only ever move upwards, so they never touch the bit the score is read from.
    """
    num_pairs = len(la)
    la_list, lb_list = la.tolist(), lb.tolist()
    steps = max(lb_list, default=0)
    # match[j] has bit i of lane p set where a[p, i] == b[p, j].
    lanes = np.zeros((steps, num_pairs, _LANE_BYTES), dtype=np.uint8)
    eq = b[:, :steps, None] == a[:, None, :]
    lanes[:, :, : (a.shape[1] + 7) // 8] = np.packbits(eq, axis=-1, bitorder="little").transpose(1, 0, 2)
    match = [int.from_bytes(lanes[j].tobytes(), "little") for j in range(steps)]
    # Per-lane constants in plain Python: for tens of lanes cheaper than numpy's per-call cost.
    lane_bits = 8 * _LANE_BYTES
    mask = int.from_bytes((b"\xff" * 8 + b"\x00") * num_pairs, "little")  # the 64 data bits of every lane
    ones = int.from_bytes((b"\x01" + b"\x00" * 8) * num_pairs, "little")  # bit 0 of every lane
    score_at = [p * lane_bits + n - 1 for p, n in enumerate(la_list)]  # bit la-1: where the score is read
    score_bits = sum(1 << at for at, n in zip(score_at, la_list, strict=True) if n)
    ends = sorted(zip(lb_list, range(num_pairs), strict=True))  # (length of b, lane): when it stops counting
    done = 0

    pv, mv, plus, minus = mask, 0, 0, 0
    for j, eq_j in enumerate(match):
        while done < num_pairs and ends[done][0] <= j:  # the lane's b is used up
            p = ends[done][1]
            if la_list[p]:
                score_bits &= ~(1 << score_at[p])
            done += 1
        xv = eq_j | mv
        # The add may carry into a lane's guard bit; it reaches ph (masked by the shift below) and
        # never pv, so no mask is needed here.
        xh = (((eq_j & pv) + pv) ^ pv) | eq_j
        ph = mv | ((xh | pv) ^ mask)
        mh = pv & xh
        plus += ph & score_bits
        minus += mh & score_bits
        ph = ((ph << 1) | ones) & mask
        mh = (mh << 1) & mask
        pv = mh | ((xv | ph) ^ mask)
        mv = ph & xv
    dist = [
        n + ((plus >> at) & 0x7F) - ((minus >> at) & 0x7F) if n else m
        for n, m, at in zip(la_list, lb_list, score_at, strict=True)
    ]
    return np.array(dist, dtype=np.int64)


def edit_distance(a, b) -> int:
    """Plain Levenshtein distance by the textbook table (the reference the fast path is tested against)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]
