"""Short, stable hashes of completions, prompts and random-generator states.

A hash is 16 hex digits: BLAKE2b with an 8-byte digest. Token ids are hashed as little-endian
int32 bytes whatever container they arrive in (list, numpy array, torch tensor), so two ranks
that sampled the same tokens agree even when one holds int64 tensors and the other Python lists.
int32 holds every real vocabulary and halves the bytes hashed against int64 (hashing is a large
part of the per-step cost). Text is hashed as UTF-8. With 64 bits an accidental collision among
the n completions of a step has probability about n^2 / 2^65 (1e-10 for n = 100,000).

Typical use:
    hash_token_ids([12, 7, 2]) == hash_token_ids(np.array([12, 7, 2]))   # True
    hash_text("12+7=")                                                    # '3f0c...' (16 hex digits)
    hash_bytes(rng_state_bytes)
"""
from __future__ import annotations

import hashlib
import sys
from array import array

DIGEST_BYTES = 8
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_INT32_CODE = "i"  # C int: 4 bytes on every platform CPython supports


def hash_bytes(data: bytes | bytearray | memoryview) -> str:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def hash_text(text: str) -> str:
    return hash_bytes(text.encode("utf-8"))


def hash_token_ids(ids) -> str:
    """ids: a sequence of ints, a 1-D integer numpy array or a 1-D integer torch tensor (any device)."""
    return hash_bytes(token_bytes(ids))


def token_bytes(ids) -> bytes:
    """The canonical bytes of a token-id sequence: little-endian int32.

    ValueError for ids outside int32 or an array that is not 1-D; TypeError for non-integers.
    """
    if hasattr(ids, "detach"):  # a torch tensor, perhaps on a GPU; torch is never imported here
        ids = ids.detach().cpu().numpy()
    if hasattr(ids, "astype"):  # numpy: check first, astype would wrap or truncate silently
        if ids.ndim != 1:
            raise ValueError(f"token ids must be 1-D, got shape {tuple(ids.shape)}")
        if ids.dtype.kind not in "iub":
            raise TypeError(f"token ids must be integers, got dtype {ids.dtype}")
        if ids.size and (int(ids.min()) < INT32_MIN or int(ids.max()) > INT32_MAX):
            raise ValueError("token id outside int32")
        return ids.astype("<i4", copy=False).tobytes()
    try:
        packed = array(_INT32_CODE, ids)
    except OverflowError:
        raise ValueError("token id outside int32") from None
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def hash_to_int63(hex_hash: str) -> int:
    """A 16-hex-digit hash as a non-negative int64 (for tensors; -1 stays free as padding)."""
    return int(hex_hash, 16) >> 1
