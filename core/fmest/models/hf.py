"""Hugging Face ``config.json`` -> :class:`~fmest.models.spec.ModelSpec`.

The parameter inventory built here mirrors, module by module, what ``transformers`` (5.x)
instantiates for ``AutoModelForCausalLM.from_config(config)``, so ``param_counts().total`` is
exact for the architectures listed in :data:`SUPPORTED_MODEL_TYPES` (the test suite checks every
shipped preset against a meta-device instantiation). This module imports neither torch nor
transformers.

Naming: linear modules carry the attribute names LoRA ``target_modules`` match. Fused MoE
expert tensors (transformers 5 stores experts as 3-D ``gate_up_proj``/``down_proj`` parameters)
are listed under the per-expert projection names the original checkpoints and peft configs use
(``w1``/``w3``/``w2`` for Mixtral, ``gate_proj``/``up_proj``/``down_proj`` for Qwen-MoE and
DeepSeek, ``input_linear``/``output_linear`` for GraniteMoE); their parameter counts are the same.

Unknown ``model_type`` values fall back to a generic Llama-style decoder with a warning.
"""

from __future__ import annotations

from typing import Any

from fmest.bounds import check_hf_config
from fmest.errors import InputError
from fmest.models.hf_encdec import ENCODER_DECODER_TYPES, bart_inventory, t5_inventory
from fmest.models.hf_vision import VISION_TYPES, mllama_text_inventory, vision_inventory
from fmest.models.spec import LinearModule, ModelSpec, ParamGroup

SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "gemma", "gemma2",
    "gemma3_text", "gemma3", "phi3", "granite", "granitemoe", "falcon", "gpt2", "bloom", "opt",
    "deepseek_v2", "deepseek_v3", "mpt", "gpt_bigcode", "qwen3_moe", "phi", "gpt_neox",
    "stablelm", "gpt_oss", "olmo2", "smollm3", "llama4_text", "nemotron", "qwen", "chatglm",
    "baichuan",
    *ENCODER_DECODER_TYPES,
    *VISION_TYPES,
)

_MISSING = object()

# per model_type default of tie_word_embeddings (transformers' config classes)
_TIE_DEFAULT = {
    "gemma": True, "gemma2": True, "gemma3_text": True, "falcon": True, "gpt2": True,
    "bloom": True, "opt": True, "mpt": True, "gpt_bigcode": True, "smollm3": True,
}


class _Cfg:
    """Key access on a config dict with aliases, defaults and InputError for missing keys."""

    def __init__(self, config: dict) -> None:
        self.c = config

    def get(self, *keys: str, default: Any = _MISSING) -> Any:
        for k in keys:
            v = self.c.get(k)
            if v is not None:
                return v
        if default is _MISSING:
            raise InputError(f"model.config.{keys[0]}",
                             "required key missing from the model config"
                             + (f" (also looked for: {', '.join(keys[1:])})" if keys[1:] else ""))
        return default

    def int(self, *keys: str, default: Any = _MISSING) -> int:
        v = self.get(*keys, default=default)
        try:
            iv = int(v)
        except (TypeError, ValueError):
            raise InputError(f"model.config.{keys[0]}", "must be an integer", value=v) from None
        if iv != v and not isinstance(v, bool):
            raise InputError(f"model.config.{keys[0]}", "must be an integer", value=v)
        return iv

    def bool(self, key: str, default: bool) -> bool:
        v = self.c.get(key)
        return default if v is None else bool(v)


def _dropout(c: _Cfg, *keys: str) -> float:
    vals = []
    for k in keys:
        v = c.c.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            vals.append(float(v))
    return max(vals) if vals else 0.0


_LLAMA_DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop",
                       "attn_pdrop", "hidden_dropout_prob", "attention_probs_dropout_prob",
                       "dropout", "resid_dropout")


class _Builder:
    def __init__(self) -> None:
        self.linears: list[LinearModule] = []
        self.groups: list[ParamGroup] = []

    def lin(self, name: str, i: int, o: int, *, bias: bool = False, layers: int = 1,
            copies: int = 1, active: float = 1.0, kind: str = "other") -> None:
        if layers <= 0 or copies <= 0:
            return
        self.linears.append(LinearModule(name=name, in_features=i, out_features=o, bias=bias,
                                         layers=layers, copies=copies, active_copies=active,
                                         kind=kind))

    def grp(self, name: str, params: int, kind: str) -> None:
        if params:
            self.groups.append(ParamGroup(name=name, params=int(params), kind=kind))

    def gated_mlp(self, h: int, inter: int, layers: int, *, kind: str = "mlp", bias: bool = False,
                  names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
                  copies: int = 1, active: float = 1.0) -> None:
        g, u, d = names
        self.lin(g, h, inter, bias=bias, layers=layers, copies=copies, active=active, kind=kind)
        self.lin(u, h, inter, bias=bias, layers=layers, copies=copies, active=active, kind=kind)
        self.lin(d, inter, h, bias=bias, layers=layers, copies=copies, active=active, kind=kind)

    def attention(self, h: int, nh: int, nkv: int, hd: int, layers: int, *,
                  qkv_bias: bool = False, o_bias: bool = False) -> None:
        """Separate q/k/v/o projections (grouped-query attention when nkv < nh)."""
        self.lin("q_proj", h, nh * hd, bias=qkv_bias, layers=layers, kind="attention")
        self.lin("k_proj", h, nkv * hd, bias=qkv_bias, layers=layers, kind="attention")
        self.lin("v_proj", h, nkv * hd, bias=qkv_bias, layers=layers, kind="attention")
        self.lin("o_proj", nh * hd, h, bias=o_bias, layers=layers, kind="attention")

    def norms_embed_head(self, h: int, layers: int, norm_params_per_layer: int, vocab: int,
                         tie: bool) -> None:
        """Per-layer norms, the final norm, the embedding and (untied) output head."""
        self.grp("layer_norms", norm_params_per_layer * layers, "norm")
        self.grp("final_norm", h, "norm")
        self.embed_and_head(vocab, h, tie)

    def embed_and_head(self, vocab: int, h: int, tie: bool, head_name: str = "lm_head",
                       emb_name: str = "embed_tokens") -> None:
        self.grp(emb_name, vocab * h, "embedding")
        if not tie:
            self.lin(head_name, h, vocab, kind="head")


