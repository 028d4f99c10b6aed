"""Every file of a run directory is named by RunPaths, so writers and readers agree on it."""
from pathlib import Path

from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.run_paths import PROBE_NODE_FILE, WatchPaths


def test_the_files_of_a_run_directory_are_where_the_docs_say():
    paths = RunPaths(Path("runs/job-17"))
    watch = paths.watch_files("node-1")
    assert [str(p) for p in (paths.run_json, paths.findings_json, paths.report_html, paths.probe_collectives,
                             paths.oom_memory_dump(3), *paths.hang_stacks("20261124-022104"))] == [
        "runs/job-17/run.json", "runs/job-17/findings.json", "runs/job-17/report.html",
        "runs/job-17/probe/collectives.json", "runs/job-17/memory/rank-00003-oom.pickle",
        "runs/job-17/stacks/hang-20261124-022104-a", "runs/job-17/stacks/hang-20261124-022104-b"]
    assert [p.name for p in (watch.summary_json, watch.samples, watch.signatures, watch.stdout_log,
                             watch.stderr_log, watch.errors_log, watch.hang_report(2))] == [
        "summary.json", "samples.jsonl", "signatures.jsonl", "stdout.log", "stderr.log", "watch-errors.log",
        "hang-2.json"]
    assert watch.root == paths.supervisor / "node-1"


def test_a_host_name_never_leaves_its_folder():
    paths = RunPaths(Path("r"))
    assert paths.watch_files("../etc").root == Path("r/supervisor/.._etc")
    node_file = paths.probe_node_file(12, "a/b")
    assert node_file == Path("r/probe/node-012-a_b.json") and PROBE_NODE_FILE.fullmatch(node_file.name)
    assert not PROBE_NODE_FILE.fullmatch("node-1.log")


def test_hang_reports_are_told_from_other_files_and_ordered_by_number():
    names = ["hang-10.json", "hang-2.json", "summary.json", "hang-old.json", "hang-3.json.tmp"]
    numbered = sorted((n, name) for name in names if (n := WatchPaths.hang_number(Path(name))) is not None)
    assert [name for _, name in numbered] == ["hang-old.json", "hang-2.json", "hang-10.json"]
    assert WatchPaths.is_signatures_file("runs/x/supervisor/n/signatures.jsonl")
    assert not WatchPaths.is_signatures_file("train.log")
