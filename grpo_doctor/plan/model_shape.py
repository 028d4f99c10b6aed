"""A model's shape from its Hugging Face `config.json`: parameter counts and KV-cache bytes per token.

The planner never loads weights and never downloads: the model is a local checkpoint directory, a
`config.json`, or a hub id found in the local Hugging Face cache (HF_HUB_CACHE, HF_HOME, or
~/.cache/huggingface/hub). Counting follows the decoder layout of Llama / Qwen2 / Qwen3 / Mistral /
Gemma (attention with grouped KV heads, a gated MLP, RMSNorms) and of their mixture-of-experts
variants (Qwen2-MoE / Qwen3-MoE / Mixtral / DeepSeek: routed experts, shared experts); within 0.1 % of
the published sizes of the models under tests/data/plan/models. Multi-head latent attention
(DeepSeek-V2/V3) is counted as plain attention: docs/plan.md names that limit.

Typical use:
    shape = load_model_shape("Qwen/Qwen2.5-7B-Instruct")      # hub cache, a directory or a config.json
    shape.total_params, shape.kv_bytes_per_token(dtype_bytes=2)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.plan.known_models import known_model, table_source
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.safe_read import UnreadableFile, read_json

MAX_CONFIG_BYTES = 2**20  # a config.json is a few KB


class ModelConfigError(DoctorError):
    hint = "pass --model-config PATH/config.json (the planner reads the model's config.json; it never downloads)"


@dataclass(frozen=True)
class ModelShape:
    name: str
    source: str  # the config.json read
    model_type: str
    hidden: int
    layers: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_embeddings: bool
    attention_bias: bool
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    dense_layers: int = 0  # leading dense layers of a MoE model (DeepSeek first_k_dense_replace)
    qk_norm: bool = False

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def attention_params(self) -> int:
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        bias = (q_out + 2 * kv_out) if self.attention_bias else 0
        norms = 2 * self.head_dim if self.qk_norm else 0
        return self.hidden * (q_out + 2 * kv_out) + q_out * self.hidden + bias + norms

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden * self.intermediate  # gate, up, down

    @property
    def moe_mlp_params(self) -> int:
        routed = self.experts * 3 * self.hidden * self.expert_intermediate
        shared = 3 * self.hidden * self.shared_expert_intermediate
        router = self.experts * self.hidden
        return routed + shared + router

    @property
    def layer_params(self) -> int:
        """Parameters of one (dense) decoder layer, with its two norms."""
        return self.attention_params + self.dense_mlp_params + 2 * self.hidden

    @property
    def total_params(self) -> int:
        moe_layers = self.layers - self.dense_layers if self.experts else 0
        dense_layers = self.layers - moe_layers
        per_moe_layer = self.attention_params + self.moe_mlp_params + 2 * self.hidden
        head = 0 if self.tied_embeddings else self.embedding_params
        return (self.embedding_params + head + self.hidden + dense_layers * self.layer_params
                + moe_layers * per_moe_layer)

    @property
    def largest_module_params(self) -> int:
        """The largest single weight matrix (what ZeRO-3 must gather whole): usually the embedding."""
        candidates = [self.embedding_params, self.hidden * self.intermediate,
                      self.hidden * self.heads * self.head_dim]
        if self.experts:
            candidates.append(self.hidden * self.expert_intermediate)
        return max(candidates)

    @property
    def linear_shapes(self) -> tuple[tuple[int, int], ...]:
        """(in, out) of every linear layer LoRA targets in one layer (all-linear), routed experts excluded."""
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        width = self.expert_intermediate if self.experts else self.intermediate
        return ((self.hidden, q_out), (self.hidden, kv_out), (self.hidden, kv_out), (q_out, self.hidden),
                (self.hidden, width), (self.hidden, width), (width, self.hidden))

    def lora_params(self, rank: int) -> int:
        """LoRA adapters on every linear layer of every decoder layer (ms-swift's and PEFT's all-linear)."""
        return self.layers * sum(rank * (fan_in + fan_out) for fan_in, fan_out in self.linear_shapes)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """vLLM's KV cache per token: keys and values of every layer, kv_heads x head_dim each."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def shape_from_config(config: dict, name: str, source: str) -> ModelShape:
    """A ModelShape from a parsed config.json (multimodal configs: their `text_config`)."""
    try:
        return _shape_from_config(config, name, source)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:  # a value of the wrong type
        raise ModelConfigError(f"{source}: not a decoder config.json this planner reads ({exc})") from None


