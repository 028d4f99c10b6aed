"""Who hosts the fleet's TCPStore after node 0's watch dies: its heir, agreed on before it died.

The store lives in the watch that hosts it; with one run directory per node it is the fleet's only channel.
Once it is gone the watches cannot agree on anything, so they agree beforehand: while it lives, the store's
host names its heir in its beat (the live node with the lowest id other than its own, with that watch's
address toward the store, which each watch puts in its own beat). Every watch reads the host's beat, so
every watch knows the same heir. When the store fails and its host has been silent for the fleet's
`stale_s` (10 s), each watch moves to the heir: the heir hosts a new store on its own address, at the same
port; the others connect to it there. The heir, once hosting, names its own heir in turn. Meanwhile every
watch judges its own node alone (fleet.py says so in one line), as it does without a fleet.

What it does not cover: a heir that died with the host, or before the host saw it go silent (the others
then try it until the host's store or the heir answers: each node judged alone meanwhile); a host that is
cut off rather than dead keeps its own store, and judges its node alone.

Typical use:
    addr = address_toward("10.0.0.1", 29511)          # "10.0.0.2": this node's address on that route
    heir = pick_heir(board, now, me=0, addrs={1: "10.0.0.2", 2: "10.0.0.3"})   # (1, "10.0.0.2")
    moved = move_to_heir(store_host=0, board=board, now=now, me=1)             # (1, "10.0.0.2") once 0 is silent
"""
from __future__ import annotations

import socket
from collections.abc import Mapping

from grpo_doctor.supervisor.fleet_board import Board


def address_toward(addr: str, port: int) -> str | None:
    """This machine's own address on the route to (addr, port): a UDP socket's local end once "connected"
    (nothing is sent). None where there is no route or the name does not resolve quickly."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((addr, port))
            return sock.getsockname()[0]
    except OSError:
        return None


def pick_heir(board: Board, now: float, me: int, addrs: Mapping[int, str]) -> tuple[int, str] | None:
    """As the store's host: the live node with the lowest id after this one whose address is known."""
    return next(((n, addrs[n]) for n in board.live(now) if n != me and n in addrs), None)


def move_to_heir(store_host: int, board: Board, now: float, me: int) -> tuple[int, str] | None:
    """Where the store goes once its host is silent: the heir its last beat named; None while it is live,
    this watch is the host, or the host named no heir."""
    if store_host == me or board.is_live(store_host, now):
        return None
    beat = board.beats.get(store_host)
    return beat.heir if beat is not None else None