def _decoder_dims(c: _Cfg, *, head_dim_key: bool = True) -> tuple[int, ...]:
    """(hidden, layers, heads, kv heads, head dim, intermediate, vocab) of a Llama-style
    config; ``head_dim_key`` False ignores a ``head_dim`` key (models that derive it)."""
    h = c.int("hidden_size")
    nh = c.int("num_attention_heads")
    hd = c.int("head_dim", default=h // nh) if head_dim_key else h // nh
    return (h, c.int("num_hidden_layers"), nh, c.int("num_key_value_heads", default=nh), hd,
            c.int("intermediate_size"), c.int("vocab_size"))


# --------------------------------------------------------------------------- llama family

def _llama_like(mt: str, c: _Cfg, b: _Builder) -> dict:
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c)
    tie = c.bool("tie_word_embeddings", _TIE_DEFAULT.get(mt, False))

    if mt == "qwen2":
        qkv_bias, o_bias = True, False
    elif mt == "mistral":
        qkv_bias = o_bias = False
    else:  # llama, granite, qwen3, gemma*, phi3 (phi3 handled below)
        qkv_bias = o_bias = c.bool("attention_bias", False)
    mlp_bias = c.bool("mlp_bias", False) if mt in ("llama", "granite") else False

    if mt == "phi3":
        b.lin("qkv_proj", h, (nh + 2 * nkv) * hd, layers=L, kind="attention")
        b.lin("o_proj", nh * hd, h, layers=L, kind="attention")
        b.lin("gate_up_proj", h, 2 * inter, layers=L, kind="mlp")
        b.lin("down_proj", inter, h, layers=L, kind="mlp")
    else:
        b.attention(h, nh, nkv, hd, L, qkv_bias=qkv_bias, o_bias=o_bias)
        b.gated_mlp(h, inter, L, bias=mlp_bias)

    norms_per_layer = 4 * h if mt in ("gemma2", "gemma3_text") else 2 * h
    if mt in ("qwen3", "gemma3_text"):
        norms_per_layer += 2 * hd  # q_norm, k_norm over head_dim
    b.norms_embed_head(h, L, norms_per_layer, V, tie)

    sw = c.get("sliding_window", default=None)
    if mt == "qwen2" and not c.bool("use_sliding_window", False):
        sw = None
    if mt in ("gemma",):
        sw = None
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=True, sliding_window=int(sw) if sw else None,
                dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS),
                eager_only=(mt == "gemma2"))


# --------------------------------------------------------------------------- MoE decoders

def _mixtral(c: _Cfg, b: _Builder) -> dict:
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c)
    E = c.int("num_local_experts", "num_experts")
    k = c.int("num_experts_per_tok")
    tie = c.bool("tie_word_embeddings", False)
    b.attention(h, nh, nkv, hd, L)
    b.lin("gate", h, E, layers=L, kind="router")
    b.gated_mlp(h, inter, L, kind="expert", names=("w1", "w3", "w2"), copies=E, active=k)
    b.norms_embed_head(h, L, 2 * h, V, tie)
    sw = c.get("sliding_window", default=None)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                num_experts=E, experts_per_token=k, moe_intermediate_size=inter,
                num_moe_layers=L, sliding_window=int(sw) if sw else None,
                dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


def _qwen2_moe(c: _Cfg, b: _Builder) -> dict:
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c, head_dim_key=False)
    E = c.int("num_experts")
    k = c.int("num_experts_per_tok")
    moe_inter = c.int("moe_intermediate_size")
    shared_inter = c.int("shared_expert_intermediate_size", default=0)
    step = c.int("decoder_sparse_step", default=1)
    mlp_only = set(c.get("mlp_only_layers", default=[]) or [])
    tie = c.bool("tie_word_embeddings", False)
    qkv_bias = c.bool("qkv_bias", True)
    n_moe = sum(1 for i in range(L) if i not in mlp_only and E > 0 and (i + 1) % step == 0)
    n_dense = L - n_moe
    b.attention(h, nh, nkv, hd, L, qkv_bias=qkv_bias)
    b.gated_mlp(h, inter, n_dense)
    b.lin("gate", h, E, layers=n_moe, kind="router")
    b.gated_mlp(h, moe_inter, n_moe, kind="expert", copies=E, active=k)
    if shared_inter:
        b.gated_mlp(h, shared_inter, n_moe, kind="shared_expert")
        b.lin("shared_expert_gate", h, 1, layers=n_moe, kind="router")
    b.norms_embed_head(h, L, 2 * h, V, tie)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                num_experts=E, experts_per_token=k, moe_intermediate_size=moe_inter,
                num_moe_layers=n_moe, dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


def _granitemoe(c: _Cfg, b: _Builder) -> dict:
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c, head_dim_key=False)
    E = c.int("num_local_experts")
    k = c.int("num_experts_per_tok")
    tie = c.bool("tie_word_embeddings", False)
    ab = c.bool("attention_bias", False)
    b.attention(h, nh, nkv, hd, L, qkv_bias=ab, o_bias=ab)
    b.lin("router", h, E, layers=L, kind="router")
    b.lin("input_linear", h, 2 * inter, layers=L, copies=E, active=k, kind="expert")
    b.lin("output_linear", inter, h, layers=L, copies=E, active=k, kind="expert")
    b.norms_embed_head(h, L, 2 * h, V, tie)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                num_experts=E, experts_per_token=k, moe_intermediate_size=inter,
                num_moe_layers=L, dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


def _deepseek(mt: str, c: _Cfg, b: _Builder, warnings: list[str]) -> dict:
    h = c.int("hidden_size")
    L = c.int("num_hidden_layers")
    nh = c.int("num_attention_heads")
    inter = c.int("intermediate_size")
    V = c.int("vocab_size")
    E = c.int("n_routed_experts", "num_experts", "num_local_experts", default=0)
    k = c.int("num_experts_per_tok", default=0)
    moe_inter = c.int("moe_intermediate_size", default=0)
    n_shared = c.int("n_shared_experts", default=0)
    first_dense = c.int("first_k_dense_replace", default=0)
    freq = c.int("moe_layer_freq", default=1)
    q_lora = c.int("q_lora_rank", default=0)
    kv_lora = c.int("kv_lora_rank")
    nope = c.int("qk_nope_head_dim")
    rope = c.int("qk_rope_head_dim")
    vd = c.int("v_head_dim")
    ab = c.bool("attention_bias", False)
    tie = c.bool("tie_word_embeddings", False)
    qk = nope + rope

    if freq != 1:
        warnings.append(f"moe_layer_freq={freq}: transformers' {mt} model ignores it (every layer "
                        f"from first_k_dense_replace on is MoE); counted the original way "
                        f"(layer i is MoE when i >= first_k_dense_replace and i % freq == 0)")
    n_moe = sum(1 for i in range(L) if E > 0 and i >= first_dense and i % freq == 0)
    n_dense = L - n_moe

    if q_lora:
        b.lin("q_a_proj", h, q_lora, bias=ab, layers=L, kind="attention")
        b.grp("q_a_layernorm", q_lora * L, "norm")
        b.lin("q_b_proj", q_lora, nh * qk, layers=L, kind="attention")
    else:
        b.lin("q_proj", h, nh * qk, layers=L, kind="attention")
    b.lin("kv_a_proj_with_mqa", h, kv_lora + rope, bias=ab, layers=L, kind="attention")
    b.grp("kv_a_layernorm", kv_lora * L, "norm")
    b.lin("kv_b_proj", kv_lora, nh * (nope + vd), layers=L, kind="attention")
    b.lin("o_proj", nh * vd, h, bias=ab, layers=L, kind="attention")

    b.gated_mlp(h, inter, n_dense)
    b.lin("gate", h, E, layers=n_moe, kind="router")
    b.gated_mlp(h, moe_inter, n_moe, kind="expert", copies=E, active=k)
    if n_shared:
        b.gated_mlp(h, moe_inter * n_shared, n_moe, kind="shared_expert")
    b.grp("layer_norms", 2 * h * L, "norm")
    b.grp("final_norm", h, "norm")
    b.embed_and_head(V, h, tie)
    mtp = c.int("num_nextn_predict_layers", default=0)
    if mtp:
        warnings.append(f"config has {mtp} multi-token-prediction layer(s); transformers' {mt} "
                        f"model does not build them, so they are not counted (as in fine-tuning "
                        f"with transformers)")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh,
                num_kv_heads=c.int("num_key_value_heads", default=nh), head_dim=qk,
                intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                num_experts=E, experts_per_token=k, moe_intermediate_size=moe_inter,
                num_moe_layers=n_moe, q_lora_rank=q_lora, kv_lora_rank=kv_lora,
                qk_head_dim=qk, v_head_dim=vd, dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


