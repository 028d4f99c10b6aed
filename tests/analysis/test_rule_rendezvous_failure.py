from rundata import LOGS

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import rendezvous_failure

REFUSED = ("[W socket.cpp:601] [c10d] The client socket has failed to connect to [node-1]:29500 "
           "(errno: 111 - Connection refused).\n")


def _findings(*paths):
    findings = list(rendezvous_failure.check(load_evidence(list(paths)), rendezvous_failure.Config()))
    assert all(f.id == "rendezvous-failure" and f.severity == "critical" for f in findings)
    return findings


def _of(findings, cause, host=None):
    return next(f for f in findings if f.evidence["cause"] == cause and (host is None or f.evidence["host"] == host))


def test_a_port_already_in_use_asks_for_a_free_master_port():
    f = _of(_findings(LOGS / "rendezvous_failures.log"), "port-in-use")
    ev = f.evidence
    assert (ev["port"], ev["errno"], ev["reason"]) == (29500, 98, "Address already in use")
    assert ev["error_types"] == ["address-in-use", "server-listen-failed"] and ev["num_reports"] == 3
    assert "29500" in f.title
    assert f.hints == (rendezvous_failure.HINT_PORT,)
    assert "MASTER_PORT" in f.hints[0] and "--rdzv-endpoint" in f.hints[0]


def test_nodes_that_never_joined_are_counted_and_nnodes_is_suspected():
    f = _of(_findings(LOGS / "rendezvous_failures.log"), "join-timeout")
    ev = f.evidence
    assert (ev["joined"], ev["expected"], ev["timeout_s"]) == (1, 2, 901.0)
    assert ev["error_types"] == ["DistStoreError", "RendezvousTimeoutError"]
    assert "1 of 2" in f.title and "901 s" in f.title
    assert "--nnodes" in f.hints[0] and "never started" in f.hints[0]


def test_an_unreachable_store_names_its_address_and_the_reachability_test():
    findings = _findings(LOGS / "rendezvous_failures.log")
    timed_out = _of(findings, "store-unreachable", "10.0.0.1")
    assert (timed_out.evidence["port"], timed_out.evidence["errno"]) == (29500, 110)
    assert "10.0.0.1:29500" in timed_out.title
    assert timed_out.hints == (rendezvous_failure.HINT_UNREACHABLE,)
    assert "firewall" in timed_out.hints[0] and "grpo-doctor probe" in timed_out.hints[0]
    # One store, refused once and unroutable once: both remedies, refused first.
    node1 = _of(findings, "store-unreachable", "node-1")
    assert node1.evidence["errnos"] == [111, 113] and node1.evidence["error_type"] == "client-connect-failed"
    assert node1.hints == (rendezvous_failure.HINT_REFUSED, rendezvous_failure.HINT_UNREACHABLE)
    loopback = _of(findings, "store-unreachable", "127.0.0.1")
    assert loopback.evidence["timeout_s"] == 600.0 and "timed out after 600 s" in loopback.title
    assert "loopback" in loopback.hints[0]
    # "See inner exception": it joins the store its log named last instead of a finding of its own.
    assert "RendezvousConnectionError" in loopback.evidence["error_types"]
    assert len(findings) == 5


def test_a_refused_connection_says_the_master_is_not_listening_not_a_firewall(tmp_path):
    log = tmp_path / "node-2.log"
    log.write_text(REFUSED * 3)
    [f] = _findings(log)
    assert (f.evidence["host"], f.evidence["port"], f.evidence["num_reports"]) == ("node-1", 29500, 3)
    assert f.hints == (rendezvous_failure.HINT_REFUSED,) and "NODE_RANK=0" in f.hints[0]


def test_the_reporting_node_and_rank_come_from_the_watched_output(tmp_path):
    host_dir = tmp_path / "run" / "supervisor" / "node-2"
    host_dir.mkdir(parents=True)
    (host_dir / "stderr.log").write_text(
        "[rank9]: torch.distributed.DistNetworkError: The client socket has failed to connect to any network address "
        "of (node-1, 29500). The client socket has failed to connect to [node-1]:29500 (errno: 113 - No route to "
        "host).\n")
    [f] = _findings(tmp_path / "run")
    assert (f.ranks, f.hosts, f.evidence["host"], f.evidence["errno"]) == ((9,), ("node-2",), "node-1", 113)


def test_a_successful_join_gives_no_rendezvous_failure(tmp_path):
    log = tmp_path / "ok.log"
    log.write_text("[I1218 10:00:01.000000 77 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1130] The "
                   "node 'node-2_77_0' has joined round 0 of the c10d rendezvous backend.\n")
    assert _findings(log) == []
    assert _findings(LOGS / "host_oom.log") == []
