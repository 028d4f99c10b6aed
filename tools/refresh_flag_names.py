"""Regenerate grpo_doctor/plan/flag_names/*.txt: every argument name each GRPO framework and launcher accepts.

`grpo-doctor plan -- COMMAND` rejects an unknown flag (a typo such as `--vllm_gpu_memory_utilisation`) and
must accept every real one, including the hundreds it ignores. The lists come from the real sources, never
typed by hand:

- trl.txt: the parser of `trl grpo` (TrlParser over GRPOScriptArguments, GRPOConfig, ModelConfig,
  DatasetMixtureConfig) built by the TRL installed in .venv, plus the dataclass fields of older TRL releases
  (git tags of huggingface/trl) and of transformers 4.x's TrainingArguments (wheels), which older commands use.
- ms_swift.txt: HfArgumentParser([RLHFArguments]) of the ms-swift installed in .venv-swift (what `swift rlhf`
  parses); ms_swift_3.txt: the same class read with ast from every ms-swift 3.x tag (its own sources do not
  import here), with transformers 4.x for the TrainingArguments it extends.
- openrlhf.txt: the `add_argument("--...")` calls of openrlhf/cli/train_ppo_ray.py (ast, never imported: it
  needs Ray and GPUs) at every release tag, so the pre-0.10.2 underscore names and the later dotted ones pass.
- verl.txt: every dotted key of verl's Hydra-composed PPO trainer configs (_generated_ppo_trainer.yaml and the
  Megatron one; the single ppo_*trainer.yaml before 0.5) at every release tag and the newest commit.
- accelerate_launch.txt, torchrun.txt, deepspeed_launcher.txt: the option strings of the installed parsers.

Typical use (after `fetch` has mirrored the four repositories under /work/.mirror):
    .venv/bin/python tools/refresh_flag_names.py              # all lists
    .venv/bin/python tools/refresh_flag_names.py --only verl,openrlhf
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from flag_sources import (  # tools/flag_sources.py, next to this script
    Snapshot,
    argparse_options,
    dataclass_fields,
    git,
    hf_names,
    release_tags,
    strip_dashes,
)

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "grpo_doctor" / "plan" / "flag_names"
MIRROR = Path("/work/.mirror")
TRANSFORMERS_4 = ("4.46.3", "4.57.1")  # the 4.x range old TRL (>= 0.14) and ms-swift 3.x ran on
HF_NOTE = "spelling: HfArgumentParser also accepts every name with '-' for '_' (e.g. --per-device-train-batch-size)"


def mirror(name: str) -> Path:
    path = MIRROR / name / "repo"
    if not path.is_dir():
        sys.exit(f"{path} is missing: mirror github:{name.replace('+', '/')} first (the `fetch` tool or git clone --mirror)")
    return path


def transformers_4(python: str, downloads: Path) -> dict[str, Snapshot]:
    """transformers 4.x wheels ({version: Snapshot}), downloaded with pip --no-deps once into downloads/."""
    out = {}
    for version in TRANSFORMERS_4:
        whl = next(downloads.glob(f"transformers-{version}-*.whl"), None)
        if whl is None:
            subprocess.run([python, "-m", "pip", "download", f"transformers=={version}", "--no-deps", "-q",
                            "-d", str(downloads)], check=True)
            whl = next(downloads.glob(f"transformers-{version}-*.whl"))
        out[version] = Snapshot.wheel(whl)
    return out


def run_json(python: str, code: str) -> dict:
    out = subprocess.run([python, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{python} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the lists

LIVE_TRL = """
import dataclasses, json, os, trl, transformers
from trl import GRPOConfig, ModelConfig, ScriptArguments
from trl.scripts.grpo import make_parser
fields = [f.name for c in (GRPOConfig, ModelConfig, ScriptArguments) for f in dataclasses.fields(c) if f.init]
print(json.dumps({"trl": trl.__version__, "transformers": transformers.__version__,
                  "site": os.path.dirname(os.path.dirname(trl.__file__)),
                  "options": [o for a in make_parser()._actions for o in a.option_strings], "fields": fields}))
