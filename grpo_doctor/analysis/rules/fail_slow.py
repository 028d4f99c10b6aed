"""`fail-slow`: the job kept moving, but one rank (or one host) was outside the others' stack in most of
watch's stack rounds: the one they kept waiting for.

watch takes every rank's stack in rounds while the job moves (supervisor/fail_slow.py: once its steps
are under way, and whenever its pace falls) and writes them to `supervisor/<host>/fail-slow.json`. Here
the rounds of every host's watch taken at the same moment (the same wall-clock slot) are merged into one
look at the whole job (checks/stack_rounds.py's `episodes`), and the rounds vote again over every rank:
a rank outside the dominant group (the ranks waiting in a collective, or the largest group of identical
stacks) in a majority of the rounds (`majority`; 0: more than half), and in `standout` times as many
rounds as any rank not named, is named. Where the named ranks run says what it is (ByteRobust's reading):
- one host, every one of its ranks named (`scope` "host"): that machine; drain or check it;
- ranks of one host beside fast ones there, or a one-host job (`scope` "rank"): what that rank does
  (its stack headline: a data loader, a reward function, a sleep);
- ranks on several hosts (`scope` "scattered"): a code path those ranks take, not one machine.
Where nobody is named but every rank was in the same place in most rounds of a survey that the job's
falling pace started (`scope` "shared": every rank waiting in one collective, say), the slowdown is one
they all share: a collective and its links, the input, the file system. With several hosts the stacks
cannot tell which end of a slow link is slow; `grpo-doctor probe` across three or more nodes names a
host slow to every other (its `straggler` problems, `probe_slow_hosts`).

Where nobody's stack stands out, the round trips of the job's own TCP connections, sampled in the same rounds
(host/tcp_links.py), can still name a host: the one common to the slow pairs of hosts while the others carry a
fast pair (checks/slow_links.py; three hosts or more). Only pairs whose both ends are hosts of the job count (the
sampled hosts' own addresses and those each watch knew live, its survey's `job_addrs`): a connection to a
service outside the job (a remote reward API, dataset streaming) never names a host. Such a finding names that host (`links`: each pair's
median round trip, the slow pairs, `which_end`). With two hosts the one slow pair is said, both ends named.

An episode with fewer than `min_rounds` rounds is not judged by its stacks, nor by its links with fewer than
`min_link_rounds` rounds that sampled them. One finding per verdict: the same ranks
named again in a later survey add to `surveys`.

Evidence keys: `scope`, `rounds` (rounds voted), `interval_s`, `outside` ({rank: rounds it was outside
in}), `where` ({named rank: where it was when outside}), `others_where` (where the others were then, or
every rank for "shared"), `others_rounds`, `shared_rounds` (rounds with every rank in one place),
`ranks_per_host` ({host: [named ranks]}), `surveys` (the watches' survey ids), `whys` ("start", "pace",
"fleet"), `pace` (the job's output pace when it fell: `unit`, `per_min`, `baseline_per_min`), `links`
(checks/slow_links.py's LinkVerdict: `pairs` {"hostA-hostB": median rtt ms}, `slow`, `hosts`, `which_end`), and
for "shared" `probe_slow_hosts`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.slow_links import LinkVerdict, describe_links, slow_link_hosts
from grpo_doctor.checks.stack_rounds import STANDOUT, Episode, SlowVote, describe, episodes, vote

ID = "fail-slow"
READS = {View.PROBE_RESULTS, View.WATCH_ARTIFACTS}

HINT_HOST = ("Every rank of that host is outside the others' stack while they wait: the machine. Drain it (Slurm: "
             "scontrol update nodename=HOST state=drain reason=slow; Kubernetes: kubectl cordon HOST) and rerun, "
             "or check it: nvidia-smi -q -d CLOCK,PERFORMANCE (throttling), its CPU load and governor, its NIC "
             "(ip -s link, ethtool) and its disks.")
HINT_RANK = ("The others wait for this rank in their collective while its stack is elsewhere: look at the place its "
             "stack names (a data loader, a reward function, tokenization, a logging or checkpoint call only it "
             "makes), its inputs (longer prompts or completions) and its GPU (nvidia-smi -q -d CLOCK,PERFORMANCE).")
HINT_SCATTERED = ("The slow ranks are on several hosts beside fast ranks there, so no machine explains them: a code "
                  "path only they take (a reward model, evaluation, logging) or the data they get (balance batches by "
                  "length).")
HINT_SHARED = ("Every rank waits in the same place while the job slows: the slowdown is one they all share. Across "
               "hosts that is a link or the collective itself: the stacks cannot tell which end of a slow link is "
               "slow; grpo-doctor probe across three or more nodes names the host slow to every other, and each "
               "host's NIC shows its own (ip -s link: errors, drops; ethtool: speed; tc -s qdisc: a shaper left on). "
               "On one host: the input pipeline or the file system.")
HINT_ASYNC = ("Python stacks see what the CPU does: a GPU that is slow while its kernels run asynchronously leaves "
              "every rank in the same synchronising call. Record phases (import grpo_doctor, or grpo-doctor watch's "
              "instrument flag): the straggler rule then times each rank.")
HINT_LINK = ("The round trips of the job's own TCP connections through that host are 10x and more the others': its "
             "link is the slow part. Check its NIC and port (ip -s link: errors, drops; ethtool: negotiated speed; "
             "tc -s qdisc: a shaper left on) or drain it (Slurm: scontrol update nodename=HOST state=drain "
             "reason=slow-link; Kubernetes: kubectl cordon HOST).")
HINTS = (HINT_HOST, HINT_RANK, HINT_SCATTERED, HINT_SHARED, HINT_ASYNC, HINT_LINK)


@dataclass(frozen=True)
class Config:
    majority: int = 0  # rounds a rank must be outside in to be named; 0: more than half of them
    standout: float = STANDOUT  # and this many times as many rounds as any rank not named
    min_rounds: int = 5  # an episode with fewer rounds is not judged by its stacks
    min_link_rounds: int = 3  # nor by its links' round trips with fewer rounds that sampled them


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    said: dict[tuple, Finding] = {}
    for episode in episodes(run.slow_surveys):
        sampled = [(s.host, r.slot, r.links) for s in episode.surveys for r in s.rounds if r.links is not None]
        links = (slow_link_hosts(((host, rtts) for host, _, rtts in sampled), _job_addrs(episode))
                 if len({slot for _, slot, _ in sampled}) >= cfg.min_link_rounds else LinkVerdict())
        judged = len(episode.rounds) >= cfg.min_rounds
        if judged:
            result = vote(list(episode.rounds), episode.host_of, majority=cfg.majority, standout=cfg.standout)
        elif links.which_end:  # too few merged rounds for the stacks' vote; the links speak alone
            result = SlowVote(rounds=len(episode.rounds), num_ranks=len(episode.host_of))
        else:
            continue
        if not result.named and not (result.scope == "shared" and "pace" in episode.whys) and not links.which_end:
            continue
        key = (result.scope, result.named, result.hosts, links.hosts if not result.named else ())
        ids = [s.id for s in episode.surveys]
        if key in said:
            said[key].evidence["surveys"] += ids
            continue
        said[key] = _finding(run, episode, result, links, ids, judged)
    yield from said.values()


def _finding(run: RunView, episode: Episode, result: SlowVote, links: LinkVerdict, ids: list[str],
             judged: bool = True) -> Finding:
    evidence = {"scope": result.scope, "rounds": result.rounds, "interval_s": episode.interval_s,
                "outside": {r: n for r, n in result.outside.items()}, "where": dict(result.where),
                "others_where": result.others_where, "others_rounds": result.others_rounds,
                "shared_rounds": result.shared_rounds, "ranks_per_host": result.ranks_per_host,
                "surveys": ids, "whys": list(episode.whys), "pace": episode.pace, "links": links.to_dict()}
    title = (describe(result, prefix="") if judged else
             f"{result.rounds} stack rounds of every host at once, too few for the stacks' vote")
    hosts = result.hosts
    # Where nobody's stack stands out, the job's own TCP round trips may still say which host's links are slow.
    said_links = describe_links(links) if not result.named and links.slow else ""
    if links.which_end and said_links:
        hosts = links.hosts
        title = f"host {', '.join(hosts)}: its links slow the job: {title}; {said_links}"
    if result.scope == "shared" and not (links.which_end and said_links):
        slow_hosts = _probe_slow_hosts(run, result.hosts)
        evidence["probe_slow_hosts"] = slow_hosts
        pace = episode.pace
        fell = (f"the job slowed to {pace['per_min']:g} {pace['unit']}/min (from {pace['baseline_per_min']:g}); "
                if pace and pace.get("baseline_per_min") is not None else "the job slowed; ")
        title = fell + title
        if len(result.hosts) >= 2:
            title += (f" on hosts {', '.join(result.hosts)}: a link between them or the collective itself"
                      + (f"; grpo-doctor probe measured {', '.join(slow_hosts)} slow to the others" if slow_hosts
                         else "; the stacks cannot tell which host"))
        if said_links:
            title += f"; {said_links}"
        hints = (HINT_SHARED, HINT_ASYNC)
    elif said_links:
        hints = (HINT_LINK, HINT_SHARED)
    elif result.scope == "host":
        hints = (HINT_HOST, HINT_RANK)
    elif result.scope == "scattered":
        hints = (HINT_SCATTERED, HINT_RANK)
    else:
        hints = (HINT_RANK, HINT_HOST)
    return Finding(id=ID, severity="warning", title=title, ranks=result.named, hosts=hosts, step=None, phase=None, evidence=evidence, hints=hints)


def _job_addrs(episode: Episode) -> set[str]:
    """The addresses of the job's hosts each watch knew live (its fleet's beats, the master address); the
    sampled hosts' own addresses count besides (checks/slow_links.py): a peer outside them is no link of the job."""
    out: set[str] = set()
    for survey in episode.surveys:
        addrs = (survey.verdict or {}).get("job_addrs")
        if isinstance(addrs, list):
            out.update(a for a in addrs if isinstance(a, str))
    return out


def _probe_slow_hosts(run: RunView, hosts: tuple[str, ...]) -> list[str]:
    """The hosts `grpo-doctor probe` found slow (its straggler problems), among `hosts`."""
    if run.probe is None:
        return []
    return sorted({h for _, problem in run.probe.problems() if problem.id == "straggler"
                   for h in problem.hosts if h in hosts})