def _qwen3_moe(c: _Cfg, b: _Builder) -> dict:
    """Qwen3-MoE (transformers ``Qwen3MoeForCausalLM``): Qwen2-MoE's layer schedule
    (``decoder_sparse_step``, ``mlp_only_layers``) without a shared expert, a ``head_dim`` key,
    no q/k/v bias (``attention_bias``) and RMSNorm q_norm/k_norm over ``head_dim``."""
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c)
    E = c.int("num_experts")
    k = c.int("num_experts_per_tok")
    moe_inter = c.int("moe_intermediate_size")
    step = c.int("decoder_sparse_step", default=1)
    mlp_only = set(c.get("mlp_only_layers", default=[]) or [])
    tie = c.bool("tie_word_embeddings", False)
    ab = c.bool("attention_bias", False)
    n_moe = sum(1 for i in range(L) if i not in mlp_only and E > 0 and (i + 1) % step == 0)
    b.attention(h, nh, nkv, hd, L, qkv_bias=ab, o_bias=ab)
    b.gated_mlp(h, inter, L - n_moe)
    b.lin("gate", h, E, layers=n_moe, kind="router")
    b.gated_mlp(h, moe_inter, n_moe, kind="expert", copies=E, active=k)
    b.norms_embed_head(h, L, 2 * h + 2 * hd, V, tie)
    sw = c.get("sliding_window", default=None) if c.bool("use_sliding_window", False) else None
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                num_experts=E, experts_per_token=k, moe_intermediate_size=moe_inter,
                num_moe_layers=n_moe, sliding_window=int(sw) if sw else None,
                dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


def _gpt_oss(c: _Cfg, b: _Builder) -> dict:
    """gpt-oss (transformers ``GptOssForCausalLM``): biased q/k/v/o, one learned attention-sink
    logit per head and layer, a biased router and ``num_local_experts`` biased SwiGLU experts
    (fused ``gate_up_proj``/``down_proj`` with bias vectors), RMSNorm; sliding-window attention
    on the layers ``layer_types`` marks ``sliding_attention``."""
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c)
    E = c.int("num_local_experts", "num_experts")
    k = c.int("num_experts_per_tok", "experts_per_token")
    tie = c.bool("tie_word_embeddings", False)
    ab = c.bool("attention_bias", True)
    b.attention(h, nh, nkv, hd, L, qkv_bias=ab, o_bias=ab)
    b.grp("attention_sinks", nh * L, "other")
    b.lin("router", h, E, bias=True, layers=L, kind="router")
    b.lin("gate_up_proj", h, 2 * inter, bias=True, layers=L, copies=E, active=k, kind="expert")
    b.lin("down_proj", inter, h, bias=True, layers=L, copies=E, active=k, kind="expert")
    b.norms_embed_head(h, L, 2 * h, V, tie)
    sw = c.get("sliding_window", default=None)
    types = c.get("layer_types", default=None)
    if isinstance(types, list) and types:
        n_sliding = sum(1 for t in types[:L] if t == "sliding_attention")
    else:  # transformers' default: even layers slide, odd layers attend fully
        n_sliding = (L + 1) // 2
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                num_experts=E, experts_per_token=k, moe_intermediate_size=inter,
                num_moe_layers=L, sliding_window=int(sw) if sw and n_sliding else None,
                sliding_window_layers=n_sliding if sw and n_sliding else None,
                dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


# --------------------------------------------------------------------------- newer decoders

def _olmo2(c: _Cfg, b: _Builder) -> dict:
    """OLMo 2 (transformers ``Olmo2ForCausalLM``, models/olmo2/modeling_olmo2.py in 5.x):
    Llama projections (``attention_bias``) and SwiGLU MLP, RMSNorm ``q_norm`` over all query
    heads (heads x head_dim) and ``k_norm`` over all key heads (kv_heads x head_dim), and the
    "reordered" norms: ``post_attention_layernorm`` and ``post_feedforward_layernorm`` on each
    block's output, no input norm; untied head by default (``Olmo2Config``)."""
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c)
    tie = c.bool("tie_word_embeddings", False)
    ab = c.bool("attention_bias", False)
    b.attention(h, nh, nkv, hd, L, qkv_bias=ab, o_bias=ab)
    b.gated_mlp(h, inter, L)
    b.norms_embed_head(h, L, 2 * h + (nh + nkv) * hd, V, tie)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


def _smollm3(c: _Cfg, b: _Builder) -> dict:
    """SmolLM3 (transformers ``SmolLM3ForCausalLM``): Llama's parameters exactly (q/k/v/o with
    ``attention_bias``, SwiGLU with ``mlp_bias``, two RMSNorms per block, tied embeddings by
    default). Its NoPE layers (``no_rope_layers``: 0 = no rotary embedding, every 4th layer by
    default) change no parameter. When ``use_sliding_window`` and ``sliding_window`` are set,
    the layers ``layer_types`` marks ``sliding_attention`` (by default the NoPE ones,
    ``SmolLM3Config.__post_init__``) attend within the window."""
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c)
    tie = c.bool("tie_word_embeddings", True)
    ab = c.bool("attention_bias", False)
    b.attention(h, nh, nkv, hd, L, qkv_bias=ab, o_bias=ab)
    b.gated_mlp(h, inter, L, bias=c.bool("mlp_bias", False))
    b.norms_embed_head(h, L, 2 * h, V, tie)
    sw = c.get("sliding_window", default=None) if c.bool("use_sliding_window", False) else None
    n_sliding = 0
    if sw:
        types = c.get("layer_types", default=None)
        if isinstance(types, list) and types:
            n_sliding = sum(1 for t in types[:L] if t == "sliding_attention")
        else:
            nope = _layer_flags(c, "no_rope_layers", "no_rope_layer_interval", L)
            n_sliding = sum(1 for f in nope if not f)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                sliding_window=int(sw) if sw and n_sliding else None,
                sliding_window_layers=n_sliding if sw and n_sliding else None,
                dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


def _layer_flags(c: _Cfg, key: str, interval_key: str, L: int) -> list[int]:
    """``no_rope_layers`` of SmolLM3/Llama 4 (1 = the layer applies RoPE): the config's list,
    else transformers' default, RoPE everywhere but every ``interval``-th layer
    (``int((i + 1) % interval != 0)``)."""
    flags = c.get(key, default=None)
    if isinstance(flags, list) and flags:
        if len(flags) < L:
            raise InputError(f"model.config.{key}", f"needs one entry per layer ({L})",
                             value=len(flags))
        return [1 if f else 0 for f in flags[:L]]
    interval = c.int(interval_key, default=4)
    if interval < 1:
        raise InputError(f"model.config.{interval_key}", "must be at least 1", value=interval)
    return [int((i + 1) % interval != 0) for i in range(L)]


def _llama4_text(c: _Cfg, b: _Builder) -> dict:
    """Llama 4's language model (transformers ``Llama4ForCausalLM`` over ``Llama4TextConfig``,
    models/llama4/modeling_llama4.py in 5.x). Layer ``i`` is MoE when it is in ``moe_layers``,
    by default ``range(interleave_moe_layer_step - 1, L, interleave_moe_layer_step)``: a
    ``router`` linear (hidden -> ``num_local_experts``, no bias), ``num_local_experts`` SwiGLU
    experts of width ``intermediate_size`` (fused ``gate_up_proj``/``down_proj`` parameters,
    top-``num_experts_per_tok`` routing, 1 in Scout and Maverick) and one shared expert
    (``shared_expert.gate_proj/up_proj/down_proj``) of the same width; the other layers are a
    dense SwiGLU of width ``intermediate_size_mlp``. q/k/v/o with ``head_dim`` (128 when the
    key is absent, ``Llama4TextConfig``); the qk norm is a parameter-free L2 norm. Layers that
    apply RoPE (``no_rope_layers`` entry 1; 3 of every 4 by default) attend within chunks of
    ``attention_chunk_size`` tokens: modelled as a sliding window of that size on those layers
    (the KV cache a chunked layer keeps is at most one chunk; a query attends to at most one
    chunk, on average half of one, so attention FLOPs are an upper bound beyond one chunk)."""
    h, L, nh, nkv, _, inter, V = _decoder_dims(c, head_dim_key=False)
    hd = c.int("head_dim", default=128)
    dense_inter = c.int("intermediate_size_mlp", default=16384)
    E = c.int("num_local_experts", default=16)
    k = c.int("num_experts_per_tok", default=1)
    tie = c.bool("tie_word_embeddings", False)
    ab = c.bool("attention_bias", False)
    moe_layers = c.get("moe_layers", default=None)
    if isinstance(moe_layers, list):
        moe = {int(i) for i in moe_layers if isinstance(i, int) and 0 <= i < L}
    else:
        step = c.int("interleave_moe_layer_step", default=1)
        if step < 1:
            raise InputError("model.config.interleave_moe_layer_step", "must be at least 1",
                             value=step)
        moe = set(range(step - 1, L, step))
    n_moe = len(moe) if E > 0 else 0
    b.attention(h, nh, nkv, hd, L, qkv_bias=ab, o_bias=ab)
    b.gated_mlp(h, dense_inter, L - n_moe)
    b.lin("router", h, E, layers=n_moe, kind="router")
    b.lin("gate_up_proj", h, 2 * inter, layers=n_moe, copies=E, active=k, kind="expert")
    b.lin("down_proj", inter, h, layers=n_moe, copies=E, active=k, kind="expert")
    b.gated_mlp(h, inter, n_moe, kind="shared_expert")
    b.norms_embed_head(h, L, 2 * h, V, tie)
    chunk = c.get("attention_chunk_size", default=8192)
    rope = _layer_flags(c, "no_rope_layers", "no_rope_layer_interval", L)
    types = c.get("layer_types", default=None)
    if isinstance(types, list) and types:
        n_chunked = sum(1 for t in types[:L] if t == "chunked_attention")
    else:
        n_chunked = sum(rope) if chunk else 0
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=dense_inter if n_moe < L else inter,
                vocab_size=V, tie_word_embeddings=tie, num_experts=E if n_moe else 0,
                experts_per_token=k if n_moe else 0, moe_intermediate_size=inter,
                num_moe_layers=n_moe,
                sliding_window=int(chunk) if chunk and n_chunked else None,
                sliding_window_layers=n_chunked if chunk and n_chunked else None,
                # Llama4TextMoe.forward: routed_in = hidden_states.repeat(num_experts, 1) *
                # router_scores (zero off the top-k), then one bmm per projection over ALL
                # experts (Llama4TextExperts.forward): every expert runs on every token
                # (transformers 5.24.0 models/llama4/modeling_llama4.py)
                expert_dispatch="dense" if n_moe else "routed",
                dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


# --------------------------------------------------------------------------- older decoders

def _falcon(c: _Cfg, b: _Builder, warnings: list[str]) -> dict:
    h = c.int("hidden_size", "n_embed")
    L = c.int("num_hidden_layers", "n_layer")
    nh = c.int("num_attention_heads", "n_head")
    hd = h // nh
    new_arch = c.bool("new_decoder_architecture", False)
    multi_query = c.bool("multi_query", True)
    parallel = c.bool("parallel_attn", True)
    bias = c.bool("bias", False)
    V = c.int("vocab_size")
    ffn = c.int("ffn_hidden_size", default=4 * h)
    tie = c.bool("tie_word_embeddings", True)
    if new_arch:
        nkv = c.int("num_kv_heads", "n_head_kv", default=nh)
        qkv_out = (2 * nkv + nh) * hd
    elif multi_query:
        nkv = 1
        qkv_out = h + 2 * hd
    else:
        nkv = nh
        qkv_out = 3 * h
    if c.bool("alibi", False):
        warnings.append("falcon with alibi: no rotary embedding; counts unaffected")
    b.lin("query_key_value", h, qkv_out, bias=bias, layers=L, kind="attention")
    b.lin("dense", h, h, bias=bias, layers=L, kind="attention")
    b.lin("dense_h_to_4h", h, ffn, bias=bias, layers=L, kind="mlp")
    b.lin("dense_4h_to_h", ffn, h, bias=bias, layers=L, kind="mlp")
    if not parallel:
        n_ln = 2
    else:
        n_ln_par = c.get("num_ln_in_parallel_attn", default=None)
        if n_ln_par is None and new_arch:
            n_ln_par = 2
        n_ln = 2 if n_ln_par == 2 else 1
    b.grp("layer_norms", n_ln * 2 * h * L, "norm")
    b.grp("ln_f", 2 * h, "norm")
    b.embed_and_head(V, h, tie, emb_name="word_embeddings")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=ffn, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False, dropout=_dropout(c, "attention_dropout", "hidden_dropout"))


def _nemotron(c: _Cfg, b: _Builder) -> dict:
    """Nemotron-3/-4 (transformers ``NemotronForCausalLM``; NeMo ``NemotronConfig``):
    q/k/v/o projections with grouped-query attention (``attention_bias``, default off), a
    non-gated squared-ReLU ``up_proj``/``down_proj`` MLP (``mlp_bias``, default off),
    LayerNorm1P with weight and bias (two per block and a final one), partial RoPE
    (``partial_rotary_factor`` 0.5: no parameters), untied output head by default."""
    h, L, nh, nkv, hd, inter, V = _decoder_dims(c)
    tie = c.bool("tie_word_embeddings", False)
    ab, mb = c.bool("attention_bias", False), c.bool("mlp_bias", False)
    b.attention(h, nh, nkv, hd, L, qkv_bias=ab, o_bias=ab)
    b.lin("up_proj", h, inter, bias=mb, layers=L, kind="mlp")
    b.lin("down_proj", inter, h, bias=mb, layers=L, kind="mlp")
    b.grp("layer_norms", 2 * 2 * h * L, "norm")
    b.grp("final_norm", 2 * h, "norm")
    b.embed_and_head(V, h, tie)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False, dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