"""

TRL_CLASSES = [("trl.trainer.grpo_config", "GRPOConfig"), ("trl.trainer.model_config", "ModelConfig"),
               ("trl.scripts.utils", "ScriptArguments"), ("trl.scripts.grpo", "GRPOScriptArguments"),
               ("trl.scripts.utils", "DatasetMixtureConfig")]


def hf_option_names(options) -> set[str]:
    """Long options of an HfArgumentParser, minus the '-' spellings it adds for every '_' name."""
    return {o[2:] for o in options if o.startswith("--") and "-" not in o[2:]}


def trl_list(args) -> dict:
    live = run_json(args.python, LIVE_TRL)
    current = hf_option_names(live["options"]) | set(live["fields"]) | {"config"}  # TrlParser reads --config itself
    # the installed classes read with ast, as the older tags are: a check that the reader misses nothing
    installed = Snapshot.directory(Path(live["site"]))
    by_ast = set().union(*(hf_names(dataclass_fields({"trl": installed, "transformers": installed}, module, name))
                           for module, name in TRL_CLASSES))
    if by_ast ^ (current - {"help", "config"}):
        print(f"trl: ast reader and TrlParser differ: only ast {sorted(by_ast - current)}, "
              f"only parser {sorted(current - by_ast - {'help', 'config'})}", file=sys.stderr)
    trl_git = mirror("huggingface+trl")
    tags = [t for t in release_tags(trl_git, r"v\d+\.\d+\.\d+") if _version(t) >= (0, 14)]  # GRPO came in 0.14
    tfs = transformers_4(args.python, args.downloads)
    old = set()
    for tag in tags:
        for tf in tfs.values():
            snaps = {"trl": Snapshot.git(trl_git, tag), "transformers": tf}
            for module, name in TRL_CLASSES:
                try:
                    old |= hf_names(dataclass_fields(snaps, module, name))
                except LookupError:
                    if name == "GRPOConfig":
                        raise
    return {"names": current | old, "old_only": old - current, "notes": [HF_NOTE], "source": [
        f"installed: trl {live['trl']} with transformers {live['transformers']} (.venv): the options of "
        "trl.scripts.grpo.make_parser() (TrlParser over GRPOScriptArguments, GRPOConfig, ModelConfig, "
        "DatasetMixtureConfig), the fields of GRPOConfig, ModelConfig, ScriptArguments, and --config",
        f"older: GRPOConfig, ModelConfig, ScriptArguments, GRPOScriptArguments read with ast at huggingface/trl "
        f"tags {tags[0]}..{tags[-1]} ({len(tags)} tags), over TrainingArguments of transformers "
        f"{' and '.join(TRANSFORMERS_4)} (wheels)"]}


def _version(tag: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", tag)[:3])


LIVE_SWIFT = """
import json, swift
from transformers import HfArgumentParser
try:
    from swift.arguments import RLHFArguments
except ImportError:
    from swift.llm import RLHFArguments
try:  # how ms-swift builds its own parser (swift.utils.utils.parse_args)
    from swift.utils.utils import _patch_get_type_hints
except ImportError:
    import contextlib
    _patch_get_type_hints = contextlib.nullcontext
with _patch_get_type_hints():
    parser = HfArgumentParser([RLHFArguments])
print(json.dumps({"swift": swift.__version__, "module": RLHFArguments.__module__,
                  "options": [o for a in parser._actions for o in a.option_strings]}))
