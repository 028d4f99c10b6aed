"""NCCL messages: ProcessGroupNCCL's watchdog (timeouts, status, heartbeat), NCCL errors and WARN lines.

Each process-group tag variant is read: `[Rank 3] `, `[PG 2 Rank 3] `, `[PG 0 (default_pg) Rank 1] `,
`[PG ID 0 PG GUID 0(default_pg) Rank 1] `; the rank in it is the rank inside that group. The
watchdog's WorkNCCL(...) is read key by key, so older releases without NumelIn/NumelOut and newer
ones with more keys both parse. Status lines come in three wordings ("failure detected by
watchdog at work sequence id: 5 PG status: last enqueued work: 5, last completed work: 4",
"Exception (either an error or timeout) detected by watchdog at work: 5, last enqueued NCCL
work: ...", "Timeout at NCCL work: 5, ..."). The heartbeat monitor's "watchdog got stuck for N seconds"
and "Terminating the process ... due to ProcessGroupNCCL watchdog hang" are nccl-watchdog-stuck.

Typical use:
    parse_watchdog_timeout("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
                           "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 "
                           "milliseconds before timing out.")["ran_for_ms"]  # 600081
    parse_nccl_warn("node-3:40417:40502 [7] NCCL WARN socketStartConnect: Connect to 127.0.1.1<43561> failed")
"""
from __future__ import annotations

import ipaddress
import re
from typing import Any

from grpo_doctor.logs.units import int_or_none

TIMEOUT_START = "Watchdog caught collective operation timeout"
TIMEOUT_END = "before timing out"
TIMEOUT_VOCABULARY = ("WorkNCCL", "SeqNum", "OpType", "Numel", "Timeout", "ran for", "milliseconds", "timing out")
ERROR_START = "NCCL error"
_STATUS_STARTS = ("Timeout at NCCL work:", "detected by watchdog at work:", "work sequence id:")
STATUS_VOCABULARY = ("work", "enqueued", "started", "completed")
ERROR_VOCABULARY = ("nccl", "Last error", "NCCL")

_PG_TAG = re.compile(
    r"\[(?:PG ID (?P<id>\d+) PG GUID [^\s\]]*?(?:\((?P<gdesc>[^)]*)\))?|PG (?P<pg>\d+)(?: \((?P<desc>[^)]*)\))?) "
    r"Rank (?P<rank>\d+)\]|\[Rank (?P<r>\d+)\]"
)
_WORK = re.compile(r"WorkNCCL\((?P<body>(?:[^()]|\(ms\))*)\)(?:\s+ran for (?P<ran>\d+) milliseconds)?")
_STATUS_SEQ = re.compile(r"(?:work sequence id:|detected by watchdog at work:|Timeout at NCCL work:)\s*(-?\d+)")
_ENQUEUED = re.compile(r"[Ll]ast enqueued (?:NCCL )?work:\s*(-?\d+)")
_STARTED = re.compile(r"last started (?:NCCL )?work:\s*(-?\d+)")
_COMPLETED = re.compile(r"[Ll]ast completed (?:NCCL )?work:\s*(-?\d+)")
_STUCK = re.compile(r"watchdog got stuck for (\d+) seconds")
_TERMINATING = ("Terminating the process after attempting to dump debug info", "Heartbeat monitor timed out")
_DUMP_SIGNAL = "dump signal due to a collective timeout"
_DUMP_FROM = re.compile(r"dump signal due to a collective timeout from\s+rank (\d+)")
_ERROR = re.compile(
    r"NCCL error(?: in: (?P<file>[^\s,]+?):(?P<line>\d+))?[,:] (?P<detail>.+?)"
    r"(?: \(run with NCCL_DEBUG=\w+ for details\))?(?:, NCCL [vV]ersion (?P<version>[\w.+-]+)|[.;]|\s*$| ncclR| nccl\w+Error)"
)
# ncclResult_t names; two of them do not end in "Error".
_ERROR_CODE = re.compile(r"\b(nccl(?:[A-Z]\w*Error|InvalidArgument|InvalidUsage))\b")
_LAST_ERROR = re.compile(r"Last error:\s*(.*?)\s*$")
_NCCL_HEADER = re.compile(r"([\w.-]+):(\d+):\d+ \[(\d+)\]")
_WARN = re.compile(r"NCCL WARN\s+(.*?)\s*$")
_ADDRESS = re.compile(r"(?:Connect to|remote peer|connect to)\s+\[?([0-9A-Za-z.:%_-]+?)\]?<(\d+)>")
_CUDA_FAILURE = re.compile(r"Cuda failure(?: \d+)? '([^']*)'")


