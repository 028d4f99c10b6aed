"""distinct-n and the bit-parallel edit distance, on inputs with known answers."""
import itertools
import random

import numpy as np
import pytest

from grpo_doctor.checks.diversity import (
    MAX_PAIRS,
    MAX_PAIRS_PER_GROUP,
    TokenBatch,
    distinct_n,
    edit_distance,
    levenshtein_pairs,
    mean_edit_distance,
    sample_pairs,
    step_pairs,
)


def test_a_batch_concatenates_lists_arrays_and_tensors_alike():
    import torch

    seqs = [[5, 6, 7], [], [9]]
    for given in (seqs, [np.array(s, dtype=np.int64) for s in seqs], [torch.tensor(s, dtype=torch.long) for s in seqs]):
        batch = TokenBatch.from_sequences(given)
        assert batch.flat.tolist() == [5, 6, 7, 9] and batch.lengths.tolist() == [3, 0, 1]
        assert batch.row(0).tolist() == [5, 6, 7] and len(batch) == 3


def test_equal_words_get_equal_ids_within_a_batch():
    batch = TokenBatch.from_words(["the cat sat", "the  dog\nsat", ""])
    ids = batch.flat.tolist()
    assert len(ids) == 6 and ids[0] == ids[3] and ids[2] == ids[5] and len(set(ids)) == 4
    assert batch.lengths.tolist() == [3, 3, 0]


def test_distinct_1_and_2_count_within_sequences_only():
    batch = TokenBatch.from_sequences([[1, 2, 1, 2], [2, 1]])
    assert distinct_n(batch, 1) == 2 / 6
    # bigrams: (1,2) (2,1) (1,2) | (2,1); the (2,2) across the boundary is not one.
    assert distinct_n(batch, 2) == 2 / 4


def test_identical_completions_have_low_distinct_n_and_all_different_ones_one():
    same = TokenBatch.from_sequences([[4, 5, 6]] * 4)
    assert distinct_n(same, 1) == 3 / 12 and distinct_n(same, 2) == 2 / 8
    different = TokenBatch.from_sequences([[1, 2], [3, 4], [5, 6]])
    assert distinct_n(different, 1) == 1.0 and distinct_n(different, 2) == 1.0


def test_distinct_n_is_none_without_ngrams_and_large_or_negative_ids_count_like_any_other():
    assert distinct_n(TokenBatch.from_sequences([[], []]), 1) is None
    assert distinct_n(TokenBatch.from_sequences([[1], [2]]), 2) is None
    big = TokenBatch.from_sequences([[2**30, 2**30, 7]])
    assert distinct_n(big, 1) == 2 / 3 and distinct_n(big, 2) == 1.0
    negative = TokenBatch.from_sequences([[-1, 5, -1, 5], [5, -1]])
    assert distinct_n(negative, 1) == 2 / 6 and distinct_n(negative, 2) == 2 / 4
    with pytest.raises(ValueError):
        distinct_n(big, 3)


def test_pairs_cover_small_groups_fully_and_large_ones_around_a_ring():
    assert sample_pairs([10, 11, 12]) == [(10, 11), (10, 12), (11, 12)]
    pairs = sample_pairs(list(range(8)), max_pairs=8)
    assert pairs == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (0, 7)]
    big = sample_pairs(list(range(20)), max_pairs=16)
    assert len(big) == len(set(big)) == 16
    assert sample_pairs([3]) == []


@pytest.mark.parametrize("seed", range(5))
def test_bit_parallel_distance_equals_the_textbook_table(seed):
    rng = random.Random(seed)
    pairs = []
    for _ in range(60):
        alphabet = rng.choice([2, 4, 50])
        la, lb = rng.randint(0, 64), rng.randint(0, 64)
        pairs.append(([rng.randrange(alphabet) for _ in range(la)], [rng.randrange(alphabet) for _ in range(lb)]))
    pairs += [([], []), ([1] * 64, [1] * 64), ([1] * 64, []), ([], [2] * 64), ([1], [2]), (list(range(64)), list(range(1, 65)))]
    a = np.full((len(pairs), 64), -1, dtype=np.int32)
    b = np.full((len(pairs), 64), -1, dtype=np.int32)
    for p, (x, y) in enumerate(pairs):
        a[p, : len(x)], b[p, : len(y)] = x, y
    la = np.array([len(x) for x, _ in pairs])
    lb = np.array([len(y) for _, y in pairs])
    got = levenshtein_pairs(a, b, la, lb).tolist()
    assert got == [edit_distance(x, y) for x, y in pairs]


def test_edit_distance_textbook_cases():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance([], [1, 2]) == 2 and edit_distance([1, 2, 3], [1, 2, 3]) == 0


