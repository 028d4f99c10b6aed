"""Hashes: the same tokens give the same 16 hex digits whatever container they came in."""
import numpy as np
import pytest
import torch

from grpo_doctor.checks.hashing import hash_bytes, hash_text, hash_to_int63, hash_token_ids, token_bytes


def test_a_hash_is_sixteen_hex_digits_of_blake2b():
    import hashlib

    assert hash_text("12+7=") == hashlib.blake2b(b"12+7=", digest_size=8).hexdigest()
    assert len(hash_text("")) == 16 and int(hash_text("x"), 16) >= 0


def test_token_ids_hash_alike_as_lists_numpy_arrays_and_tensors_of_any_int_width():
    ids = [12, 7, 2, 151_000]
    expected = hash_token_ids(ids)
    assert hash_token_ids(tuple(ids)) == expected
    assert hash_token_ids(np.array(ids, dtype=np.int64)) == expected
    assert hash_token_ids(np.array(ids, dtype=np.int32)) == expected
    assert hash_token_ids(torch.tensor(ids)) == expected
    assert hash_token_ids(torch.tensor(ids, dtype=torch.int32)) == expected
    assert token_bytes(ids) == np.array(ids, dtype="<i4").tobytes()  # the documented canonical form


def test_different_tokens_or_order_give_different_hashes():
    assert hash_token_ids([1, 2, 3]) != hash_token_ids([3, 2, 1])
    assert hash_token_ids([1, 2]) != hash_token_ids([1, 2, 0])
    assert hash_token_ids([]) == hash_bytes(b"")


@pytest.mark.parametrize(("ids", "error"), [
    ([2**31], ValueError),
    (np.array([2**40]), ValueError),
    (np.array([[1, 2]]), ValueError),
    (np.array([1.5]), TypeError),
    ([1.5], TypeError),
    ([None], TypeError),
])
def test_token_ids_that_are_not_int32_integers_are_refused(ids, error):
    with pytest.raises(error):
        hash_token_ids(ids)


def test_an_int63_key_is_non_negative_and_distinct_for_distinct_hashes():
    assert hash_to_int63("ffffffffffffffff") == 2**63 - 1
    assert hash_to_int63("0000000000000000") == 0
    assert hash_to_int63(hash_text("a")) != hash_to_int63(hash_text("b"))