def starts_status(text: str) -> bool:
    """A watchdog status line cut before its last count (a collector split it: joined by the scanner)."""
    return any(start in text for start in _STATUS_STARTS) and "ast completed" not in text


def status_complete(text: str) -> bool:
    return _COMPLETED.search(text) is not None


def starts_error(text: str) -> bool:
    return ERROR_START in text and _ERROR.search(text) is not None


def error_complete(text: str) -> bool:
    """True once the `Last error:` detail has arrived (NCCL prints it on the line after the label)."""
    m = _LAST_ERROR.search(text)
    return m is not None and bool(m.group(1))


def parse_pg_tag(text: str) -> dict[str, Any]:
    """`rank` / `pg` / `pg_desc` of the first process-group tag in `text` (None where absent)."""
    m = _PG_TAG.search(text)
    if m is None:
        return {"rank": None, "pg": None, "pg_desc": None}
    rank = m.group("rank") or m.group("r")
    pg = m.group("id") or m.group("pg")
    return {"rank": int(rank), "pg": int(pg) if pg else None, "pg_desc": m.group("gdesc") or m.group("desc")}


_OP_NAME = re.compile(r"[A-Za-z_]+")


def _op_name(raw: str | None) -> str | None:
    """The op as NCCL names it; a paste that cut the line may have glued other text to it (a terminal's
    "[451/1919]" marker, the next line's words): those are not part of the name."""
    m = _OP_NAME.match(raw or "")
    return m.group() if m else None


def parse_watchdog_timeout(text: str) -> dict[str, Any] | None:
    if TIMEOUT_START not in text:
        return None
    m = _WORK.search(text)
    if m is None:
        return None
    pairs = dict(item.split("=", 1) for item in m.group("body").split(", ") if "=" in item)
    return {"seq": int_or_none(pairs.get("SeqNum")), "op": _op_name(pairs.get("OpType")),
            "numel_in": int_or_none(pairs.get("NumelIn")), "numel_out": int_or_none(pairs.get("NumelOut")),
            "timeout_ms": int_or_none(pairs.get("Timeout(ms)")), "ran_for_ms": int_or_none(m.group("ran")),
            **parse_pg_tag(text)}


def parse_watchdog_status(text: str) -> dict[str, Any] | None:
    if "ast enqueued" not in text:
        return None
    seq, enqueued = _STATUS_SEQ.search(text), _ENQUEUED.search(text)
    # A rank told to dump by another's timeout ("Received a dump signal due to a collective timeout
    # ... Last enqueued NCCL work: 23, ...") states its counts but no sequence number.
    if enqueued is None or (seq is None and _DUMP_SIGNAL not in text):
        return None
    started, completed = _STARTED.search(text), _COMPLETED.search(text)
    source = _DUMP_FROM.search(text) if seq is None else None  # "... from  rank 13": rank 13 timed out
    return {"seq": int(seq.group(1)) if seq else None, "last_enqueued": int(enqueued.group(1)),
            "timed_out_rank": int(source.group(1)) if source else None,
            "last_started": int(started.group(1)) if started else None,
            "last_completed": int(completed.group(1)) if completed else None, **parse_pg_tag(text)}


def parse_watchdog_stuck(text: str) -> dict[str, Any] | None:
    """The heartbeat monitor: "watchdog got stuck for N seconds", or its last word before the abort,
    "Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang"."""
    if any(words in text for words in _TERMINATING):
        return {"stuck_s": None, "terminated": True, **parse_pg_tag(text)}
    m = _STUCK.search(text) if "got stuck" in text else None
    return {"stuck_s": int(m.group(1)), "terminated": False, **parse_pg_tag(text)} if m else None


def parse_nccl_error(text: str) -> dict[str, Any] | None:
    """`NCCL error in: FILE:LINE, DETAIL (run with ...), NCCL version V` or `NCCL error: DETAIL`,
    with the `ncclXxxError` line and the `Last error:` detail where they follow (joined by the scanner)."""
    m = _ERROR.search(text) if ERROR_START in text else None
    if m is None:
        return None
    code = _ERROR_CODE.search(text, m.end("detail"))
    last = _LAST_ERROR.search(text)
    last_error = last.group(1) or None if last else None
    found = {"detail": m.group("detail").strip(), "file": m.group("file"), "line": int_or_none(m.group("line")),
             "nccl_version": m.group("version"), "error_code": code.group(1) if code else None,
             "last_error": last_error}
    found.update(_address(last_error or ""))
    found.update(parse_pg_tag(text[:m.start()]))  # the tag before the error, not one quoted in its detail
    return found