def _gpt2(c: _Cfg, b: _Builder) -> dict:
    h = c.int("n_embd", "hidden_size")
    L = c.int("n_layer", "num_hidden_layers")
    nh = c.int("n_head", "num_attention_heads")
    inner = c.int("n_inner", default=4 * h)
    V = c.int("vocab_size")
    P = c.int("n_positions", "max_position_embeddings", default=1024)
    tie = c.bool("tie_word_embeddings", True)
    b.lin("c_attn", h, 3 * h, bias=True, layers=L, kind="attention")
    b.lin("c_proj", h, h, bias=True, layers=L, kind="attention")
    b.lin("c_fc", h, inner, bias=True, layers=L, kind="mlp")
    b.lin("c_proj", inner, h, bias=True, layers=L, kind="mlp")
    b.grp("layer_norms", 4 * h * L, "norm")
    b.grp("ln_f", 2 * h, "norm")
    b.grp("wpe", P * h, "position")
    b.embed_and_head(V, h, tie, emb_name="wte")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nh,
                head_dim=h // nh, intermediate_size=inner, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False, max_position_embeddings=P,
                dropout=_dropout(c, "resid_pdrop", "embd_pdrop", "attn_pdrop"))


def _qwen1(c: _Cfg, b: _Builder) -> dict:
    """Qwen (v1: Qwen-1.8B/7B/14B/72B, remote code ``QWenLMHeadModel``, model_type ``qwen``),
    module by module as its ``modeling_qwen.py`` builds them (Qwen/Qwen-7B on the Hub; the same
    file in Qwen-1_8B/14B/72B): ``QWenAttention`` projects q, k and v with ONE fused
    ``c_attn = nn.Linear(hidden, 3 * kv_channels * heads)`` (bias on) and back with ``c_proj``
    (bias ``not no_bias``); ``QWenMLP`` runs ``w1`` and ``w2`` (hidden -> intermediate_size // 2
    each) and ``c_proj`` back, ``a1 * F.silu(a2)`` (``w2`` is the gate); RMSNorm ``ln_1``/``ln_2``
    per block and ``ln_f``; ``wte`` and an untied ``lm_head``. LoRA ``target_modules`` match these
    names: QwenLM/Qwen finetune.py's default ``["c_attn", "c_proj", "w1", "w2"]``
    (QwenLM/Qwen @2df8e8ac450fa185c421a08b0090ef81826caa6e finetune.py line 59) adapts the fused
    q/k/v projection as one linear, and ``c_proj`` matches both the attention and the MLP
    output projections."""
    h = c.int("hidden_size")
    L = c.int("num_hidden_layers")
    nh = c.int("num_attention_heads")
    hd = c.int("kv_channels", default=h // nh)
    inter = c.int("intermediate_size") // 2
    V = c.int("vocab_size")
    bias = not c.bool("no_bias", True)
    tie = c.bool("tie_word_embeddings", False)
    b.lin("c_attn", h, 3 * nh * hd, bias=True, layers=L, kind="attention")
    b.lin("c_proj", nh * hd, h, bias=bias, layers=L, kind="attention")
    b.lin("w1", h, inter, bias=bias, layers=L, kind="mlp")
    b.lin("w2", h, inter, bias=bias, layers=L, kind="mlp")
    b.lin("c_proj", inter, h, bias=bias, layers=L, kind="mlp")
    b.grp("layer_norms", 2 * h * L, "norm")
    b.grp("ln_f", h, "norm")
    b.embed_and_head(V, h, tie, emb_name="wte")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nh,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=True, max_position_embeddings=c.int("seq_length", default=8192),
                dropout=_dropout(c, "attn_dropout_prob", "emb_dropout_prob"))


def _chatglm(c: _Cfg, b: _Builder) -> dict:
    """ChatGLM2/3 (remote code ``ChatGLMForConditionalGeneration``, model_type ``chatglm``),
    module by module as THUDM's ``modeling_chatglm.py`` builds them: ``SelfAttention`` projects
    q and the ``multi_query_group_num`` key/value groups with ONE fused ``query_key_value``
    (hidden -> (heads + 2 x groups) x kv_channels, bias ``add_bias_linear or add_qkv_bias``) and
    back with ``dense``; the ``MLP`` runs ``dense_h_to_4h`` (hidden -> 2 x ffn_hidden_size,
    ``swiglu``: ``silu(x[0]) * x[1]`` of its two halves) and ``dense_4h_to_h``; RMSNorm
    ``input_layernorm``/``post_attention_layernorm`` per block and ``final_layernorm`` (LayerNorm
    when ``rmsnorm`` is false); ``word_embeddings`` and an untied ``output_layer``. PEFT's
    default LoRA target is ``query_key_value`` (one adapter over the fused projection)."""
    h = c.int("hidden_size")
    L = c.int("num_layers", "num_hidden_layers")
    nh = c.int("num_attention_heads")
    hd = c.int("kv_channels", default=h // nh)
    groups = c.int("multi_query_group_num", default=nh) \
        if c.bool("multi_query_attention", False) else nh
    ffn = c.int("ffn_hidden_size")
    V = c.int("padded_vocab_size", "vocab_size")
    bias = c.bool("add_bias_linear", False)
    tie = c.bool("tie_word_embeddings", False)
    b.lin("query_key_value", h, (nh + 2 * groups) * hd,
          bias=bias or c.bool("add_qkv_bias", False), layers=L, kind="attention")
    b.lin("dense", nh * hd, h, bias=bias, layers=L, kind="attention")
    b.lin("dense_h_to_4h", h, 2 * ffn, bias=bias, layers=L, kind="mlp")
    b.lin("dense_4h_to_h", ffn, h, bias=bias, layers=L, kind="mlp")
    norm = h if c.bool("rmsnorm", True) else 2 * h
    b.grp("layer_norms", 2 * norm * L, "norm")
    b.grp("final_layernorm", norm, "norm")
    b.embed_and_head(V, h, tie, head_name="output_layer", emb_name="word_embeddings")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=groups,
                head_dim=hd, intermediate_size=ffn, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=True, max_position_embeddings=c.int("seq_length", default=8192),
                dropout=_dropout(c, "attention_dropout", "hidden_dropout"))


def _baichuan(c: _Cfg, b: _Builder) -> dict:
    """Baichuan / Baichuan2 (remote code ``BaichuanForCausalLM``, model_type ``baichuan``), as
    its ``modeling_baichuan.py`` builds them: a Llama decoder whose q, k and v are ONE fused
    ``W_pack`` (hidden -> 3 x hidden, no bias), ``o_proj``, ``gate_proj``/``up_proj``/
    ``down_proj``, RMSNorm, ``embed_tokens`` and an untied ``lm_head`` (Baichuan2's
    ``NormHead``: the same weight shape). The 7B uses RoPE, the 13B ALiBi (no parameters)."""
    h = c.int("hidden_size")
    L = c.int("num_hidden_layers")
    nh = c.int("num_attention_heads")
    inter = c.int("intermediate_size")
    V = c.int("vocab_size")
    tie = c.bool("tie_word_embeddings", False)
    b.lin("W_pack", h, 3 * h, layers=L, kind="attention")
    b.lin("o_proj", h, h, layers=L, kind="attention")
    b.gated_mlp(h, inter, L)
    b.norms_embed_head(h, L, 2 * h, V, tie)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nh,
                head_dim=h // nh, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=True,
                max_position_embeddings=c.int("model_max_length", "max_position_embeddings",
                                              default=4096),
                dropout=0.0)


