"""The model's shape as the estimators see it: an inventory of parameters.

A :class:`ModelSpec` lists every linear (matmul) module of the network with its shape and how
many copies exist (per layer, experts), plus every non-matmul parameter group (embeddings,
norms, position tables, routers' biases ...). Parameter counts, LoRA adapter sizes (by target
module name), QLoRA quantized bytes and matmul FLOPs all derive from this one inventory, so
they cannot disagree. Build specs with :func:`fmest.models.hf.spec_from_hf_config`.
"""

from __future__ import annotations

import functools
from typing import Optional

import attrs
from attrs import field, frozen

LINEAR_KINDS = ("attention", "cross_attention", "mlp", "expert", "shared_expert", "router", "head",
                "vision", "other")


@frozen(kw_only=True)
class LinearModule:
    """One kind of linear layer.

    ``name`` is the module's attribute name in transformers (``q_proj``, ``query_key_value``,
    ``c_attn``, ``w1`` ...), which is what LoRA ``target_modules`` match. There are
    ``layers x copies`` instances of it (``copies`` = experts for MoE expert weights);
    ``active_copies`` is how many of the copies one token passes through (top-k for experts).
    ``kind`` groups it for breakdowns and for ``all-linear`` targeting (``head`` is excluded
    from LoRA's ``all-linear`` as in peft).
    """

    name: str
    in_features: int
    out_features: int
    bias: bool = False
    layers: int = 1
    copies: int = 1
    active_copies: float = 1.0
    kind: str = "other"

    @property
    def weight_params(self) -> int:
        return self.in_features * self.out_features * self.layers * self.copies

    @property
    def bias_params(self) -> int:
        return (self.out_features if self.bias else 0) * self.layers * self.copies

    @property
    def params(self) -> int:
        return self.weight_params + self.bias_params

    @property
    def active_params(self) -> float:
        """Parameters one token multiplies with (MoE: top-k experts only)."""
        return (self.in_features * self.out_features + (self.out_features if self.bias else 0)) \
            * self.layers * self.active_copies


@frozen(kw_only=True)
class ParamGroup:
    """Parameters that are not matmul weights: embeddings, norms, position tables, etc.
    ``kind`` is one of ``embedding``, ``position``, ``norm``, ``other``."""

    name: str
    params: int
    kind: str = "other"


@frozen(kw_only=True)
class VisionSpec:
    """The image side of a vision-language model: the vision tower and the projector.

    Their parameters are part of the model's inventory (``ModelSpec.linears`` with kind
    ``vision``, groups with kind ``vision``); this record keeps the shape the vision
    activation and FLOP formulas need. ``patches_per_image`` is what one tile costs the tower
    (including a class token), ``tokens_per_image`` what one image adds to the language model's
    sequence at the default image size (after pooling/merging, all tiles), ``max_tiles`` the
    tiles one image is cut into at most (1 when the model has no tiling).
    """

    model_type: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    intermediate_size: int
    patch_size: int
    image_size: int
    patches_per_image: int
    tokens_per_image: int
    max_tiles: int = 1
    merge_factor: int = 1          # patches folded into one LM token (Qwen2-VL 2x2 = 4)
    tower_params: int = 0
    projector_params: int = 0
    source: str = ""


@frozen(kw_only=True)
class ParamCounts:
    """Exact parameter counts per component. ``active`` counts what one token uses (MoE);
    ``vision`` is the vision tower plus projector of a vision-language model (also in
    ``total``)."""

    embedding: int
    attention: int
    mlp: int
    experts: int
    norms: int
    head: int
    other: int
    total: int
    active: int
    vision: int = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("embedding", "attention", "mlp", "experts", "norms",
                                              "head", "other", "vision", "total", "active")}



#: Model types whose transformers code normalises with ``torch.nn.LayerNorm`` (one
#: ``native_layer_norm`` kernel that saves its input and fp32 mean and rstd per row and applies
#: the weight inside: no pre-scale copy), by how the input reaches it: ``native`` in the
#: activations' dtype, fp32 when torch.autocast casts it (``layer_norm`` is on autocast's fp32
#: list, aten/src/ATen/autocast_mode.cpp); ``low``: MPT's ``LPLayerNorm`` runs ``F.layer_norm``
#: on the downcast input with autocast off (mosaicml llm-foundry ``layers/norm.py``).
#: transformers 5.24.0 modeling files: gpt2 (``GPT2Block.ln_1 = nn.LayerNorm``), gpt_neox,
#: falcon, phi, bloom, opt, gpt_bigcode, gptj, gpt_neo, starcoder2, stablelm, codegen, bart.
#: RMSNorm models (llama, mistral, qwen2, gemma, phi3 ...) upcast explicitly. Read by the memory
#: and time plugins (saved norm inputs; norm kernel bytes).
LAYER_NORM_MODEL_TYPES = {
    **{t: "native" for t in ("gpt2", "gpt_neox", "falcon", "RefinedWeb", "RefinedWebModel",
                             "phi", "bloom", "opt", "gpt_bigcode", "gptj", "gpt_neo",
                             "starcoder2", "stablelm", "codegen", "bart")},
    "mpt": "low"}
