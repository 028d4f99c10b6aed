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
# Found from its anchor, never by a pattern retried at every `[`: the lazy `\[[^\]]*?gloo[^\]]*?pair\.cc` that
# was here is cubic on a long line of "[gloo " pieces (24 KB: over a minute, holding the GIL that watch's other
# threads need). The path in brackets before each "pair.cc:" is found with str methods (short, no bracket,
# names gloo); the rest is matched from the anchor on, the exception's type in the few characters before it.
_PATH_CHARS = 400
_TAIL = re.compile(r"pair\.cc:\d+\] (?:(?:Read|Write) error )?(?:\[([^\]\[]{1,100})\]:(\d+):? ?)?"
                   r"(Connection (?:closed|reset) by peer)(?: \[([^\]\[]{1,100})\]:(\d+))?")
_EXC_BEFORE = re.compile(r"(?<![\w.])(\w{1,100}(?:\.\w{1,100}){0,10}(?:Error|Exception)): $")


def parse_peer_loss(text: str) -> dict[str, Any] | None:
    """gloo's transport saying the process at the other end of a pair went away."""
    found = _gloo_match(text) if "by peer" in text and "pair.cc:" in text else None
    if found is None:
        return None
    bracket, m = found
    exc = _EXC_BEFORE.search(text, max(0, bracket - 200), bracket)
    ip, port = (m.group(4), m.group(5)) if m.group(4) else (m.group(1), m.group(2))
    where = f" {ip}:{port}" if ip else ""
    return {"component": "peer-lost", "exc_type": exc.group(1) if exc else "RuntimeError", "ip": ip,
            "message": f"gloo: {m.group(3)}{where} (the process at the other end went away)",
            "exit_detail": text.strip()[:300]}


def _gloo_match(text: str) -> tuple[int, re.Match[str]] | None:
    """The first gloo pair.cc report in `text`: where its `[` stands, and the match from "pair.cc:" on."""
    start = text.find("pair.cc:")
    while start != -1:
        bracket = text.rfind("[", max(0, start - _PATH_CHARS), start)
        if bracket != -1 and "gloo" in text[bracket:start] and "]" not in text[bracket:start]:
            m = _TAIL.match(text, start)
            if m is not None:
                return bracket, m
        start = text.find("pair.cc:", start + 1)
    return None