"""


def swift_list(args) -> dict:
    live = run_json(args.swift_python, LIVE_SWIFT)
    names = hf_option_names(live["options"])
    # the same class read with ast, as ms_swift_3.txt is: a check that the reader misses nothing
    site = Path(run_json(args.swift_python, "import json, swift, os; print(json.dumps(os.path.dirname(os.path.dirname(swift.__file__))))"))
    snaps = {"swift": Snapshot.directory(site), "transformers": Snapshot.directory(site), "trl": Snapshot.directory(site)}
    by_ast = hf_names(dataclass_fields(snaps, live["module"], "RLHFArguments"))
    if by_ast ^ (names - {"help"}):
        print(f"ms_swift: ast reader and HfArgumentParser differ: only ast {sorted(by_ast - names)}, "
              f"only parser {sorted(names - by_ast - {'help'})}", file=sys.stderr)
    return {"names": names, "old_only": set(), "notes": [HF_NOTE], "source": [
        f"installed: ms-swift {live['swift']} (.venv-swift): the options of HfArgumentParser([RLHFArguments]) "
        f"({live['module']}), what `swift rlhf` parses"]}


def swift3_list(args) -> dict:
    git_dir = mirror("modelscope+ms-swift")
    tags = release_tags(git_dir, r"v3\.\d+\.\d+(\.post\d+)?")
    tfs = transformers_4(args.python, args.downloads)
    current = set(_read_list("ms_swift.txt"))
    names = set()
    for tag in tags:
        for tf in tfs.values():
            snaps = {"swift": Snapshot.git(git_dir, tag), "transformers": tf}
            names |= hf_names(dataclass_fields(snaps, "swift.llm.argument.rlhf_args", "RLHFArguments"))
    names.add("help")
    return {"names": names, "old_only": names - current if current else set(), "notes": [
        HF_NOTE, "use with ms_swift.txt: a swift command is accepted when each name is in either list"], "source": [
        f"RLHFArguments (swift/llm/argument/rlhf_args.py and its bases) read with ast at modelscope/ms-swift tags "
        f"{tags[0]}..{tags[-1]} ({len(tags)} tags), over Seq2SeqTrainingArguments of transformers "
        f"{' and '.join(TRANSFORMERS_4)} (wheels)"],
        "old_label": "not in ms_swift.txt (gone from ms-swift 4)"}


def openrlhf_list(args) -> dict:
    git_dir = mirror("OpenRLHF+OpenRLHF")
    path = "openrlhf/cli/train_ppo_ray.py"
    tags = [t for t in release_tags(git_dir, r"v\d+\.\d+\.\d+(\.post\d+)?")
            if subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "-e", f"{t}:{path}"],
                                  capture_output=True).returncode == 0]
    names, switches, per_tag = set(), set(), {}
    for tag in tags:
        options, no_value = argparse_options(git(git_dir, "show", f"{tag}:{path}"))
        per_tag[tag] = strip_dashes(o for o in options if o.startswith("--"))
        names |= per_tag[tag]
        switches |= strip_dashes(o for o in no_value if o.startswith("--"))
    latest = tags[-1]
    version = git(git_dir, "show", f"{latest}:version.txt").strip()
    return {"names": names, "switches": switches, "old_only": names - per_tag[latest], "source": [
        f"the add_argument calls of {path} read with ast at OpenRLHF/OpenRLHF tags {tags[0]}..{latest} "
        f"({len(tags)} tags; {latest} is version {version}); 0.10.2 renamed the options to dotted names "
        "(--actor_num_gpus_per_node became --actor.num_gpus_per_node), so both spellings are listed"],
        "old_label": f"not in {latest}"}


def verl_list(args) -> dict:
    import yaml  # PyYAML, in .venv

    git_dir = mirror("volcengine+verl")
    tags = release_tags(git_dir, r"v\d+\.\d+(\.\d+)?(\.post\d+)?")
    head = git(git_dir, "rev-parse", "HEAD").strip()
    head_version = git(git_dir, "show", "HEAD:verl/version/version").strip()
    names, per_rev = set(), {}
    for rev in [*tags, head]:
        files = git(git_dir, "ls-tree", "--name-only", rev, "verl/trainer/config/").split()
        generated = [f for f in files if f.rsplit("/", 1)[-1] in ("_generated_ppo_trainer.yaml",
                                                                   "_generated_ppo_megatron_trainer.yaml")]
        composed = generated or [f for f in files if f.rsplit("/", 1)[-1] in ("ppo_trainer.yaml",
                                                                                "ppo_megatron_trainer.yaml")]
        per_rev[rev] = set()
        for path in composed:
            config = yaml.safe_load(git(git_dir, "show", f"{rev}:{path}"))
            if "defaults" in config and not generated:
                raise ValueError(f"{rev}:{path} composes other files but has no _generated copy")
            per_rev[rev] |= set(_dotted(config))
        names |= per_rev[rev]
    return {"names": names, "old_only": names - per_rev[head], "notes": [
        "every node is listed, inner ones too (a whole sub-config can be overridden); Hydra's `+key=value` adds "
        "keys that are not here, and `hydra.*` sets Hydra itself"], "source": [
        f"the Hydra-composed PPO trainer configs of volcengine/verl (verl/trainer/config/_generated_ppo_trainer.yaml "
        f"and _generated_ppo_megatron_trainer.yaml; ppo_trainer.yaml and ppo_megatron_trainer.yaml before 0.5) "
        f"flattened to dotted keys, at tags {tags[0]}..{tags[-1]} ({len(tags)} tags) and commit {head[:12]} "
        f"(version {head_version})"], "old_label": f"not in {head[:12]}"}


def _dotted(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            if not prefix and key == "defaults":
                continue
            path = f"{prefix}{key}"
            yield path
            yield from _dotted(value, path + ".")


LIVE_LAUNCHERS = """
import argparse, json, accelerate, torch, deepspeed
from accelerate.commands.launch import launch_command_parser
from torch.distributed.run import get_args_parser
import deepspeed.launcher.runner as runner

class Parser(Exception):
    pass

def grab(self, *args, **kwargs):  # deepspeed builds its parser inside parse_args(): stop it there
    raise Parser(self)

argparse.ArgumentParser.parse_args = grab
try:
    runner.parse_args([])
except Parser as got:
    ds_parser = got.args[0]