#: Model types whose transformers eager attention runs softmax in the scores' own dtype
#: (``nn.functional.softmax(attn_weights, dim=-1)`` with no ``dtype=torch.float32``; Falcon's
#: ``dtype=hidden_states.dtype``): transformers 5.24.0 ``models/gpt2/modeling_gpt2.py``
#: ``eager_attention_forward`` line 64, ``t5/modeling_t5.py`` line 168, ``mt5/modeling_mt5.py``
#: line 75, ``bart/modeling_bart.py`` line 133, ``falcon/modeling_falcon.py`` lines 352/396.
#: Every other eager attention of the presets upcasts (llama, mistral, qwen2, gemma, phi3,
#: gpt_neox, opt, bloom, olmo, starcoder2, stablelm: ``softmax(..., dtype=torch.float32)``;
#: gptj, codegen: the scores' matmul itself in fp32; gpt_bigcode:
#: ``attention_softmax_in_fp32``). Under torch.autocast softmax runs in fp32 whatever the
#: code says (softmax is on autocast's fp32 list, aten/src/ATen/autocast_mode.cpp), so the
#: difference shows only without autocast (precision ``pure``) or in fp32 training.
EAGER_SOFTMAX_INPUT_DTYPE_MODEL_TYPES = frozenset({"gpt2", "t5", "mt5", "bart", "falcon",
                                                   "RefinedWeb", "RefinedWebModel"})

@frozen(kw_only=True, cache_hash=True)
class ModelSpec:
    """A transformer's shape and parameter inventory.

    Shape fields are those the activation and FLOP formulas need; ``linears`` and ``groups``
    are the inventory the counts come from. ``source`` says where the config came from (preset
    file and its upstream URL, local path, or Hub id). ``hf_config`` keeps the raw config dict
    so a torch-based plugin can rebuild the real model.
    """

    name: str
    model_type: str
    source: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_moe_layers: int = 0
    # multi-head latent attention (DeepSeek-V2/V3); 0 when not used
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: Optional[int] = None
    # layers that attend within ``sliding_window`` only (Gemma 2/3, Mistral); None = all of them
    # when ``sliding_window`` is set
    sliding_window_layers: Optional[int] = None
    # encoder-decoder (T5, BART): ``num_layers`` counts both stacks
    is_encoder_decoder: bool = False
    num_encoder_layers: int = 0
    relative_attention_num_buckets: int = 0
    vision: Optional[VisionSpec] = None
    dropout: float = 0.0
    eager_only: bool = False
    #: how the model's transformers code runs its experts: ``routed`` (each token through its
    #: top-k experts) or ``dense`` (every expert on every token, the routing weights zeroing the
    #: others: transformers' Llama 4 ``Llama4TextMoe``); a stack that runs its own MoE code
    #: routes whatever this says (fmest.models.spec.with_dense_experts, fmest.engine)
    expert_dispatch: str = "routed"
    linears: tuple[LinearModule, ...] = field(factory=tuple)
    groups: tuple[ParamGroup, ...] = field(factory=tuple)
    hf_config: dict = field(factory=dict, eq=False, repr=False)
    warnings: tuple[str, ...] = field(factory=tuple)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def layer_norm(self) -> str:
        """How the model's transformers code normalises when it is ``torch.nn.LayerNorm``
        (:data:`LAYER_NORM_MODEL_TYPES`: ``native`` or ``low``); ``""``: RMSNorm, which
        upcasts explicitly (``hidden_states.to(torch.float32)``)."""
        return LAYER_NORM_MODEL_TYPES.get(self.model_type, "")

    @property
    def eager_softmax_upcast(self) -> bool:
        """Whether the model's transformers eager attention computes softmax in fp32 on its
        own (an explicit ``dtype=torch.float32``): False for
        :data:`EAGER_SOFTMAX_INPUT_DTYPE_MODEL_TYPES`, whose softmax keeps the scores'
        dtype unless torch.autocast promotes it."""
        return self.model_type not in EAGER_SOFTMAX_INPUT_DTYPE_MODEL_TYPES

    @property
    def num_decoder_layers(self) -> int:
        """Layers that run once per generated token (all of them for a decoder-only model)."""
        return self.num_layers - self.num_encoder_layers

    def param_counts(self) -> ParamCounts:
        """Exact counts by component (:class:`ParamCounts`), computed once per spec: the spec
        is frozen and hashes once (``cache_hash``), and the counts read only its ``linears``
        and ``groups`` (both in its equality), so equal specs share them."""
        return _param_counts(self)

    def linear_names(self) -> list[str]:
        return sorted({lin.name for lin in self.linears})

    def lora_targets(self, targets: tuple[str, ...]) -> list[LinearModule]:
        """The linear modules LoRA adapts for peft-style ``target_modules``.

        ``all-linear`` (or ``all_linear``) selects every linear except the output head, as peft
        does; otherwise a module matches when its name equals a target or ends with
        ``.target``.
        """
        return list(_lora_targets(self, tuple(targets)))


