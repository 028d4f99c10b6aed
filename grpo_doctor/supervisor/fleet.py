"""The watches of one job's nodes as one fleet: a background thread that publishes this node's beat and
messages and reads the others', so that a hang is judged over every rank of every node, once.

The protocol (docs/clusters.md, "One verdict for all nodes"):
1. Every watch publishes its beat (fleet_board.py's NodeBeat) every `poll_s`: its ranks' progress and
   whether they all stalled.
2. The decider, the live watch with the lowest node id, sees every live node stalled and asks for a
   look (`ask`): its beat names the look.
3. Every watch that sees the look takes its own ranks' stacks (supervisor/hang.py's investigate) and
   publishes them (`answer`, message kind "stacks").
4. The decider merges the stacks of every node that answered within its bounded wait, names the
   nodes that did not, and publishes the verdict (`decide`, kind "verdict"); every watch prints the
   same verdict, writes it as its own hang-N.json and, when the verdict says so, ends its own node's
   process tree. Only the decider sends the alert.
A watch that hears no other node falls back to judging its own node alone (watch.py says so). When the
store's host dies, its heir hosts a new one and the others follow (fleet_takeover.py; one line each).

All channel I/O (fleet_channel.py) runs on this module's thread, each call bounded by a timeout; watch's
main loop only hands over what to publish and reads the latest `view()`, so neither the job nor watch
ever waits on another node.

Typical use:
    fleet = Fleet(FleetSettings(node=1, nnodes=2, host="node1", channel="auto", store=("node0", 29511)),
                  paths, note=console.note)
    fleet.start()
    fleet.set_beat(state="stalled", stall="3f2a", idle_s=12.0, ranks={2: (3, "reward", 12.0, 4711)})
    view = fleet.view()          # view.decider, view.look, view.verdict, view.stacks
    fleet.answer(view.look, local_report)
    fleet.job_ended()            # this node's job exited: a store lost from now on is the job's end, not a death
    fleet.finish()               # a last beat saying this node is done (the store's host: heard by the others)
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.json_shapes import FormatError
from grpo_doctor.schema.watch_files import HangReport
from grpo_doctor.supervisor.fleet_board import Board, NodeBeat
from grpo_doctor.supervisor.fleet_channel import (
    Channel,
    ChannelError,
    Channels,
    DirChannel,
    StoreChannel,
    torch_importable,
)
from grpo_doctor.supervisor.fleet_takeover import address_toward, move_to_heir, pick_heir

CHANNELS = ("auto", "dir", "store", "off")  # --fleet
STORE_RETRY_S = 5.0  # between attempts to reach a store that is not up (yet)


@dataclass(frozen=True)
class FleetSettings:
    node: int  # this node's id (NODE_RANK, SLURM_NODEID)
    nnodes: int
    host: str
    channel: str = "auto"  # auto (directory and store), dir, store
    store: tuple[str, int] | None = None  # (master address, port) where node 0's watch hosts the store
    poll_s: float = 0.25  # read period (1 s above 16 nodes); messages to publish wake the thread at once
    beat_s: float = 1.0  # a beat at least this often; at once when its state, look or verdict changes
    stale_s: float = 10.0  # a node whose beat did not change for this long is silent
    timeout_s: float = 5.0  # the longest one channel call may block
    end_wait_s: float = 10.0  # at the end, how long the store's host keeps it up for the live nodes to hear its "done"


@dataclass(frozen=True)
class FleetView:
    """The fleet as the thread last heard it; what watch's main loop decides with."""

    me: int
    decider: int
    live: tuple[int, ...] = ()
    connected: bool = False  # some other node's watch is heard from now
    beats: dict[int, NodeBeat] = field(default_factory=dict)  # the other nodes', as last heard
    silent: dict[int, str] = field(default_factory=dict)  # node -> "no report for 40 s"
    look: str | None = None  # the look the decider asks for (from its beat; our own as the decider)
    stacks: dict[int, tuple[str, HangReport]] = field(default_factory=dict)  # node -> (look, its report)
    verdict: tuple[str, HangReport] | None = None  # the decider's latest verdict: (id, report)
    channel: str = ""

    @property
    def deciding(self) -> bool:
        return self.decider == self.me

    def hosts(self) -> dict[int, str]:
        return {n: b.host for n, b in self.beats.items()}