def _bloom(c: _Cfg, b: _Builder) -> dict:
    h = c.int("hidden_size", "n_embed")
    L = c.int("n_layer", "num_hidden_layers")
    nh = c.int("n_head", "num_attention_heads")
    V = c.int("vocab_size")
    tie = c.bool("tie_word_embeddings", True)
    b.lin("query_key_value", h, 3 * h, bias=True, layers=L, kind="attention")
    b.lin("dense", h, h, bias=True, layers=L, kind="attention")
    b.lin("dense_h_to_4h", h, 4 * h, bias=True, layers=L, kind="mlp")
    b.lin("dense_4h_to_h", 4 * h, h, bias=True, layers=L, kind="mlp")
    b.grp("layer_norms", 4 * h * L, "norm")
    b.grp("word_embeddings_layernorm", 2 * h, "norm")
    b.grp("ln_f", 2 * h, "norm")
    b.embed_and_head(V, h, tie, emb_name="word_embeddings")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nh,
                head_dim=h // nh, intermediate_size=4 * h, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False, max_position_embeddings=int(c.get("seq_length", default=2048)),
                dropout=_dropout(c, "attention_dropout", "hidden_dropout"))


def _opt(c: _Cfg, b: _Builder) -> dict:
    h = c.int("hidden_size")
    L = c.int("num_hidden_layers")
    nh = c.int("num_attention_heads")
    ffn = c.int("ffn_dim")
    V = c.int("vocab_size")
    P = c.int("max_position_embeddings", default=2048)
    wp = c.int("word_embed_proj_dim", default=h)
    bias = c.bool("enable_bias", True)
    affine = c.bool("layer_norm_elementwise_affine", True)
    tie = c.bool("tie_word_embeddings", True)
    ln = 2 * h if affine else 0
    for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
        b.lin(n, h, h, bias=bias, layers=L, kind="attention")
    b.lin("fc1", h, ffn, bias=bias, layers=L, kind="mlp")
    b.lin("fc2", ffn, h, bias=bias, layers=L, kind="mlp")
    b.grp("layer_norms", 2 * ln * L, "norm")
    if c.bool("do_layer_norm_before", True) and not c.bool("_remove_final_layer_norm", False):
        b.grp("final_layer_norm", ln, "norm")
    b.grp("embed_positions", (P + 2) * h, "position")
    if wp != h:
        b.lin("project_out", h, wp, kind="other")
        b.lin("project_in", wp, h, kind="other")
    b.grp("embed_tokens", V * wp, "embedding")
    if not tie:
        b.lin("lm_head", wp, V, kind="head")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nh,
                head_dim=h // nh, intermediate_size=ffn, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False, max_position_embeddings=P,
                dropout=_dropout(c, "dropout", "attention_dropout"))


def _mpt(c: _Cfg, b: _Builder, warnings: list[str]) -> dict:
    h = c.int("d_model", "hidden_size")
    L = c.int("n_layers", "num_hidden_layers")
    nh = c.int("n_heads", "num_attention_heads")
    V = c.int("vocab_size")
    tie = c.bool("tie_word_embeddings", True)
    ratio = c.get("expansion_ratio", default=4)
    if ratio != 4:
        warnings.append(f"mpt expansion_ratio={ratio}: transformers' MPT hard-codes a 4x MLP; "
                        f"counted as 4x like transformers")
    attn = c.get("attn_config", default={}) or {}
    if isinstance(attn, dict) and attn.get("alibi") is False:
        warnings.append("mpt without alibi: transformers' MPT has no learned position table; "
                        "none counted")
    b.lin("Wqkv", h, 3 * h, layers=L, kind="attention")
    b.lin("out_proj", h, h, layers=L, kind="attention")
    b.lin("up_proj", h, 4 * h, layers=L, kind="mlp")
    b.lin("down_proj", 4 * h, h, layers=L, kind="mlp")
    b.grp("layer_norms", 2 * h * L, "norm")  # LayerNorm weight only (bias removed)
    b.grp("norm_f", h, "norm")
    b.embed_and_head(V, h, tie, emb_name="wte")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nh,
                head_dim=h // nh, intermediate_size=4 * h, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False, max_position_embeddings=c.int("max_seq_len", default=2048),
                dropout=max(_dropout(c, "resid_pdrop", "emb_pdrop"),
                            _dropout(_Cfg(attn if isinstance(attn, dict) else {}), "attn_pdrop")))


def _gpt_bigcode(c: _Cfg, b: _Builder) -> dict:
    """GPTBigCode (SantaCoder, StarCoder): GPT-2 blocks with multi-query attention (one shared
    key/value head when ``multi_query``, the default), a GELU MLP of ``n_inner`` and a learned
    position table; ``c_attn`` projects to q plus the shared k and v."""
    h = c.int("n_embd", "hidden_size")
    L = c.int("n_layer", "num_hidden_layers")
    nh = c.int("n_head", "num_attention_heads")
    inner = c.int("n_inner", default=4 * h)
    V = c.int("vocab_size")
    P = c.int("n_positions", "max_position_embeddings", default=1024)
    tie = c.bool("tie_word_embeddings", True)
    hd = h // nh
    nkv = 1 if c.bool("multi_query", True) else nh
    b.lin("c_attn", h, h + 2 * nkv * hd, bias=True, layers=L, kind="attention")
    b.lin("c_proj", h, h, bias=True, layers=L, kind="attention")
    b.lin("c_fc", h, inner, bias=True, layers=L, kind="mlp")
    b.lin("c_proj", inner, h, bias=True, layers=L, kind="mlp")
    b.grp("layer_norms", 4 * h * L, "norm")
    b.grp("ln_f", 2 * h, "norm")
    b.grp("wpe", P * h, "position")
    b.embed_and_head(V, h, tie, emb_name="wte")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inner, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False, max_position_embeddings=P,
                dropout=_dropout(c, "resid_pdrop", "embd_pdrop", "attn_pdrop"))


def _phi(c: _Cfg, b: _Builder) -> dict:
    """Phi-1/1.5/2 (transformers ``PhiForCausalLM``): one LayerNorm per block feeding attention
    and the MLP in parallel, biased q/k/v/``dense`` projections, a GELU ``fc1``/``fc2`` MLP,
    optional per-head-dim q/k LayerNorms (``qk_layernorm``) and a biased ``lm_head``."""
    h, L, nh, nkv, _, inter, V = _decoder_dims(c, head_dim_key=False)
    hd = h // nh
    tie = c.bool("tie_word_embeddings", False)
    b.lin("q_proj", h, nh * hd, bias=True, layers=L, kind="attention")
    b.lin("k_proj", h, nkv * hd, bias=True, layers=L, kind="attention")
    b.lin("v_proj", h, nkv * hd, bias=True, layers=L, kind="attention")
    b.lin("dense", nh * hd, h, bias=True, layers=L, kind="attention")
    b.lin("fc1", h, inter, bias=True, layers=L, kind="mlp")
    b.lin("fc2", inter, h, bias=True, layers=L, kind="mlp")
    qk_norm = 2 * 2 * hd if c.bool("qk_layernorm", False) else 0
    b.grp("layer_norms", (2 * h + qk_norm) * L, "norm")
    b.grp("final_layernorm", 2 * h, "norm")
    b.grp("embed_tokens", V * h, "embedding")
    if not tie:
        b.lin("lm_head", h, V, bias=True, kind="head")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False,
                dropout=_dropout(c, "resid_pdrop", "embd_pdrop", "attention_dropout"))