def _shape_from_config(config: dict, name: str, source: str) -> ModelShape:
    cfg = config.get("text_config") or config.get("llm_config") or config
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{source}: text_config is not an object")
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        vocab = int(cfg.get("vocab_size") or config["vocab_size"])
        intermediate = int(cfg.get("intermediate_size") or 4 * hidden)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelConfigError(f"{source}: not a decoder config.json this planner reads (missing or bad {exc})") from None
    for key, value in (("hidden_size", hidden), ("num_attention_heads", heads), ("num_hidden_layers", layers),
                       ("vocab_size", vocab), ("intermediate_size", intermediate)):
        if not 0 < value < 10**7:
            raise ModelConfigError(f"{source}: {key} {value} is not a size a model has")
    model_type = str(cfg.get("model_type") or config.get("model_type") or "unknown")
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0)
    shared = cfg.get("shared_expert_intermediate_size")
    if shared is None and cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * int(cfg.get("moe_intermediate_size") or intermediate)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    if not 0 < kv_heads <= heads or head_dim < 1:
        raise ModelConfigError(f"{source}: {kv_heads} key-value heads of {head_dim} for {heads} attention heads")
    return ModelShape(
        name=name, source=source, model_type=model_type, hidden=hidden, layers=layers,
        intermediate=intermediate, vocab=vocab, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        # Qwen2 / Qwen2-MoE put biases on q, k, v; Llama and Qwen3 say attention_bias (default false).
        attention_bias=bool(cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe", "qwen2_vl",
                                                                      "qwen2_5_vl"))),
        experts=experts,
        experts_per_token=int(cfg.get("num_experts_per_tok") or 0),
        expert_intermediate=int(cfg.get("moe_intermediate_size") or (intermediate if experts else 0)),
        shared_expert_intermediate=int(shared or 0),
        dense_layers=int(cfg.get("first_k_dense_replace") or 0) if experts else 0,
        qk_norm=model_type.startswith("qwen3"),
    )


def load_model_shape(model: str, config_path: str | Path | None = None) -> ModelShape:
    """The shape of `model` (hub id or path), from `config_path` when given."""
    path = Path(config_path) if config_path else find_config(model)
    if path is None:
        known = known_model(model)  # a local or cached config.json wins over grpo-doctor's table
        if known is not None:
            return shape_from_config(dict(known.config), name=model, source=table_source(known, model))
        raise ModelConfigError(f"no config.json for model {model!r}: not a local path, not in the Hugging Face "
                               "cache here and not one of the public models grpo-doctor knows",
                               f"pass --model-config PATH/config.json (or its directory), e.g. after `hf download "
                               f"{model} config.json`; docs/plan.md lists the models known without one")
    if path.is_dir():
        path = path / "config.json"
    try:  # a device, a FIFO or a file past the cap is refused without being read (schema/safe_read.py)
        config = read_json(path, cap=MAX_CONFIG_BYTES, what="a model's config.json")
    except UnreadableFile as exc:
        raise ModelConfigError(f"cannot read model config {path}: {exc.why}") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"cannot read model config {path}: not a JSON object")
    return shape_from_config(config, name=model or str(path), source=str(path))


def find_config(model: str) -> Path | None:
    """A local directory or file, else the newest snapshot of the hub id in the local Hugging Face cache,
    else ModelScope's cache."""
    local = Path(model).expanduser()
    if local.is_file():
        return local
    if (local / "config.json").is_file():
        return local / "config.json"
    if model.count("/") != 1:
        return None
    folder = "models--" + model.replace("/", "--")
    for cache in _hub_caches():
        snapshots = cache / folder / "snapshots"
        found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True) \
            if snapshots.is_dir() else []
        if found:
            return found[0]
    for root in _modelscope_caches():  # ms-swift's default hub keeps plain directories
        for candidate in (root / "models" / model / "config.json", root / model / "config.json",
                          root / "models" / model.replace(".", "___") / "config.json"):
            if candidate.is_file():
                return candidate
    return None


def _hub_caches() -> list[Path]:
    caches = [os.environ.get("HF_HUB_CACHE"), os.environ.get("HUGGINGFACE_HUB_CACHE")]
    if os.environ.get("HF_HOME"):
        caches.append(str(Path(os.environ["HF_HOME"]) / "hub"))
    caches.append(str(Path.home() / ".cache" / "huggingface" / "hub"))
    return [Path(c) for c in caches if c]


def _modelscope_caches() -> list[Path]:
    """ModelScope's cache: MODELSCOPE_CACHE, else ~/.cache/modelscope/hub (<org>/<name>, or models/<org>/<name>
    in newer releases; a dot in a name is written ___)."""
    roots = [os.environ.get("MODELSCOPE_CACHE"), str(Path.home() / ".cache" / "modelscope" / "hub")]
    return [Path(r) for r in roots if r]
