"""The argument-name lists `grpo-doctor plan` checks a command against (grpo_doctor/plan/flag_names/, written by
tools/refresh_flag_names.py from the frameworks' own sources): every flag of real GRPO commands is in the list of
its framework, a typo is not, and the lists still match the installed TRL, torch and accelerate.

The command flags below are those of the GRPO jobs in tests/data/plan/cases (ms-swift issues #3307/#3887 and
examples, TRL/open-r1 recipes, verl's tuning docs and #855, OpenRLHF #887/#1066), which the last test reads
as well.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LISTS = REPO / "grpo_doctor" / "plan" / "flag_names"
CASES = REPO / "tests" / "data" / "plan" / "cases"
FILES = ["trl", "ms_swift", "ms_swift_3", "openrlhf", "verl", "accelerate_launch", "torchrun", "deepspeed_launcher"]


def names(list_name: str) -> set[str]:
    lines = (LISTS / f"{list_name}.txt").read_text().splitlines()
    return {line for line in lines if line and not line.startswith("#")}


def header(list_name: str) -> list[str]:
    return [line for line in (LISTS / f"{list_name}.txt").read_text().splitlines() if line.startswith("#")]


def flags(command: str) -> set[str]:
    return {word.lstrip("-") for word in command.split()}


SWIFT_COMMAND = flags(
    "--rlhf_type --model --train_type --torch_dtype --dataset --max_completion_length --num_train_epochs "
    "--per_device_train_batch_size --gradient_accumulation_steps --learning_rate --use_vllm --vllm_mode "
    "--vllm_gpu_memory_utilization --vllm_max_model_len --vllm_tensor_parallel_size --sleep_level --offload_model "
    "--offload_optimizer --deepspeed --num_generations --temperature --beta --reward_funcs --gradient_checkpointing "
    "--lora_rank --lora_alpha --target_modules --max_length --log_completions --system --output_dir")
SWIFT_3_GRPO = flags("num_infer_workers vllm_device async_generate move_model_batches tensor_parallel_size "
                     "gpu_memory_utilization vllm_max_model_len")
TRL_COMMAND = flags(
    "--model_name_or_path --use_vllm --vllm_mode --vllm_gpu_memory_utilization --per_device_train_batch_size "
    "--gradient_checkpointing --bf16 --num_generations --max_completion_length --max_prompt_length --beta "
    "--use_peft --lora_r --deepspeed --output_dir")
VERL_COMMAND = flags(
    "actor_rollout_ref.model.path data.train_batch_size data.max_prompt_length data.max_response_length "
    "actor_rollout_ref.rollout.gpu_memory_utilization actor_rollout_ref.rollout.tensor_model_parallel_size "
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu actor_rollout_ref.actor.fsdp_config.param_offload "
    "trainer.n_gpus_per_node trainer.nnodes algorithm.adv_estimator")
OPENRLHF_COMMAND = flags(
    "--pretrain --actor_num_gpus_per_node --vllm_num_engines --vllm_tensor_parallel_size --colocate_all_models "
    "--vllm_gpu_memory_utilization --zero_stage --adam_offload --gradient_checkpointing --micro_train_batch_size "
    "--micro_rollout_batch_size --prompt_max_len --generate_max_len --n_samples_per_prompt --init_kl_coef "
    "--vllm_enable_sleep --deepspeed_enable_sleep")


def test_every_flag_of_a_real_ms_swift_grpo_command_is_an_argument_of_swift_rlhf():
    current, old = names("ms_swift"), names("ms_swift_3")
    assert SWIFT_COMMAND <= current | old, sorted(SWIFT_COMMAND - current - old)
    # the memory settings the planner acts on are arguments of today's release, not only of 3.x
    assert {"vllm_gpu_memory_utilization", "vllm_max_model_len", "vllm_tensor_parallel_size", "sleep_level",
            "offload_model", "offload_optimizer", "vllm_mode"} <= current
    # --train_type is a 3.x command's: ms-swift 4 calls it --tuner_type and rejects the old name
    assert "train_type" in old and "train_type" not in current and "tuner_type" in current


def test_the_older_ms_swift_grpo_flags_that_commands_in_issues_still_use_are_kept_in_their_own_list():
    assert SWIFT_3_GRPO <= names("ms_swift_3"), sorted(SWIFT_3_GRPO - names("ms_swift_3"))
    assert "num_infer_workers" not in names("ms_swift")  # gone in ms-swift 4 (the hints say so too)


def test_every_flag_of_a_real_trl_grpo_command_is_an_argument_of_trls_parser():
    assert TRL_COMMAND <= names("trl"), sorted(TRL_COMMAND - names("trl"))
    # max_prompt_length left GRPOConfig in TRL 1.x: kept as a name of the older releases, and said so
    old_only = " ".join(line for line in header("trl") if not line.startswith("# source"))
    assert "max_prompt_length" in old_only.split()


def test_every_key_of_a_real_verl_command_is_a_key_of_verls_ppo_trainer_config():
    assert VERL_COMMAND <= names("verl"), sorted(VERL_COMMAND - names("verl"))


def test_every_flag_of_a_real_openrlhf_command_is_an_option_of_train_ppo_ray():
    openrlhf = names("openrlhf")
    assert OPENRLHF_COMMAND <= openrlhf, sorted(OPENRLHF_COMMAND - openrlhf)
    # since 0.10.2 the same settings are dotted; both spellings are real
    assert {"actor.num_gpus_per_node", "vllm.num_engines", "vllm.gpu_memory_utilization"} <= openrlhf


def test_a_misspelt_flag_is_in_no_list_and_its_closest_name_is_the_real_one():
    for list_name in FILES:
        assert "vllm_gpu_memory_utilisation" not in names(list_name)
    for list_name in ("trl", "ms_swift", "openrlhf"):
        close = difflib.get_close_matches("vllm_gpu_memory_utilisation", names(list_name), n=1)
        assert close == ["vllm_gpu_memory_utilization"], list_name
    typo = "actor_rollout_ref.rollout.gpu_memory_utilisation"
    assert typo not in names("verl")
    assert difflib.get_close_matches(typo, names("verl"), n=1) == ["actor_rollout_ref.rollout.gpu_memory_utilization"]


def test_the_launchers_own_options_are_in_their_lists():
    assert {"nproc_per_node", "nproc-per-node", "nnodes", "master_addr", "master_port", "rdzv_backend",
            "standalone"} <= names("torchrun")
    assert {"num_processes", "config_file", "use_deepspeed", "zero_stage", "mixed_precision",
            "main_process_port"} <= names("accelerate_launch")
    assert {"num_gpus", "num_nodes", "hostfile", "include", "master_port", "master_addr"} <= names("deepspeed_launcher")


@pytest.mark.parametrize("list_name", FILES)
def test_each_list_is_sorted_names_under_a_header_naming_its_source_version_and_date(list_name):
    text = (LISTS / f"{list_name}.txt").read_text()
    lines = text.splitlines()
    head = header(list_name)
    assert lines[: len(head)] == head  # header first, then names only
    body = lines[len(head):]
    assert body and body == sorted(set(body))
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*", name) for name in body)  # no leading dashes
    assert any(line.startswith("# source:") and re.search(r"\d+\.\d+", line) for line in head)
    assert any(re.match(r"# generated: \d{4}-\d\d-\d\d ", line) for line in head)
    assert (LISTS / "README.md").read_text().count(f"{list_name}.txt") >= 1


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def _source_version(list_name: str, package: str) -> str | None:
    match = re.search(rf"{package} ([0-9][^ ,;()]*)", " ".join(header(list_name)))
    return match.group(1) if match else None


def test_the_trl_list_holds_every_argument_of_the_installed_trl_it_was_made_from():
    trl = pytest.importorskip("trl")
    if _source_version("trl", "trl") != trl.__version__:
        pytest.skip(f"trl.txt was made from another TRL than {trl.__version__}: rerun tools/refresh_flag_names.py")
    expected = _fields(trl.GRPOConfig) | _fields(trl.ModelConfig) | _fields(trl.ScriptArguments)
    assert expected <= names("trl"), sorted(expected - names("trl"))


def test_the_launcher_lists_hold_every_option_of_the_installed_torchrun_and_accelerate():
    torch = pytest.importorskip("torch")
    from torch.distributed.run import get_args_parser

    if _source_version("torchrun", "torch") == torch.__version__:
        options = {o.lstrip("-") for a in get_args_parser()._actions for o in a.option_strings}
        assert options == names("torchrun")
    accelerate = pytest.importorskip("accelerate")
    if _source_version("accelerate_launch", "accelerate") == accelerate.__version__:
        from accelerate.commands.launch import launch_command_parser

        options = {o.lstrip("-") for a in launch_command_parser()._actions for o in a.option_strings}
        assert options == names("accelerate_launch")


# where the framework's own arguments start in a case's command, and the lists they are checked against
ENTRY = {"ms-swift": ("rlhf", ["ms_swift", "ms_swift_3"]), "openrlhf": ("openrlhf.cli.train_ppo_ray", ["openrlhf"]),
         "trl": (".py", ["trl"])}


def test_every_flag_in_the_real_commands_of_the_plan_fixtures_is_in_its_frameworks_list():
    cases = [json.loads(p.read_text()) for p in sorted(CASES.glob("*.json"))]
    cases = [c for c in cases if c.get("command") and c.get("command_verbatim")]
    if not cases:
        pytest.skip(f"no verbatim commands under {CASES}")
    for case in cases:
        words = shlex.split(case["command"])
        if case["framework"] == "verl":
            keys = {w.split("=", 1)[0] for w in words if re.match(r"[a-z_]+(\.[A-Za-z0-9_\-]+)+=", w)}
            assert keys <= names("verl"), (case["id"], sorted(keys - names("verl")))
            continue
        entry, lists = ENTRY[case["framework"]]
        start = next(i for i, w in enumerate(words) if w == entry or w.endswith(entry))
        known = set().union(*(names(n) for n in lists))
        used = {w[2:].split("=", 1)[0] for w in words[start + 1:] if w.startswith("--")}
        unknown = {u for u in used if u not in known and u.replace("-", "_") not in known}
        assert not unknown, (case["id"], sorted(unknown))