actions = lambda p: [[a.option_strings, a.nargs == 0] for a in p._actions]
print(json.dumps({"accelerate": [accelerate.__version__, actions(launch_command_parser())],
                  "torch": [torch.__version__, actions(get_args_parser())],
                  "deepspeed": [deepspeed.__version__, actions(ds_parser)]}))
"""

LAUNCHERS = {
    "accelerate_launch": ("accelerate", "accelerate.commands.launch.launch_command_parser()",
                          "`accelerate launch` takes '-' or '_' in every option (accelerate's CustomArgumentParser)"),
    "torchrun": ("torch", "torch.distributed.run.get_args_parser()",
                 "both spellings are listed where torchrun defines both (--nproc-per-node, --nproc_per_node)"),
    "deepspeed_launcher": ("deepspeed", "the parser deepspeed.launcher.runner.parse_args() builds",
                           "only the spellings listed are accepted"),
}


def launcher_list(args, which: str) -> dict:
    live = run_json(args.python, LIVE_LAUNCHERS)
    package, where, spelling = LAUNCHERS[which]
    version, actions = live[package]
    names = {o.lstrip("-") for options, _ in actions for o in options}
    switches = {o.lstrip("-") for options, no_value in actions if no_value for o in options}
    return {"names": names, "switches": switches, "old_only": set(), "notes": [
        spelling, "one-letter names are short options (-m); the script and its arguments follow the options"],
        "source": [f"installed: {package} {version} (.venv): the option strings of {where}"]}


# ---------------------------------------------------------------- writing

LISTS = {
    "trl": ("TRL GRPO: `trl grpo` / a script parsing GRPOConfig with TrlParser", trl_list),
    "ms_swift": ("ms-swift: `swift rlhf` (RLHFArguments), the current release", swift_list),
    "ms_swift_3": ("ms-swift 3.x: `swift rlhf` (RLHFArguments) of the 3.x releases", swift3_list),
    "openrlhf": ("OpenRLHF: `python -m openrlhf.cli.train_ppo_ray`", openrlhf_list),
    "verl": ("verl: Hydra overrides of `python -m verl.trainer.main_ppo`", verl_list),
    "accelerate_launch": ("`accelerate launch` options (before the script)", lambda a: launcher_list(a, "accelerate_launch")),
    "torchrun": ("`torchrun` / `python -m torch.distributed.run` options (before the script)", lambda a: launcher_list(a, "torchrun")),
    "deepspeed_launcher": ("`deepspeed` launcher options (before the script)", lambda a: launcher_list(a, "deepspeed_launcher")),
}


def _read_list(filename: str) -> list[str]:
    path = OUT / filename
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def _wrapped(label: str, names) -> list[str]:
    text = f"{label}: " + " ".join(sorted(names))
    return textwrap.wrap(text, 116, initial_indent="# ", subsequent_indent="#   ", break_on_hyphens=False)


def write(name: str, what: str, found: dict, today: str) -> Path:
    names = sorted(found["names"])
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_.\-]+", n)]
    if bad:
        raise ValueError(f"{name}: odd names {bad}")
    lines = [f"# {name}.txt: {what}"]
    lines += [f"# source: {s}" for s in found["source"]]
    lines.append(f"# generated: {today} by tools/refresh_flag_names.py (rerun it, do not edit by hand); "
                 f"{len(names)} names, one a line, without leading dashes")
    lines += [f"# {note}" for note in found.get("notes", [])]
    if found.get("switches"):
        lines += _wrapped("takes no value", found["switches"])
    if found.get("old_only"):
        lines += _wrapped(found.get("old_label", "only in older releases"), found["old_only"])
    path = OUT / f"{name}.txt"
    path.write_text("\n".join(lines + names) + "\n")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(LISTS), help=f"comma-separated subset of {','.join(LISTS)}")
    parser.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"),
                        help="interpreter with trl, transformers, accelerate, torch, deepspeed, pip")
    parser.add_argument("--swift-python", default=str(REPO / ".venv-swift" / "bin" / "python"),
                        help="interpreter with ms-swift (it pins its own trl/transformers)")
    parser.add_argument("--downloads", type=Path, default=Path(tempfile.gettempdir()) / "grpo-doctor-flag-sources",
                        help="where the transformers 4.x wheels are downloaded (pip download --no-deps)")
    args = parser.parse_args(argv)
    args.downloads.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    today = datetime.date.today().isoformat()
    for name in args.only.split(","):
        what, extract = LISTS[name]
        path = write(name, what, extract(args), today)
        print(f"{path.relative_to(REPO)}: {len(_read_list(path.name))} names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