def test_mean_edit_distance_within_groups_is_normalised_by_the_longer_sequence():
    batch = TokenBatch.from_sequences([[5, 6, 7], [5, 6, 7], [9, 9], [1, 2, 3, 4], [1, 2, 3, 5]])
    # group 0: (0,1)=0/3, (0,2)=3/3, (1,2)=3/3; group 1: (3,4)=1/4
    assert mean_edit_distance(batch, [[0, 1, 2], [3, 4]]) == pytest.approx((0 + 1 + 1 + 0.25) / 4)
    assert mean_edit_distance(batch, [[0, 1]]) == 0.0
    assert mean_edit_distance(batch, [[0], [1]]) is None  # no group of two
    assert mean_edit_distance(TokenBatch.from_sequences([[], []]), [[0, 1]]) == 0.0


def test_mean_edit_distance_reads_only_the_first_tokens_and_a_bounded_number_of_pairs():
    head = list(range(64))
    batch = TokenBatch.from_sequences([head + [1] * 400, head + [2] * 400])
    assert mean_edit_distance(batch, [[0, 1]]) == 0.0  # they differ only after token 64
    assert mean_edit_distance(batch, [[0, 1]], max_tokens=64) == 0.0
    with pytest.raises(ValueError):
        mean_edit_distance(batch, [[0, 1]], max_tokens=65)
    many = TokenBatch.from_sequences([[i] for i in range(200)])
    groups = [list(range(i, i + 10)) for i in range(0, 200, 10)]  # 20 groups of 10
    assert mean_edit_distance(many, groups) == 1.0


def test_a_step_samples_the_same_number_of_pairs_from_every_group_and_a_bounded_total():
    def groups(count, size):
        return [list(range(i * size, (i + 1) * size)) for i in range(count)]

    assert MAX_PAIRS == 32 and MAX_PAIRS_PER_GROUP == 16
    assert len(step_pairs(groups(8, 8))) == 32  # 4 per group
    assert len(step_pairs(groups(2, 8))) == 32  # 16 per group
    assert len(step_pairs(groups(1, 100))) == 16  # the per-group bound
    assert len(step_pairs(groups(20, 10))) == 20  # more groups than the total: one each
    assert len(step_pairs(groups(64, 1))) == 0  # no group of two on this rank


def test_a_group_of_clones_has_distance_zero_and_distinct_completions_distance_one():
    clones = TokenBatch.from_sequences([[3, 1, 4, 1, 5]] * 8)
    assert mean_edit_distance(clones, [list(range(8))]) == 0.0
    distinct = TokenBatch.from_sequences([[i] * 5 for i in range(8)])
    assert mean_edit_distance(distinct, [list(range(8))]) == 1.0
    assert list(itertools.islice(sample_pairs(list(range(8))), 1)) == [(0, 1)]


@pytest.mark.parametrize("seed", range(4))
def test_numpy_and_rapidfuzz_give_exactly_the_same_mean_edit_distance(seed):
    pytest.importorskip("rapidfuzz")
    rng = random.Random(seed)
    seqs = []
    for _ in range(96):
        alphabet = rng.choice([2, 5, 151_936])
        length = rng.choice([0, 1, rng.randint(2, 63), 64, 65, rng.randint(66, 300)])
        # Negative ids too: numpy pads short rows with -1, which must never match a real -1.
        seqs.append([rng.randrange(alphabet) - (1 if alphabet == 2 else 0) for _ in range(length)])
    batch = TokenBatch.from_sequences(seqs)
    for size in (2, 3, 8, 12, 96):
        groups = [list(range(i, min(i + size, len(seqs)))) for i in range(0, len(seqs), size)]
        for max_tokens in (1, 17, 64):
            by_engine = {e: mean_edit_distance(batch, groups, max_tokens=max_tokens, engine=e)
                         for e in ("numpy", "rapidfuzz", "auto")}
            assert by_engine["numpy"] == by_engine["rapidfuzz"] == by_engine["auto"], (size, max_tokens, by_engine)
    words = TokenBatch.from_words(["the cat sat on the mat", "the cat sat on a mat", "", "a dog"])
    assert mean_edit_distance(words, [[0, 1, 2, 3]], engine="numpy") == mean_edit_distance(
        words, [[0, 1, 2, 3]], engine="rapidfuzz")


def test_an_unknown_edit_distance_engine_is_refused_with_the_choices():
    batch = TokenBatch.from_sequences([[1], [2]])
    with pytest.raises(ValueError, match="auto, numpy, rapidfuzz"):
        mean_edit_distance(batch, [[0, 1]], engine="levenshtein")
