"""What the plugin derives from a model's parameter inventory, once per model.

:class:`ModelNumbers` (every model) and :class:`LoraNumbers` (one LoRA configuration of a
model) hold the sums, shapes and names the phases of an estimate read; none depends on the
job's batch, sequence or parallelism, so each is computed once and cached.

The caches are keyed on the spec's identity: the engine resolves each model once and hands the
same :class:`~fmest.models.spec.ModelSpec` to every estimate (and to every candidate of the
micro-batch search), and hashing a frozen spec walks all of its linear modules (2-4 us for a
7B-70B model, measured; more than the rest of the lookup). An equal spec built anew is a miss
and is computed again, which costs time, never a different number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from attrs import frozen

from fmest.job import Training
from fmest.physics.counting import (
    ADAPTER_PROMPT_LENGTH,
    adapter_layers,
    adapter_trainable_params,
    lora_modules,
)
from fmest_memory_theory import formulas as F
from fmest_memory_theory.memo import by_identity

if TYPE_CHECKING:
    from fmest.models.spec import LinearModule, ModelSpec

#: the separate query, key and value projections (transformers names; measured.py maps
#: Lit-GPT's ``query``/``key``/``value`` to these)
QKV_NAMES = frozenset({"q_proj", "k_proj", "v_proj"})
#: Module names of attention output and MLP down projections across the supported families
#: (their input is the attention output / the MLP product, not the normalized hidden state).
ATTN_OUT_NAMES = frozenset({"o_proj", "out_proj", "dense", "c_proj", "wo", "output_proj",
                            "attn_out", "self_attention.dense"})
MLP_OUT_NAMES = frozenset({"down_proj", "w2", "c_proj", "fc2", "dense_4h_to_h",
                           "output_linear", "down", "mlp.c_proj"})

#: (rows, cols, count) of a family of equally shaped matrices
MatrixShape = tuple[int, int, int]


@frozen
class ModelNumbers:
    """Per-model sums over the inventory (all layers unless said otherwise, unsharded)."""

    layer_dense_params: float      # all layers, non-expert linears + per-layer norms
    layer_expert_params: float     # all layers, expert linears
    embedding_params: float
    head_params: float
    final_norm_params: float
    largest_layer_params: float    # one layer (dense + experts), unsharded
    largest_tensor_params: float
    matrix_shapes: tuple[MatrixShape, ...]  # every matrix, for Adafactor
    vector_params: float
    q_dim: int
    k_dim: int
    v_dim: int
    o_dim: int
    moe_layers: int
    dense_layers: int
    total_params: int              # ``ModelSpec.param_counts().total``
    #: Adafactor's factored second-moment elements of the whole model
    #: (formulas.factored_state_elements over ``matrix_shapes`` and ``vector_params``)
    factored_state_elements: float
    #: the linears QLoRA quantizes (all but the output head), their weights, their LLM.int8
    #: bytes (formulas.int8_weight_bytes) and the largest one's elements (dequantized one at a
    #: time in forward and backward)
    quantizable: tuple[LinearModule, ...]
    quantizable_weight_params: int
    quantizable_int8_bytes: float
    largest_quantizable_params: int
    #: the MLP activation function's name from the raw config (None: unknown)
    mlp_activation: Optional[str]
    #: the shared experts' intermediate width (0 without shared experts)
    shared_expert_intermediate: float


@frozen
class LoraNumbers:
    """One LoRA configuration (target modules, rank) of a model."""

    adapter_params: float          # all layers
    shapes: tuple[MatrixShape, ...]  # every A and B
    in_attn: bool                  # adapters on q/k/v-like modules
    on_attn_out: bool
    on_mlp_in: bool
    on_mlp_out: bool
    input_elements_per_token: float  # sum of in_features of adapted modules, one layer
    sharded_input_elements_per_token: float  # inputs that are TP-sharded (o/down)
    rank_elements_per_token: float   # r per adapted module, one layer
    #: Adafactor's factored second-moment elements of the adapters
    factored_state_elements: float
    #: adapted q/k/v projections of one layer (input projections of attention: a fused qkv
    #: LoRA runs them as one module on one input) and the sum of their output widths
    qkv_adapted: int = 0
    qkv_adapted_in: float = 0.0
    qkv_adapted_out: float = 0.0
    #: whether every one of q, k and v is adapted (a fused qkv LoRA then needs no zero pad)
    qkv_all: bool = False


# ---------------------------------------------------------------------------------------------
# cached per model (memo.by_identity: see the module doc)
# ---------------------------------------------------------------------------------------------

_MODEL_NUMBERS: dict[tuple, tuple[object, ModelNumbers]] = {}
_LORA_NUMBERS: dict[tuple, tuple[object, LoraNumbers]] = {}
_ADAPTER_NUMBERS: dict[tuple, tuple[object, LoraNumbers]] = {}


def model_numbers(model: ModelSpec) -> ModelNumbers:
    """:func:`compute_model_numbers`, cached per model."""
    return by_identity(_MODEL_NUMBERS, model, (), lambda: compute_model_numbers(model))


def lora_numbers(model: ModelSpec, targets: tuple[str, ...], rank: int) -> LoraNumbers:
    """:func:`compute_lora_numbers`, cached per model, targets and rank."""
    return by_identity(_LORA_NUMBERS, model, (targets, rank),
                       lambda: compute_lora_numbers(model, targets, rank))


def adapter_numbers(model: ModelSpec, technique: str) -> LoraNumbers:
    """:func:`compute_adapter_numbers`, cached per model and technique."""
    return by_identity(_ADAPTER_NUMBERS, model, (technique,),
                       lambda: compute_adapter_numbers(model, technique))


# ---------------------------------------------------------------------------------------------
# the numbers
# ---------------------------------------------------------------------------------------------

def attention_dims(model: ModelSpec) -> tuple[int, int, int, int]:
    """(q, k, v, o) projection widths; MLA models (``qk_head_dim``) expand k/v to every head."""
    head_dim = model.head_dim
    if model.qk_head_dim:
        qk = model.num_attention_heads * model.qk_head_dim
        vo = model.num_attention_heads * (model.v_head_dim or head_dim)
        return qk, qk, vo, vo
    q_dim = model.num_attention_heads * head_dim
    kv_dim = model.num_kv_heads * head_dim
    return q_dim, kv_dim, kv_dim, q_dim


def mlp_activation(model: ModelSpec) -> Optional[str]:
    """The MLP activation's name from the raw HF config (GPT-2 ``activation_function``,
    most others ``hidden_act``); None when unknown."""
    cfg = getattr(model, "hf_config", None) or {}
    act = cfg.get("activation_function") or cfg.get("hidden_act") or cfg.get("dense_act_fn")
    proj = cfg.get("feed_forward_proj")
    if act is None and isinstance(proj, str):  # T5: "gated-gelu" runs gelu_new (T5Config)
        act = "gelu_new" if proj == "gated-gelu" else proj.split("-")[-1]
    return act if isinstance(act, str) else None


def shared_expert_intermediate(model: ModelSpec) -> float:
    """The shared experts' intermediate width: the out features of their up/gate projections
    (halved for a gated MLP, whose gate and up are both counted)."""
    shared = sum(lin.out_features for lin in model.linears
                 if lin.kind == "shared_expert" and lin.name not in MLP_OUT_NAMES)
    return shared / (2 if model.gated_mlp else 1)


def compute_model_numbers(model: ModelSpec) -> ModelNumbers:
    """Sums over ``model.linears`` and ``model.groups`` that every estimate of it reads."""
    num_layers = model.num_layers
    dense = expert = head = 0.0
    shapes = []
    largest = 0.0
    for lin in model.linears:
        largest = max(largest, lin.in_features * lin.out_features)
        shapes.append((lin.out_features, lin.in_features, lin.layers * lin.copies))
        if lin.kind == "head":
            head += lin.params
        elif lin.kind == "expert":
            expert += lin.params
        else:
            dense += lin.params
    groups = model.groups
    emb = sum(grp.params for grp in groups if grp.kind in ("embedding", "position"))
    norms = sum(grp.params for grp in groups if grp.kind == "norm")
    other = sum(grp.params for grp in groups if grp.kind == "other")
    final_norm = sum(grp.params for grp in groups if grp.kind == "norm" and "final" in grp.name)
    vectors = norms + other + sum(lin.bias_params for lin in model.linears)
    for grp in groups:
        if grp.kind == "embedding":
            largest = max(largest, grp.params)
            shapes.append((model.vocab_size, max(1, grp.params // max(1, model.vocab_size)), 1))
        elif grp.kind == "position":
            vectors += grp.params
    layer_dense = dense + (norms - final_norm) + other
    q_dim, k_dim, v_dim, o_dim = attention_dims(model)
    moe_layers = (model.num_moe_layers or num_layers) if model.is_moe else 0
    quantizable = tuple(lin for lin in model.linears if lin.kind not in ("head",))
    return ModelNumbers(
        layer_dense_params=layer_dense, layer_expert_params=expert, embedding_params=emb,
        head_params=head, final_norm_params=final_norm,
        largest_layer_params=(layer_dense + expert) / num_layers, largest_tensor_params=largest,
        matrix_shapes=tuple(shapes), vector_params=vectors, q_dim=q_dim, k_dim=k_dim,
        v_dim=v_dim, o_dim=o_dim, moe_layers=moe_layers, dense_layers=num_layers - moe_layers,
        total_params=model.param_counts().total,
        factored_state_elements=F.factored_state_elements(shapes, vectors),
        quantizable=quantizable,
        quantizable_weight_params=sum(lin.weight_params for lin in quantizable),
        quantizable_int8_bytes=sum(F.int8_weight_bytes(lin.in_features, lin.out_features)
                                   * lin.layers * lin.copies for lin in quantizable),
        largest_quantizable_params=max((lin.in_features * lin.out_features
                                        for lin in quantizable), default=0),
        mlp_activation=mlp_activation(model),
        shared_expert_intermediate=shared_expert_intermediate(model))


def compute_lora_numbers(model: ModelSpec, targets: tuple[str, ...], rank: int) -> LoraNumbers:
    """The adapters peft puts on ``targets`` at ``rank`` (fmest.physics.counting.lora_modules)."""
    mods = lora_modules(model, Training(technique="lora", lora_target_modules=targets,
                                        lora_rank=rank))
    params = 0.0
    shapes: list[MatrixShape] = []
    in_attn = on_attn_out = on_mlp_in = on_mlp_out = False
    in_el = sharded_el = rank_el = qkv_in = qkv_out = 0.0
    qkv_names: set[str] = set()
    for mod in mods:
        count = mod.layers * mod.copies
        params += F.lora_adapter_params(rank, mod.in_features, mod.out_features) * count
        shapes += [(rank, mod.in_features, count), (mod.out_features, rank, count)]
        per_layer = mod.layers / model.num_layers * (mod.active_copies if mod.kind == "expert"
                                                     else 1.0)
        is_out = mod.name in ATTN_OUT_NAMES or mod.name in MLP_OUT_NAMES
        if mod.kind == "attention":
            if mod.name in ATTN_OUT_NAMES:
                on_attn_out = True
            else:
                in_attn = True
                if mod.name in QKV_NAMES:
                    qkv_names.add(mod.name)
                    qkv_in += mod.in_features * per_layer
                    qkv_out += mod.out_features * per_layer
        elif mod.name in MLP_OUT_NAMES:
            on_mlp_out = True
        else:
            on_mlp_in = True
        in_el += mod.in_features * per_layer
        if is_out:
            sharded_el += mod.in_features * per_layer
        rank_el += rank * per_layer
    return LoraNumbers(adapter_params=params, shapes=tuple(shapes), in_attn=in_attn,
                       on_attn_out=on_attn_out, on_mlp_in=on_mlp_in, on_mlp_out=on_mlp_out,
                       input_elements_per_token=in_el,
                       sharded_input_elements_per_token=sharded_el,
                       rank_elements_per_token=rank_el,
                       factored_state_elements=F.factored_state_elements(shapes, 0.0),
                       qkv_adapted=len(qkv_names), qkv_adapted_in=qkv_in,
                       qkv_adapted_out=qkv_out,
                       qkv_all=len(qkv_names) == len(QKV_NAMES))


def compute_adapter_numbers(model: ModelSpec, technique: str) -> LoraNumbers:
    """LLaMA-Adapter / Adapter-v2 as the LoRA-shaped record the phases read: the trainable
    parameters (fmest.physics.counting.adapter_trainable_params) and no adapted linear (no
    LoRA input copies: the base is frozen, as under LoRA). Adafactor: each layer's
    ``adapter_wte`` (prompt length x hidden) is a matrix, the rest vectors."""
    trainable = float(adapter_trainable_params(model, Training(technique=technique)))
    shapes: list[MatrixShape] = [(ADAPTER_PROMPT_LENGTH, model.hidden_size,
                                  adapter_layers(model))]
    matrix = ADAPTER_PROMPT_LENGTH * model.hidden_size * adapter_layers(model)
    return LoraNumbers(adapter_params=trainable, shapes=tuple(shapes), in_attn=False,
                       on_attn_out=False, on_mlp_in=False, on_mlp_out=False,
                       input_elements_per_token=0.0, sharded_input_elements_per_token=0.0,
                       rank_elements_per_token=0.0,
                       factored_state_elements=F.factored_state_elements(
                           shapes, trainable - matrix))