def _gpt_neox(c: _Cfg, b: _Builder) -> dict:
    """GPT-NeoX (Pythia, StableLM-Alpha, GPT-NeoX-20B): fused biased ``query_key_value``
    (``attention_bias``), ``dense``, a GELU ``dense_h_to_4h``/``dense_4h_to_h`` MLP, two
    LayerNorms per block whether or not the residual is parallel, an untied output head
    (``embed_out`` in the checkpoints, ``lm_head`` in transformers 5)."""
    h, L, nh, _, _, inter, V = _decoder_dims(c, head_dim_key=False)
    tie = c.bool("tie_word_embeddings", False)
    ab = c.bool("attention_bias", True)
    b.lin("query_key_value", h, 3 * h, bias=ab, layers=L, kind="attention")
    b.lin("dense", h, h, bias=ab, layers=L, kind="attention")
    b.lin("dense_h_to_4h", h, inter, bias=True, layers=L, kind="mlp")
    b.lin("dense_4h_to_h", inter, h, bias=True, layers=L, kind="mlp")
    b.grp("layer_norms", 4 * h * L, "norm")
    b.grp("final_layer_norm", 2 * h, "norm")
    b.embed_and_head(V, h, tie, emb_name="embed_in")
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nh,
                head_dim=h // nh, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                gated_mlp=False,
                dropout=_dropout(c, "attention_dropout", "hidden_dropout"))


def _stablelm(c: _Cfg, b: _Builder) -> dict:
    """StableLM (transformers ``StableLmForCausalLM``: StableLM-3B-4E1T, StableLM-2): Llama
    projections and SwiGLU MLP with optional q/k/v bias (``use_qkv_bias``), LayerNorms with bias,
    a single norm per block when ``use_parallel_residual``, and per-head q/k LayerNorms without
    bias when ``qk_layernorm``."""
    h, L, nh, nkv, _, inter, V = _decoder_dims(c, head_dim_key=False)
    hd = h // nh
    tie = c.bool("tie_word_embeddings", False)
    b.attention(h, nh, nkv, hd, L, qkv_bias=c.bool("use_qkv_bias", False))
    b.gated_mlp(h, inter, L)
    n_ln = 1 if c.bool("use_parallel_residual", False) else 2
    qk_norm = (nh + nkv) * hd if c.bool("qk_layernorm", False) else 0
    b.grp("layer_norms", (n_ln * 2 * h + qk_norm) * L, "norm")
    b.grp("final_norm", 2 * h, "norm")
    b.embed_and_head(V, h, tie)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                dropout=_dropout(c, "attention_dropout", "hidden_dropout"))


# --------------------------------------------------------------------------- fallback

def _generic(mt: str, c: _Cfg, b: _Builder, warnings: list[str]) -> dict:
    h = c.int("hidden_size", "n_embd", "d_model", "n_embed")
    L = c.int("num_hidden_layers", "n_layer", "n_layers", "num_layers")
    nh = c.int("num_attention_heads", "n_head", "n_heads", "num_heads")
    nkv = c.int("num_key_value_heads", "num_kv_heads", "n_head_kv", default=nh)
    hd = c.int("head_dim", default=h // nh)
    inter = c.int("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", default=4 * h)
    V = c.int("vocab_size", "padded_vocab_size")
    tie = c.bool("tie_word_embeddings", False)
    warnings.append(f"unknown architecture {mt!r}: parameter counts approximated as a "
                    f"Llama-style decoder (gated MLP, RMSNorm, no biases)")
    b.lin("q_proj", h, nh * hd, layers=L, kind="attention")
    b.lin("k_proj", h, nkv * hd, layers=L, kind="attention")
    b.lin("v_proj", h, nkv * hd, layers=L, kind="attention")
    b.lin("o_proj", nh * hd, h, layers=L, kind="attention")
    b.gated_mlp(h, inter, L)
    b.grp("layer_norms", 2 * h * L, "norm")
    b.grp("final_norm", h, "norm")
    b.embed_and_head(V, h, tie)
    return dict(hidden_size=h, num_layers=L, num_attention_heads=nh, num_kv_heads=nkv,
                head_dim=hd, intermediate_size=inter, vocab_size=V, tie_word_embeddings=tie,
                dropout=_dropout(c, *_LLAMA_DROPOUT_KEYS))


# --------------------------------------------------------------------------- entry point

#: model_type -> (builder(mt, cfg, builder, warnings) -> shape fields, context length used when
#: the config names none: the default of the transformers config class of that type).
_BUILDERS = {
    **{mt: (lambda mt, c, b, w: _llama_like(mt, c, b), 2048)
       for mt in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3",
                  "granite")},
    "mixtral": (lambda mt, c, b, w: _mixtral(c, b), 4096 * 32),
    "qwen2_moe": (lambda mt, c, b, w: _qwen2_moe(c, b), 32768),
    "granitemoe": (lambda mt, c, b, w: _granitemoe(c, b), 4096),
    "deepseek_v2": (_deepseek, 4096),
    "deepseek_v3": (_deepseek, 4096),
    "falcon": (lambda mt, c, b, w: _falcon(c, b, w), 2048),
    "gpt2": (lambda mt, c, b, w: _gpt2(c, b), 1024),
    "qwen": (lambda mt, c, b, w: _qwen1(c, b), 8192),
    "chatglm": (lambda mt, c, b, w: _chatglm(c, b), 8192),
    "baichuan": (lambda mt, c, b, w: _baichuan(c, b), 4096),
    "nemotron": (lambda mt, c, b, w: _nemotron(c, b), 4096),
    "bloom": (lambda mt, c, b, w: _bloom(c, b), 2048),
    "opt": (lambda mt, c, b, w: _opt(c, b), 2048),
    "mpt": (lambda mt, c, b, w: _mpt(c, b, w), 2048),
    "qwen3_moe": (lambda mt, c, b, w: _qwen3_moe(c, b), 32768),
    "gpt_oss": (lambda mt, c, b, w: _gpt_oss(c, b), 131072),
    "gpt_bigcode": (lambda mt, c, b, w: _gpt_bigcode(c, b), 1024),
    "phi": (lambda mt, c, b, w: _phi(c, b), 2048),
    "gpt_neox": (lambda mt, c, b, w: _gpt_neox(c, b), 2048),
    "stablelm": (lambda mt, c, b, w: _stablelm(c, b), 4096),
    "olmo2": (lambda mt, c, b, w: _olmo2(c, b), 2048),
    "smollm3": (lambda mt, c, b, w: _smollm3(c, b), 32768),
    "llama4_text": (lambda mt, c, b, w: _llama4_text(c, b), 4096 * 32),
    "t5": (lambda mt, c, b, w: t5_inventory(c, b), 512),
    "mt5": (lambda mt, c, b, w: t5_inventory(c, b), 1024),
    "bart": (lambda mt, c, b, w: bart_inventory(c, b), 1024),
    "mllama_text_model": (lambda mt, c, b, w: mllama_text_inventory(c, b), 131072),
}

#: text model_type of a vision-language config when its text_config names none
_VLM_TEXT_TYPE = {"qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2", "gemma3": "gemma3_text",
                  "mllama": "mllama_text_model", "paligemma": "gemma2", "llava": "llama",
                  "llava_next": "llama", "internvl": "qwen2"}