@functools.lru_cache(maxsize=512)
def _param_counts(model: "ModelSpec") -> ParamCounts:
    """:meth:`ModelSpec.param_counts`, cached (a frozen ParamCounts is shared read-only)."""
    emb = sum(g.params for g in model.groups if g.kind in ("embedding", "position"))
    vision = sum(g.params for g in model.groups if g.kind == "vision")
    norms = sum(g.params for g in model.groups if g.kind == "norm")
    other_groups = sum(g.params for g in model.groups if g.kind == "other")
    by_kind: dict[str, int] = {}
    active = 0.0
    for lin in model.linears:
        by_kind[lin.kind] = by_kind.get(lin.kind, 0) + lin.params
        active += lin.active_params
    experts = by_kind.get("expert", 0)
    vision += by_kind.get("vision", 0)
    total = emb + norms + other_groups + vision + sum(
        v for k, v in by_kind.items() if k != "vision")
    return ParamCounts(
        embedding=emb,
        attention=by_kind.get("attention", 0) + by_kind.get("cross_attention", 0),
        mlp=by_kind.get("mlp", 0) + by_kind.get("shared_expert", 0) + by_kind.get("router", 0),
        experts=experts,
        norms=norms,
        head=by_kind.get("head", 0),
        other=other_groups + by_kind.get("other", 0),
        total=total,
        active=int(round(active + emb + norms + other_groups
                         + sum(g.params for g in model.groups if g.kind == "vision"))),
        vision=vision,
    )


@functools.lru_cache(maxsize=512)
def _lora_targets(model: "ModelSpec", targets: tuple[str, ...]) -> tuple["LinearModule", ...]:
    """:meth:`ModelSpec.lora_targets`, cached: the spec is frozen and hashable, and every memory
    and time estimate of a LoRA job asks it several times."""
    tset = set(targets)
    if tset & {"all-linear", "all_linear", "linear"}:
        return tuple(lin for lin in model.linears if lin.kind != "head" and lin.kind != "router")
    return tuple(lin for lin in model.linears
                 if lin.name in tset or any(lin.name.endswith("." + t) for t in tset))


def sliding_layers(model: ModelSpec) -> int:
    """Layers that attend only within ``sliding_window`` tokens: ``sliding_window_layers`` when
    the builder set it (Llama 4's chunked layers, SmolLM3), 5 of 6 for Gemma 3
    (``sliding_window_pattern``), every other one for Gemma 2, else all layers (Mistral-style
    configs). Shared by the KV-cache and the attention-FLOP formulas."""
    if not model.sliding_window:
        return 0
    if model.sliding_window_layers is not None:
        return model.sliding_window_layers
    pattern = (model.hf_config or {}).get("sliding_window_pattern")
    if model.model_type == "gemma2":
        return model.num_layers // 2
    if pattern:
        return model.num_layers - model.num_layers // int(pattern)
    return model.num_layers


def with_dense_experts(model: ModelSpec) -> ModelSpec:
    """``model`` with every expert linear passed by every token (``active_copies = copies``):
    what transformers' code computes for a model whose ``expert_dispatch`` is ``dense``."""
    if model.expert_dispatch != "dense" or model.experts_per_token == model.num_experts:
        return model     # routed, or every expert already counted per token
    linears = tuple(attrs.evolve(lin, active_copies=float(lin.copies)) if lin.kind == "expert"
                    else lin for lin in model.linears)
    return attrs.evolve(model, linears=linears, experts_per_token=model.num_experts)
