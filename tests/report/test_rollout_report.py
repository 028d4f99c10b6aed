import hashlib
import importlib.util
from pathlib import Path

import jinja2
from helpers import write_rank
from hostile import IMG, SCRIPT

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rollout_tables import EVENT_LOG_SOURCE
from grpo_doctor.report.render import TEMPLATES
from grpo_doctor.report.rollout_plots import PANELS, metric_series, rollout_section
from grpo_doctor.schema import Rollout, Step

METRIC_LOGS = Path(__file__).resolve().parents[1] / "data" / "metric_logs"


def _common(rank, n):
    return dict(rank=rank, host=f"node-{rank // 2}", pid=1000 + rank, step=n, t=100.0 + n, mono=100.0 + n)


def step(rank, n, **metrics):
    return Step(**_common(rank, n), metrics=metrics)


def rollout(rank, n, prompts, completions):
    digest = lambda text: hashlib.blake2b(text.encode(), digest_size=8).hexdigest()  # noqa: E731
    return Rollout(**_common(rank, n), num_completions=len(completions), num_groups=1,
                   completion_hashes=[digest(c) for c in completions], prompt_hashes=[digest(p) for p in prompts],
                   group_ids=[0] * len(prompts), duplicate_rate=0.0, distinct_1=0.9, distinct_2=1.0,
                   edit_distance=0.8, length_mean=12.0, length_min=10, length_max=14, truncated_frac=0.0,
                   reward_mean=0.5, reward_std=0.5, group_reward_std_mean=0.5, zero_std_frac=0.0, temperature=1.0,
                   max_length=64, samples=[{"group": 0, "prompt": prompts[0], "completion": completions[0],
                                            "reward": 0.5}])


def healthy_metrics(num_steps):
    return [{"loss": 0.01 * n, "reward": 0.2 + 0.01 * n, "reward_std": 0.3, "frac_reward_zero_std": 0.25,
             "grad_norm": 1.0, "kl": 0.01 * n} for n in range(num_steps)]


def write_run(run_dir, per_rank):
    for rank, records in per_rank.items():
        write_rank(run_dir, rank, records)
    return run_dir


def _render(section) -> str:
    # the settings of render.py's environment: autoescape on, undefined names an error
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("_rollouts.html.j2").render(rollouts=section)


def _run(tmp_path, text_of):
    per_rank = {}
    for r in range(4):
        per_rank[r] = []
        for n, m in enumerate(healthy_metrics(4)):
            prompts = [f"q{SCRIPT}", f"q{SCRIPT}"]
            per_rank[r] += [rollout(r, n, prompts, [text_of(r, n, i) for i in range(2)]), step(r, n, **m)]
    return load_evidence([write_run(tmp_path, per_rank)])


def test_sample_completions_and_prompts_are_escaped(tmp_path):
    section = rollout_section(_run(tmp_path, lambda r, n, i: f"{IMG} answer {r}-{n}-{i}"))
    assert section["samples"] and all(IMG in s["completion"] for s in section["samples"])
    html = _render(section)
    assert SCRIPT not in html and IMG not in html and "<script" not in html
    assert "&lt;img src=x onerror=" in html and "&lt;script&gt;" in html
    assert html.count("data:image/png;base64,") == 2  # the metric panels and the duplicate heatmap


def test_the_heatmap_appears_only_where_ranks_shared_prompts(tmp_path):
    section = rollout_section(_run(tmp_path, lambda r, n, i: f"same seed on node {r // 2}: {n}-{i}"))
    assert section["heatmap"] and 'id="rollout-duplicates"' in _render(section)
    trl = rollout_section(load_evidence([METRIC_LOGS / "trl_healthy"]))
    assert trl["heatmap"] is None and trl["metrics"] and trl["sources"] == ["trl"]
    if importlib.util.find_spec("pyarrow"):  # TRL's completions are parquet files
        assert {s["step"] for s in trl["samples"]} == {1, 2, 3} and 'id="rollout-samples"' in _render(trl)


def test_a_run_without_grpo_metrics_or_rollouts_has_no_section(tmp_path):
    ev = load_evidence([write_run(tmp_path, {0: [step(0, 0, tokens_per_s=100.0)]})])
    assert rollout_section(ev) is None
    assert _render(None).strip().startswith("{#") is False and "<h2" not in _render(None)


def test_the_diversity_panel_draws_every_rollout_diversity_measure_including_edit_distance(tmp_path):
    series = metric_series(_run(tmp_path, lambda r, n, i: f"answer {r}-{n}-{i}"))[EVENT_LOG_SOURCE]
    assert series["edit_distance"].tolist() == [0.8] * 4 and series["distinct_2"].tolist() == [1.0] * 4
    diversity = dict(PANELS)["diversity"]
    assert {"duplicate_rate", "distinct_1", "distinct_2", "edit_distance"} <= set(diversity)