# Failure reports that name no watchdog timeout and no `NCCL error`: ProcessGroupNCCL taking the process down
# after a failed (or timed out) work, and NCCL's INFO error chain
# ("misc/socket.cc:538 -> 3", each caller adding its own line: the first is where it failed).
# The pre-check's spellings (detectors.KEYWORDS; a chain's "socket.cc:" line is hot by "ocket" already).
# Its "To avoid data inconsistency, we are taking the entire process down" follows on a line of its own since
# torch 2.x; it is read the same (a paste may hold it alone, the line before cut off), ProcessGroupHCCL's and
# ProcessGroupXCCL's included, which print the same words.
# NCCL's "comm 0x... rank 0 nranks 4 ... - Abort COMPLETE" is no failure report: torch 2.3 to 2.5 abort every
# communicator in a normal destroy_process_group (pytorch/pytorch#119250, undone in #141510), and Ctrl-C ends
# in one; after a failure the failure's own lines say what happened. It stays a known NCCL INFO line.
TAKEN_DOWN_WORDS = "data inconsistency"
FAILURE_KEYWORDS = ("NCCL operations", TAKEN_DOWN_WORDS)
# The detail of the report that follows a failure said elsewhere (a watchdog timeout, an NCCL error): the
# report is theirs when the log holds one.
TAKEN_DOWN = "an NCCL operation failed or its timeout expired; ProcessGroupNCCL took the process down"
FOLLOW_UPS = (TAKEN_DOWN,)
_TAKEN_DOWN = ("Some NCCL operations have failed or timed out",
               "To avoid data inconsistency, we are taking the entire process down")
_CHAIN = re.compile(r"NCCL INFO ([\w/.-]+\.cc):(\d+) -> (\d+)\s*$")
RESULT_NAMES = {1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError", 4: "ncclInvalidArgument",
                5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}


def parse_nccl_failure(text: str) -> dict[str, Any] | None:
    """A failure NCCL or ProcessGroupNCCL reports without `NCCL error` (see FAILURE_KEYWORDS), as an
    nccl-error's fields."""
    found: dict[str, Any] | None = None
    if any(words in text for words in _TAKEN_DOWN):
        found = {"detail": TAKEN_DOWN}
    elif " -> " in text and (m := _CHAIN.search(text)) is not None and m.group(3) != "0":
        code = int(m.group(3))
        name = RESULT_NAMES.get(code)
        found = {"detail": f"NCCL call failed at {m.group(1)}:{m.group(2)} (result {code}" + (f", {name})" if name else ")"),
                 "file": m.group(1), "line": int(m.group(2)), "error_code": name}
    if found is None:
        return None
    return {**found, **parse_pg_tag(text)}


def parse_nccl_warn(text: str) -> dict[str, Any] | None:
    """An `NCCL WARN` line, with NCCL's `host:pid:tid [device]` header and a failed peer's address."""
    m = _WARN.search(text) if "NCCL WARN" in text else None
    if m is None:
        return None
    message = m.group(1)
    header = _NCCL_HEADER.search(text, 0, m.start())
    cuda = _CUDA_FAILURE.search(message)
    return {"message": message, "host": header.group(1) if header else None,
            "pid": int(header.group(2)) if header else None, "device": int(header.group(3)) if header else None,
            "cuda_error": cuda.group(1) if cuda else None, **_address(message)}


def _address(text: str) -> dict[str, Any]:
    m = _ADDRESS.search(text)
    if m is None:
        return {"address": None, "port": None, "bad_interface": None}
    return {"address": m.group(1), "port": int(m.group(2)), "bad_interface": is_bad_interface(m.group(1))}


def is_bad_interface(address: str) -> bool:
    """True for loopback (127.x, ::1), link-local (169.254.x, fe80::) and unspecified addresses:
    peers on other hosts cannot reach them, so NCCL or c10d bound the wrong interface."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:  # a host name: nothing to say from the text alone
        return False
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified
