"""A rank that lost its peer in a gloo collective: the effect of another process's death, named as such.

Read (wordings from public issues of PyTorch, OpenRLHF-based trainers and others), with or without the
traceback above them and behind any prefix (a CI log's time, a rank tag):
    RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [172.17.0.2]:16786
    RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [192.168.70.92]:25266: Connection reset by peer
    RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:575] Connection closed by peer [127.0.1.1]:39827
The address is the peer's (the process that went away first); `rank-crash` reports the line as a rank
that ended after another failed (rules/rank_crash.PEER_LOST), so the peer's own failure leads.

Typical use:
    parse_peer_loss("RuntimeError: [../gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.1.17]:22780")
    # {"component": "peer-lost", "exc_type": "RuntimeError", "ip": "10.0.1.17", ...}
"""
from __future__ import annotations

import re
from typing import Any

# The pre-check's spellings (detectors.KEYWORDS): each holds an anchor byte (chunk_keywords.RARE_BYTES).
KEYWORDS = ("by peer",)
_GLOO = re.compile(r"(?:(\w+(?:\.\w+)*(?:Error|Exception)): )?\[[^\]]*?gloo[^\]]*?pair\.cc:\d+\] "
                   r"(?:(?:Read|Write) error )?(?:\[([^\]]+)\]:(\d+):? ?)?(Connection (?:closed|reset) by peer)"
                   r"(?: \[([^\]]+)\]:(\d+))?")


def parse_peer_loss(text: str) -> dict[str, Any] | None:
    """gloo's transport saying the process at the other end of a pair went away."""
    m = _GLOO.search(text) if "by peer" in text and "gloo" in text else None
    if m is None:
        return None
    ip, port = (m.group(5), m.group(6)) if m.group(5) else (m.group(2), m.group(3))
    where = f" {ip}:{port}" if ip else ""
    return {"component": "peer-lost", "exc_type": m.group(1) or "RuntimeError", "ip": ip,
            "message": f"gloo: {m.group(4)}{where} (the process at the other end went away)",
            "exit_detail": text.strip()[:300]}
