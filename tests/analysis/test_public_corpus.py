"""The public real-log corpus (tests/data/corpus/): verbatim excerpts of logs from public GitHub issues,
each labelled with what a human expert reads in it. Checks the corpus is well-formed and that
grpo-doctor diagnoses at least 95 % of it right (tests/corpus_score.py says how a case is judged)."""
from __future__ import annotations

import json
import re

from corpus_score import CORPUS, case_files, fraction_passed, score_corpus, table

from grpo_doctor.analysis.findings import Finding

FRAMEWORKS = {"trl", "ms-swift", "verl", "openrlhf", "llama-factory", "deepspeed", "vllm", "sglang", "pytorch",
              "ray", "nemo-rl", "megatron", "other"}
FINDING_IDS = {"hang", "rank-crash", "cuda-oom", "nccl-timeout", "config-mismatch", "version-mismatch", "straggler",
               "nccl-error", "rendezvous-failure", "host-oom", "vllm-memory", "collective-mismatch", "seed-collision",
               "nan-loss", "dead-step", "constant-reward", "zero-std-groups", "zero-kl", "length-collapse",
               "entropy-collapse", "stale-rollout-weights", "gpu-fault"}
MIN_CASES = 120
MIN_CONTROLS = 25
MIN_SCORE = 0.95
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+#\d+$")


def _labels() -> list[tuple[str, dict]]:
    return [(str(log.relative_to(CORPUS)), json.loads(log.with_suffix(".json").read_text(encoding="utf-8")))
            for log in case_files()]


def test_every_corpus_log_has_a_label_naming_its_public_source():
    problems = []
    for log in case_files():
        name = log.relative_to(CORPUS)
        label_file = log.with_suffix(".json")
        if not label_file.exists():
            problems.append(f"{name}: no .json beside it")
            continue
        label = json.loads(label_file.read_text(encoding="utf-8"))
        missing = {"source", "url", "expect", "what"} - label.keys()
        if missing:
            problems.append(f"{name}: no {', '.join(sorted(missing))}")
            continue
        if not SOURCE.match(label["source"]):
            problems.append(f"{name}: source {label['source']!r} is not owner/repo#number")
        repo, number = label["source"].split("#")
        if not label["url"].startswith(f"https://github.com/{repo}/") or not label["url"].endswith(f"/{number}"):
            problems.append(f"{name}: url {label['url']} does not match source {label['source']}")
        if log.parent.name not in FRAMEWORKS:
            problems.append(f"{name}: folder {log.parent.name!r} is not a known framework")
        if not log.read_text(encoding="utf-8").strip():
            problems.append(f"{name}: empty log")
    assert not problems, "\n".join(problems)


def test_corpus_labels_use_known_finding_ids_and_controls_expect_nothing():
    problems = []
    for name, label in _labels():
        named = set(label["expect"]) | set(label.get("ranks") or {}) | set(label.get("evidence") or {})
        named |= {label["lead"]} if label.get("lead") else set()
        if named - FINDING_IDS:
            problems.append(f"{name}: unknown ids {sorted(named - FINDING_IDS)}")
        if label.get("control") and label["expect"]:
            problems.append(f"{name}: a control expects {label['expect']}")
        if not label.get("control") and not label["expect"]:
            problems.append(f"{name}: neither a control nor expecting any finding")
        if label.get("lead") and label["lead"] not in label["expect"]:
            problems.append(f"{name}: lead {label['lead']} is not among expect")
        for fid, numbers in (label.get("evidence") or {}).items():
            flat = [x for v in numbers.values() for x in (v.values() if isinstance(v, dict) else [v])]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat):
                problems.append(f"{name}: evidence of {fid} must be numbers (or {{rank: number}})")
    assert not problems, "\n".join(problems)


def test_corpus_is_large_enough_with_enough_healthy_controls():
    labels = _labels()
    controls = sum(bool(label.get("control")) for _, label in labels)
    assert len(labels) >= MIN_CASES, f"{len(labels)} cases, want at least {MIN_CASES}"
    assert controls >= MIN_CONTROLS, f"{controls} controls, want at least {MIN_CONTROLS}"


def test_scorer_judges_lead_ranks_evidence_and_controls():
    from corpus_score import judge
    oom = Finding(id="cuda-oom", severity="critical", title="oom", ranks=(3,),
                  evidence={"requested_bytes": 20971520, "gpu": 3})
    crash = Finding(id="rank-crash", severity="warning", title="crash", ranks=(3,))
    label = {"expect": ["cuda-oom"], "lead": "cuda-oom", "ranks": {"cuda-oom": [3]},
             "evidence": {"cuda-oom": {"requested_bytes": 20971520 * 1.005}}}
    assert judge(label, [oom, crash]) == ""
    assert "lead is rank-crash" in judge(label, [crash, oom])
    assert "ranks" in judge({**label, "ranks": {"cuda-oom": [1]}}, [oom])
    assert "requested_bytes" in judge({**label, "evidence": {"cuda-oom": {"requested_bytes": 1}}}, [oom])
    assert "missing cuda-oom" in judge(label, [crash])
    assert judge({"control": True, "expect": []}, [Finding(id="nan-loss", severity="info", title="x")]) == ""
    assert "control raised" in judge({"control": True, "expect": []}, [crash])
    # with roles set, the root cause leads even when it is not first
    root = Finding(id="cuda-oom", severity="critical", title="oom", role="root-cause")
    effect = Finding(id="nccl-timeout", severity="critical", title="t", role="consequence", caused_by="cuda-oom")
    assert judge({"expect": ["cuda-oom"], "lead": "cuda-oom"}, [effect, root]) == ""
    # per-rank evidence ({rank: seq}) matches a single number from the log
    timeout = Finding(id="nccl-timeout", severity="critical", title="t", evidence={"last_completed": {0: 1579}})
    assert judge({"expect": ["nccl-timeout"], "evidence": {"nccl-timeout": {"last_completed": 1579}}}, [timeout]) == ""
    assert judge({"expect": ["nccl-timeout"], "evidence": {"nccl-timeout": {"last_completed": {"0": 1579}}}},
                 [timeout]) == ""


def test_public_corpus_is_diagnosed_right_at_least_95_percent(capsys):
    # Not marked slow: each case is a small file and its report takes well under a second.
    results = score_corpus()
    with capsys.disabled():
        print("\n" + table(results))
    score = fraction_passed(results)
    failures = "\n".join(f"{r.case}: {r.why}" for r in results if not r.passed)
    assert score >= MIN_SCORE, f"corpus score {score:.1%} < {MIN_SCORE:.0%}:\n{failures}"