class Fleet:
    def __init__(self, settings: FleetSettings, paths: RunPaths, note: Callable[[str], None],
                 start_t: float | None = None) -> None:
        self.settings = settings
        self.paths = paths
        self.note = note
        self.start_t = start_t if start_t is not None else time.time()
        self.board = Board(settings.node, settings.nnodes, settings.stale_s, time.monotonic())
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat = NodeBeat(node=settings.node, host=settings.host)
        self._seq = 0
        self._outbox: dict[str, bytes] = {}  # kind -> message to publish next
        self._view = FleetView(me=settings.node, decider=settings.node)
        self._stacks: dict[int, tuple[str, HangReport]] = {}
        self._verdict: tuple[str, HangReport] | None = None
        self._said: set[str] = set()
        self.dir_channel: DirChannel | None = None
        self.store_channel: StoreChannel | None = None
        self.channel: Channel | None = None
        self.beat_bytes = 0  # the size of the latest beat published
        self._beat_sent: tuple = ()  # what of the last beat published must go out at once when it changes
        self._beat_sent_mono = float("-inf")
        self.finishing = False
        self.num_errors = 0
        self._store: _Retrying | None = None
        self.store_host = 0  # the node whose watch hosts the store this watch uses (its heir after it dies)
        self._addr: str | None = None  # this watch's address toward the store, found on the thread

    # -- the main loop's side: no I/O ----------------------------------------------------------

    def start(self) -> None:
        self.channel = self._make_channel()
        self._thread = threading.Thread(target=self._run, name="grpo-doctor-fleet", daemon=True)
        self._thread.start()

    def set_beat(self, **fields: Any) -> None:
        with self._lock:
            self._beat = replace(self._beat, **fields)

    def ask(self, look: str) -> None:
        """As the decider: ask every node for its stacks under this look."""
        with self._lock:
            self._beat = replace(self._beat, look=look)
        self._wake.set()

    def answer(self, look: str, report: HangReport) -> None:
        """This node's stacks for the decider's look."""
        message = {"node": self.settings.node, "host": self.settings.host, "look": look, "report": report.to_dict()}
        with self._lock:
            self._outbox["stacks"] = self._encode(message)
            self._beat = replace(self._beat, answered=look)
        self._wake.set()

    def decide(self, verdict_id: str, report: HangReport) -> None:
        """As the decider: publish the verdict every watch prints."""
        message = {"node": self.settings.node, "host": self.settings.host, "id": verdict_id, "report": report.to_dict()}
        with self._lock:
            self._outbox["verdict"] = self._encode(message)
            self._beat = replace(self._beat, verdict=verdict_id, look=None, seen=verdict_id)
        self._wake.set()

    def applied(self, verdict_id: str) -> None:
        with self._lock:
            self._beat = replace(self._beat, seen=verdict_id)
        self._wake.set()

    def view(self) -> FleetView:
        with self._lock:
            return self._view

    def job_ended(self) -> None:
        """This node's job exited (watch's own end begins): from now on a store that goes is the job's end
        everywhere, not its host's death: nothing is said of it and no heir takes over."""
        self.finishing = True

    def finish(self, timeout_s: float = 5.0) -> None:
        """This node is done (its summary is written): say so in a last beat (waiting at most `timeout_s`).
        The store's host then keeps the store up until every live node is done or heard that beat (at most
        `end_wait_s`): closed a moment after it, the others (reading every `poll_s`) would miss it and take the
        store's end for its host's death."""
        self.finishing = True
        self.set_beat(done=True, state="idle")
        with self._lock:
            seq_done = self._seq + 1
        self._wake.set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._thread is not None and self._thread.is_alive():
            with self._lock:
                if self._seq >= seq_done:
                    break
            time.sleep(0.05)
        if self.hosts_store():
            self.wait_until_heard(self.settings.end_wait_s)

    def hosts_store(self) -> bool:
        """Whether this watch hosts the store the others use (node 0's, or its heir's after a takeover)."""
        return self._store is not None and self.store_host == self.settings.node and self._store.ever_up

    def wait_until_heard(self, timeout_s: float) -> dict[int, str]:
        """As the store's host after its "done" beat: wait until every live node is done or says it heard that
        beat, at most `timeout_s`. Returns node -> host of those that did not."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.view()
            pending = {n: view.beats[n].host for n in view.live
                       if n != self.settings.node and n in view.beats and not view.beats[n].done
                       and view.beats[n].saw_done != self.settings.node}
            if not pending or time.monotonic() >= deadline or self._thread is None or not self._thread.is_alive():
                return pending
            time.sleep(min(self.settings.poll_s, 0.1))

    def wait_for_done(self, timeout_s: float) -> dict[int, str]:
        """As the decider at the end: wait until every live node says it is done, at most `timeout_s`.
        Returns node -> host of those still not done."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.view()
            pending = {n: view.beats[n].host for n in view.live
                       if n != self.settings.node and n in view.beats and not view.beats[n].done}
            if not pending or time.monotonic() >= deadline:
                return pending
            time.sleep(self.settings.poll_s)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.timeout_s + 1.0)
        if self.channel is not None:
            self.channel.close()

    def shares_directory(self) -> bool:
        """Whether another node's watch of this job writes into this same run directory."""
        if self.dir_channel is None:
            return False
        try:
            self.dir_channel.map_nodes()
        except OSError:
            return False
        return bool(self.dir_channel.hosts_seen())

    def host_done(self) -> bool:
        """Whether the store's host said it was done (the job ended there)."""
        beat = self.board.beats.get(self.store_host)
        return bool(beat is not None and beat.done)

    def store_lost_line(self, where: str, exc: BaseException) -> str:
        """The one line a watch says when the store goes: what it falls back to (docs/clusters.md, "When node
        0's watch dies")."""
        shared = self.dir_channel is not None and self.dir_channel.readable and self.dir_channel.hosts_seen()
        beat = self.board.beats.get(self.store_host)
        heir = beat.heir if beat is not None else None
        if shared:
            then = "the watches still meet through the shared run directory"
        elif heir is not None and heir[0] == self.settings.node:
            then = (f"this watch, its heir, hosts a new one once node {self.store_host} has been silent for "
                    f"{self.settings.stale_s:.0f} s; until then each watch judges hangs on its own node alone")
        elif heir is not None:
            then = (f"node {heir[0]}'s watch, its heir, hosts a new one once node {self.store_host} has been silent "
                    f"for {self.settings.stale_s:.0f} s; until then each watch judges hangs on its own node alone")
        else:
            then = "no heir was named: until it answers again each watch judges hangs on its own node alone"
        return (f"fleet: lost the TCPStore at {where} ({exc}): node {self.store_host}'s watch, which hosts it, is "
                f"gone or cut off; {then}")

    # -- the thread's side ---------------------------------------------------------------------

    def _make_channel(self) -> Channel:
        s = self.settings
        channels: list[Channel] = []
        if s.channel in ("auto", "dir", "store"):
            # The beat file is written in every mode: it tells the end of the job whether this run
            # directory is shared (then one watch writes the report); read only where it is the channel.
            self.dir_channel = DirChannel(self.paths, s.host, self.start_t, readable=s.channel != "store")
            channels.append(self.dir_channel)
        if s.channel in ("auto", "store"):
            if s.store is None:
                self._say("store", "fleet: no master address known (MASTER_ADDR, the launch command's --master-addr): "
                                   "the watches meet only through a shared run directory")
            elif not torch_importable():
                self._say("store", "fleet: torch is not installed in watch's environment: the watches meet only "
                                   "through a shared run directory")
            else:
                self.store_channel = StoreChannel(*s.store, host_it=s.node == 0, timeout_s=s.timeout_s)
                self._store = _Retrying(self.store_channel, self)
                channels.append(self._store)
        return Channels(channels)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - the fleet failing must never end watch or the job
                self.num_errors += 1
                self._say(type(exc).__name__, f"fleet: internal error ({type(exc).__name__}: {exc}); "
                                              "the watches may judge hangs node by node")
            self._wake.wait(self.settings.poll_s if self.settings.nnodes <= 16 else max(self.settings.poll_s, 1.0))
            self._wake.clear()
        try:  # the last beat (done) goes out even when close() came first
            self._publish_beat()
        except Exception:  # noqa: BLE001
            pass

    def _tick(self, now: float) -> None:
        with self._lock:
            outbox, self._outbox = self._outbox, {}
        for kind, data in outbox.items():  # before the beat that announces them
            self._publish(kind, data)
        if self._store is not None:
            self._store_beat(now)
        with self._lock:
            urgent = _urgent(self._beat)
        if urgent != self._beat_sent or now - self._beat_sent_mono >= self.settings.beat_s:
            self._publish_beat()
            self._beat_sent, self._beat_sent_mono = urgent, now
        to_read = self.board.to_read(now)
        if self.finishing and self._store is not None and self.store_host == self.settings.node:
            to_read = [n for n in range(self.settings.nnodes) if n != self.settings.node]  # who heard its "done"
        beats = {}
        for node, message in self._read("beat", to_read).items():
            beat = NodeBeat.from_message(message)
            if beat is not None and beat.t >= self.start_t - 300:
                beats[node] = beat
        self.board.update(beats, now)
        if self._store is not None:
            if self.store_host != self.settings.node and self.host_done():
                with self._lock:  # the store's host may close it now (it waits for this, finish())
                    self._beat = replace(self._beat, saw_done=self.store_host)
            self._follow_store(now)
        decider = self.board.decider(now)
        with self._lock:
            my_look = self._beat.look
        look = my_look if decider == self.settings.node else getattr(self.board.beats.get(decider), "look", None)
        if decider == self.settings.node and my_look:
            wanted = [n for n, b in self.board.beats.items() if b.answered == my_look
                      and self._stacks.get(n, ("",))[0] != my_look]
            for node, message in self._read("stacks", wanted).items():
                report = _report(message)
                if report is not None and message.get("look") == my_look:
                    self._stacks[node] = (my_look, report)
        elif decider != self.settings.node:
            wanted_id = getattr(self.board.beats.get(decider), "verdict", None)
            if wanted_id and (self._verdict is None or self._verdict[0] != wanted_id):
                message = self._read("verdict", [decider]).get(decider)
                report = _report(message) if message else None
                if report is not None and message.get("id") == wanted_id:
                    self._verdict = (wanted_id, report)
        view = FleetView(me=self.settings.node, decider=decider, live=tuple(self.board.live(now)),
                         connected=self.board.connected(now), beats=dict(self.board.beats),
                         silent=self.board.silent(now), look=look, stacks=dict(self._stacks),
                         verdict=self._verdict, channel=self.channel.name if self.channel else "")
        with self._lock:
            self._view = view

    def _store_beat(self, now: float) -> None:
        """This watch's address toward the store in its beat; as the store's host, its heir too."""
        if self._addr is None:
            self._addr = address_toward(self._store.inner.addr, self._store.inner.port) or ""
        heir = None
        if self.store_host == self.settings.node:
            addrs = {n: b.addr for n, b in self.board.beats.items() if b.addr}
            heir = pick_heir(self.board, now, self.settings.node, addrs)
        with self._lock:
            self._beat = replace(self._beat, addr=self._addr or None, heir=heir)

    def _follow_store(self, now: float) -> None:
        """The store failed and its host fell silent: move to the heir its host named (fleet_takeover.py)."""
        # Only a store this watch used, lost while the job runs: not one it never reached (a firewall, the
        # directory serves then), nor one whose host ended with its job.
        if self._store.up or not self._store.ever_up or self.finishing or self.host_done():
            return
        moved = move_to_heir(self.store_host, self.board, now, self.settings.node)
        if moved is None:
            return
        old, (node, addr) = self.store_host, moved
        why = self.board.silent(now).get(old, "silent")
        self.store_host = node
        self._store.retarget(addr, host_it=node == self.settings.node)
        where = self._store.inner.where
        if node == self.settings.node:
            self._say(f"heir-{node}", f"fleet: node {old}'s watch, which hosted the TCPStore, is silent ({why}): "
                                      f"this watch, its heir, hosts it now at {where}; the others reconnect here")
        else:
            self._say(f"heir-{node}", f"fleet: node {old}'s watch, which hosted the TCPStore, is silent ({why}): "
                                      f"reconnecting to its heir, node {node}'s watch, which hosts it now at {where}")

    def _publish_beat(self) -> None:
        with self._lock:
            self._seq += 1
            beat = replace(self._beat, seq=self._seq, t=time.time())
        data = beat.to_bytes()
        self.beat_bytes = len(data)
        self._publish("beat", data)

    def _encode(self, message: Mapping[str, Any]) -> bytes:
        self._seq += 1  # under the caller's lock
        return json.dumps({**message, "seq": self._seq}, separators=(",", ":"), default=str).encode()

    def _publish(self, kind: str, data: bytes) -> None:
        try:
            self.channel.publish(kind, self.settings.node, data)
        except OSError as exc:
            self._say(f"publish-{kind}", f"fleet: cannot publish this node's {kind} ({exc}); retrying")
            if kind != "beat":
                with self._lock:
                    self._outbox.setdefault(kind, data)

    def _read(self, kind: str, nodes: list[int]) -> dict[int, dict[str, Any]]:
        if not nodes:
            return {}
        try:
            return self.channel.read(kind, nodes)
        except OSError:
            return {}

    def _say(self, key: str, line: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.note(line)


class _Retrying(Channel):
    """The store channel, opened on a thread of its own (importing torch, hosting the store, connecting to
    it), so that a store not up yet, or behind a firewall that drops the connection, never holds up the
    fleet's thread: until it is open, each call fails at once; after a failure it is opened again at most
    every STORE_RETRY_S. What could not be published meanwhile (the latest message of each kind) goes out
    once it is open: another channel taking it (the directory) does not mean the store's readers got it."""

    def __init__(self, channel: StoreChannel, fleet: Fleet) -> None:
        self.inner, self.fleet, self.name = channel, fleet, channel.name
        self._failed_mono = float("-inf")
        self._opener: threading.Thread | None = None
        self._unsent: dict[tuple[str, int], bytes] = {}
        self.up = False
        self.ever_up = False

    def publish(self, kind: str, node: int, data: bytes) -> None:
        self._unsent[(kind, node)] = data
        self._guard(self._flush)

    def read(self, kind: str, nodes) -> dict[int, dict[str, Any]]:
        self._guard(self._flush)
        return self._guard(lambda: self.inner.read(kind, nodes))

    def _flush(self) -> None:
        for (kind, node), data in list(self._unsent.items()):
            self.inner.publish(kind, node, data)
            if self._unsent.get((kind, node)) is data:
                del self._unsent[(kind, node)]

    def close(self) -> None:
        self.inner.close()

    def retarget(self, addr: str, *, host_it: bool) -> None:
        """To the heir's store (fleet_takeover.py): hosted here, or connected to; what was not sent goes there."""
        old = self.inner
        self.inner = StoreChannel(addr, old.port, host_it=host_it, timeout_s=old.timeout_s)
        self.fleet.store_channel = self.inner
        self.up = False
        self._failed_mono = float("-inf")

    def _guard(self, op):
        if not self.up:
            self._open_later()
            raise ChannelError(f"{self.name} at {self.inner.where}: not open")
        try:
            return op()
        except OSError as exc:
            self.up = False
            self._failed_mono = time.monotonic()
            if not self.fleet.finishing and not self.fleet.host_done():  # a job's end: node 0 may go first
                self.fleet._say(f"store-lost-{self.inner.where}", self.fleet.store_lost_line(self.inner.where, exc))
            raise

    def _open_later(self) -> None:
        busy = self._opener is not None and self._opener.is_alive()
        if busy or time.monotonic() - self._failed_mono < STORE_RETRY_S:
            return
        self._opener = threading.Thread(target=self._open, name="grpo-doctor-fleet-store", daemon=True)
        self._opener.start()

    def _open(self) -> None:
        inner = self.inner  # a retarget meanwhile leaves this one behind
        try:
            inner.open()
        except OSError as exc:
            self._failed_mono = time.monotonic()
            if inner.host_it:
                self.fleet._say("store-host", f"fleet: cannot host the {self.name} at {inner.where} ({exc}); "
                                              "the watches meet only through a shared run directory")
            return
        if inner is self.inner:
            self.up = self.ever_up = True


def _urgent(beat: NodeBeat) -> tuple:
    """What of a beat the other watches must hear at once: the rest (idle seconds) waits for the next beat."""
    return (beat.state, beat.stall, beat.look, beat.answered, beat.verdict, beat.seen, beat.done, beat.survey,
            beat.saw_done)


def _report(message: Mapping[str, Any] | None) -> HangReport | None:
    if not message:
        return None
    try:
        return HangReport.from_dict(message.get("report"))
    except FormatError:
        return None
