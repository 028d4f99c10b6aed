"""vLLM's engine memory lines: the profile at start-up (V0 and V1 wordings) and the KV-cache failures.

Read, one signature per informative line:
    the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90) = 71.24GiB
    model weights take 14.99GiB; non_torch_memory takes 0.14GiB; PyTorch activation peak memory takes
        1.45GiB; the rest of the memory reserved for KV Cache is 54.66GiB.
    Memory profiling results: duration=12.34s, total_gpu_memory=44.35GiB ... kv_cache_size=8.77GiB gpu_memory_utilization=0.42
    Loading model weights took 14.9889 GB  /  Model loading took 8.3215 GiB and 25.3 seconds
    # GPU blocks: 27123, # CPU blocks: 2048   (also "# cuda blocks: ...")
    Available KV cache memory: 54.66 GiB  /  GPU KV cache size: 447,712 tokens
    Maximum concurrency for 32,768 tokens per request: 13.66x
    ValueError: No available memory for the cache blocks. ...
    The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (20000). ...
vLLM labels GiB values "GB" (it divides by 2**30); they are read as GiB.

Typical use:
    parse_vllm_memory("Available KV cache memory: -1.50 GiB")  # {"kv_cache_bytes": -1610612736, "no_cache_memory": True}
"""
from __future__ import annotations

import re
from typing import Any

from grpo_doctor.logs.units import SIZE, int_or_none, to_bytes

# With "emory", one of these is in every line `parse_vllm_memory` reads.
KEYWORDS = (" blocks: ", "cache size", "concurrency", "took ")
# Wordings that wrap: (first phrase, its possible last phrases), for the scanner to join them.
JOINS = (("model weights take", ("KV Cache is",)), ("Memory profiling results", ("gpu_memory_utilization=",)),
         ("max seq len (", ("KV cache (", "KV cache memory (")))

_SIZES = (
    ("total_gpu_bytes", re.compile(r"total_gpu_memory \(" + SIZE + r"\)")),
    ("weights_bytes", re.compile(r"model weights take\s+" + SIZE)),
    ("non_torch_bytes", re.compile(r"non_torch_memory takes\s+" + SIZE)),
    ("activation_peak_bytes", re.compile(r"activation peak memory takes\s+" + SIZE)),
    ("kv_cache_bytes", re.compile(r"reserved for KV Cache is\s+" + SIZE)),
    ("weights_bytes", re.compile(r"(?:Loading model weights|Model loading) took\s+" + SIZE)),
    ("kv_cache_bytes", re.compile(r"Available KV cache memory:\s*" + SIZE)),
    ("kv_cache_bytes", re.compile(r"larger than the available KV cache memory \(" + SIZE + r"\)")),
)
_PAIRS = re.compile(r"\b(total_gpu_memory|peak_torch_memory|non_torch_memory|kv_cache_size)=" + SIZE)
_PAIR_NAMES = {"total_gpu_memory": "total_gpu_bytes", "peak_torch_memory": "peak_torch_bytes",
               "non_torch_memory": "non_torch_bytes", "kv_cache_size": "kv_cache_bytes"}
_UTILIZATION = re.compile(r"gpu_memory_utilization(?: \(|=)(\d+(?:\.\d+)?)")
_BLOCKS = re.compile(r"# (?:GPU|cuda|gpu|\w+) blocks: (\d+), # CPU blocks: (\d+)")
_TOKENS = re.compile(r"GPU KV cache size:\s*(\d[\d,]*) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for (\d[\d,]*) tokens per request:\s*(\d+(?:\.\d+)?)x")
_MAX_SEQ = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)")
_NEEDED = re.compile(r"max seq len \((\d+)\), \(?" + SIZE + r" KV cache is needed")
_NO_MEMORY = "No available memory for the cache blocks"


def parse_vllm_memory(text: str) -> dict[str, Any] | None:
    """Fields of one vLLM memory line (see kinds.FIELDS), or None when it states nothing of them."""
    found: dict[str, Any] = {}
    for name, pattern in _SIZES:
        m = pattern.search(text)
        if m:
            found.setdefault(name, to_bytes(m.group(1), m.group(2)))
    if "Memory profiling results" in text:
        for m in _PAIRS.finditer(text):
            found.setdefault(_PAIR_NAMES[m.group(1)], to_bytes(m.group(2), m.group(3)))
    m = _UTILIZATION.search(text)
    if m:
        found["gpu_memory_utilization"] = float(m.group(1))
    m = _BLOCKS.search(text)
    if m:
        found["num_gpu_blocks"], found["num_cpu_blocks"] = int(m.group(1)), int(m.group(2))
    m = _TOKENS.search(text)
    if m:
        found["kv_cache_tokens"] = int_or_none(m.group(1))
    m = _CONCURRENCY.search(text)
    if m:
        found["max_model_len"], found["max_concurrency"] = int_or_none(m.group(1)), float(m.group(2))
    m = _MAX_SEQ.search(text) or _NEEDED.search(text)
    no_room = _NO_MEMORY in text or m is not None
    if m:
        found["max_model_len"] = int(m.group(1))
        if m.re is _MAX_SEQ:
            found["kv_cache_tokens"] = int(m.group(2))
    if not found and not no_room:
        return None
    no_room = no_room or (found.get("kv_cache_bytes") or 0) < 0 or found.get("num_gpu_blocks") == 0
    found["no_cache_memory"] = no_room
    return found