def _vlm_text_config(mt: str, config: dict) -> dict:
    """The language model's config of a vision-language config: its ``text_config`` (Qwen2-VL
    keeps the text keys at the top level)."""
    tc = config.get("text_config")
    if isinstance(tc, dict) and (tc.get("hidden_size") or not config.get("hidden_size")):
        inner = dict(tc)
    elif config.get("hidden_size"):
        inner = {k: v for k, v in config.items() if k not in ("vision_config", "text_config")}
    else:
        raise InputError("model.config.text_config",
                         f"vision-language config of type {mt!r} needs a text_config")
    text_type = str(inner.get("model_type") or "")
    if not text_type or text_type == mt or text_type.endswith("_text") and mt.startswith("qwen"):
        text_type = _VLM_TEXT_TYPE[mt]
    if mt == "gemma3":
        text_type = "gemma3_text"
    inner["model_type"] = text_type
    if config.get("tie_word_embeddings") is not None:  # transformers 5 ties by the outer key
        inner["tie_word_embeddings"] = config["tie_word_embeddings"]
    return inner


def spec_from_hf_config(config: dict, *, name: str, source: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` dict.

    Raises :class:`~fmest.errors.InputError` (``field="model.config.<key>"``) when a key the
    architecture needs is missing. Unknown ``model_type`` values are approximated as a
    Llama-style decoder and say so in ``warnings``.
    """
    if not isinstance(config, dict):
        raise InputError("model.config", "must be a JSON object (a config.json dict)",
                         value=type(config).__name__)
    if isinstance(config, dict) and WEIGHTS_ONLY_KEY in config:
        return spec_from_param_count(config[WEIGHTS_ONLY_KEY], name=name, source=source)
    # dimensions that are not whole numbers >= 1 would divide by zero below (fmest.bounds)
    check_hf_config(config, field="model.config")
    if isinstance(config.get("vision_config"), dict):
        check_hf_config(config["vision_config"], field="model.config.vision_config")
    warnings: list[str] = []
    raw = config
    mt = str(config.get("model_type") or "").lower()
    vision_of = None
    if mt in VISION_TYPES:
        config, vision_of = _vlm_text_config(mt, config), mt
        mt = str(config.get("model_type") or "").lower()
    elif mt in ("gemma3n", "mistral3", "llama4") or (isinstance(config.get("text_config"), dict)
                                                     and not config.get("hidden_size")):
        tc = config.get("text_config")
        if not isinstance(tc, dict):
            raise InputError("model.config.text_config",
                             f"multimodal config of type {mt!r} needs a text_config")
        inner = dict(tc)
        inner.setdefault("model_type", tc.get("model_type", ""))
        warnings.append(f"multimodal config {mt!r}: only the language model (text_config, "
                        f"model_type {inner['model_type']!r}) is counted; the vision tower and "
                        f"projector are not")
        config = inner
        mt = str(inner.get("model_type") or "").lower()
    if mt == "refinedweb" or mt == "refinedwebmodel":
        mt = "falcon"

    c = _Cfg(config)
    b = _Builder()
    builder, max_pos_default = _BUILDERS.get(mt, (None, 2048))
    if builder is None:
        shape = _generic(mt or "<no model_type>", c, b, warnings)
    else:
        shape = builder(mt, c, b, warnings)
    n_text_linears, n_text_groups = len(b.linears), len(b.groups)
    if vision_of is not None:
        try:
            shape["vision"] = vision_inventory(vision_of, raw, shape["hidden_size"], b, _Cfg)
        except InputError as e:
            del b.linears[n_text_linears:], b.groups[n_text_groups:]
            warnings.append(f"multimodal config {vision_of!r}: vision_config is incomplete "
                            f"({e}); only the language model (text_config) is counted")
    if "max_position_embeddings" not in shape:
        shape["max_position_embeddings"] = c.int(
            "max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
            default=max_pos_default)
    return ModelSpec(name=name, model_type=mt or "unknown", source=source,
                     linears=tuple(b.linears), groups=tuple(b.groups), hf_config=dict(raw),
                     warnings=tuple(warnings), **shape)


def model_types() -> tuple[str, ...]:
    """The ``model_type`` values converted exactly (others fall back to a Llama-style guess)."""
    return SUPPORTED_MODEL_TYPES


#: ``--hidden-size`` ... flags -> Llama-style config keys (the LLMGPUMemEstimator's raw inputs)
DIMENSION_KEYS = {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
                  "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads",
                  "intermediate_size": "intermediate_size", "vocab_size": "vocab_size"}


def config_from_dimensions(**dims) -> dict:
    """A Llama-style ``config.json`` dict from raw dimensions (``hidden_size``, ``num_layers``,
    ``num_heads``, optional ``num_kv_heads`` (default: ``num_heads``), ``intermediate_size``
    (default: the Llama rule 8/3 x hidden rounded up to 256), ``vocab_size`` (default 32000,
    Llama 2's)). Raises :class:`InputError` naming the missing flag."""
    for need in ("hidden_size", "num_layers", "num_heads"):
        if dims.get(need) is None:
            raise InputError(need, "raw model dimensions need --hidden-size, --num-layers and "
                                   "--num-heads (and optionally --num-kv-heads, "
                                   "--intermediate-size, --vocab-size)")
    hidden = dims["hidden_size"]
    if dims.get("intermediate_size") is None:
        # LLaMA (Touvron et al. 2023, section 2.2): 2/3 x 4h, rounded up to a multiple of 256
        dims["intermediate_size"] = -(-int(8 * hidden / 3) // 256) * 256
    dims.setdefault("vocab_size", None)
    if dims["vocab_size"] is None:
        dims["vocab_size"] = 32000
    if dims.get("num_kv_heads") is None:
        dims["num_kv_heads"] = dims["num_heads"]
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "_fmest_source": "raw dimensions"}
    for flag, key in DIMENSION_KEYS.items():
        config[key] = dims[flag]
    return config


#: ``model_config`` key of a weights-only model (``--params N``)
WEIGHTS_ONLY_KEY = "_fmest_params"


def spec_from_param_count(params, *, name: str = "params", source: str = "--params") -> ModelSpec:
    """A weights-only model of ``params`` parameters (``--params N``, as the LLMGPUMemEstimator
    accepts): one parameter group and unit dimensions, so weights, gradients and optimizer
    states are exact while activations, the KV cache and FLOPs (which need the shape) come out
    as nothing; the warning says so."""
    try:
        count = int(float(params))
    except (TypeError, ValueError):
        raise InputError("--params", "must be a parameter count such as 7e9", value=params) \
            from None
    if count < 1:
        raise InputError("--params", "must be at least 1", value=params)
    return ModelSpec(name=name, model_type="weights_only", source=source, hidden_size=1,
                     num_layers=1, num_attention_heads=1, num_kv_heads=1, head_dim=1,
                     intermediate_size=1, vocab_size=1, max_position_embeddings=1 << 24,
                     groups=(ParamGroup(name="parameters", params=count, kind="other"),),
                     hf_config={WEIGHTS_ONLY_KEY: count},
                     warnings=(f"weights-only model ({count:,} parameters from --params): "
                               f"weights, gradients and optimizer states are counted; "
                               f"activations, the KV cache (and the largest batch/context) "
                               f"and compute time need the model's dimensions (--hidden-size "
                               f"... or a config); decode time counts weight streaming only",))
