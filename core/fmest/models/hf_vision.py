"""Vision-language ``config.json`` -> the vision tower and projector part of the inventory.

Mirrors the vision modules transformers 5 instantiates for ``AutoModelForImageTextToText``
(checked on the meta device by tests/test_vlm.py): CLIP (LLaVA-1.5, LLaVA-NeXT), SigLIP
(PaliGemma 2, Gemma 3), the Qwen2-VL and Qwen2.5-VL vision transformers with their patch
merger, the Mllama (Llama-3.2-Vision) tiled tower and InternViT (InternVL ``-hf`` checkpoints).

Every tower linear is listed with kind ``vision`` (so peft-style ``target_modules`` that name
``q_proj`` also match the tower's ``q_proj``, as peft does) and every other tower tensor as a
group of kind ``vision``. The returned :class:`~fmest.models.spec.VisionSpec` keeps the shape the
vision activation formulas need and the default number of image tokens:

- LLaVA-1.5: (336/14)^2 = 576 tokens (CLS dropped by ``vision_feature_select_strategy=default``);
  Liu et al. 2023, arXiv:2310.03744.
- LLaVA-NeXT: "AnyRes" base image + a grid of tiles from ``image_grid_pinpoints`` (2x2 at
  672x672: 5 x 576 tokens + one newline per row); https://llava-vl.github.io/blog/2024-01-30-llava-next/.
- Qwen2-VL / Qwen2.5-VL: dynamic resolution, one token per 2x2 merged 14-px patches
  (arXiv:2409.12191 section 2.1).
- Llama-3.2-Vision: up to 4 tiles of 560 px, (560/14)^2 + 1 tokens each, attended by the
  text model's cross-attention layers (not put into its sequence).
- PaliGemma 2: (image/14)^2 tokens (256 at 224 px, 1024 at 448 px); arXiv:2412.03555.
- Gemma 3: 256 tokens per 896-px image (``mm_tokens_per_image``); Gemma 3 technical report.
- InternVL: 448-px tiles, pixel shuffle 0.5 -> 256 tokens per tile; arXiv:2404.16821.
"""

from __future__ import annotations

from fmest.errors import InputError
from fmest.models.spec import VisionSpec

VISION_TYPES = ("llava", "llava_next", "qwen2_vl", "qwen2_5_vl", "mllama", "paligemma", "gemma3",
                "internvl")


def _side(value) -> int:
    return int(value[0] if isinstance(value, (list, tuple)) else value)


def _vit_mlp(b, d_model: int, inter: int, layers: int, *, gated: bool) -> None:
    """A vision block's MLP: biased gate/up/down (SwiGLU towers) or biased fc1/fc2."""
    if gated:
        for name in ("gate_proj", "up_proj"):
            b.lin(name, d_model, inter, bias=True, layers=layers, kind="vision")
        b.lin("down_proj", inter, d_model, bias=True, layers=layers, kind="vision")
    else:
        b.lin("fc1", d_model, inter, bias=True, layers=layers, kind="vision")
        b.lin("fc2", inter, d_model, bias=True, layers=layers, kind="vision")


def _vit_layers(b, d_model: int, inter: int, layers: int, *, qkv_bias: bool,
                out_name: str, norm_params_per_layer: int, extra_per_layer: int = 0,
                gated: bool = False) -> None:
    """Standard pre-norm ViT blocks: q/k/v/out projections, a 2-layer (or gated) MLP."""
    for name in ("q_proj", "k_proj", "v_proj"):
        b.lin(name, d_model, d_model, bias=qkv_bias, layers=layers, kind="vision")
    b.lin(out_name, d_model, d_model, bias=True, layers=layers, kind="vision")
    _vit_mlp(b, d_model, inter, layers, gated=gated)
    b.grp("vision_layer_norms", (norm_params_per_layer + extra_per_layer) * layers, "vision")


def _clip(vc, b) -> dict:
    d_model, patch = vc.int("hidden_size"), vc.int("patch_size")
    grid = _side(vc.get("image_size")) // patch
    channels = vc.int("num_channels", default=3)
    b.grp("vision_embeddings", d_model + channels * patch * patch * d_model
          + (grid * grid + 1) * d_model, "vision")
    b.grp("vision_pre_post_layernorm", 4 * d_model, "vision")
    _vit_layers(b, d_model, vc.int("intermediate_size"), vc.int("num_hidden_layers"),
                qkv_bias=True, out_name="out_proj", norm_params_per_layer=4 * d_model)
    return dict(patches_per_image=grid * grid + 1, grid=grid)


def _siglip(vc, b, *, use_head_default: bool) -> dict:
    d_model, patch = vc.int("hidden_size"), vc.int("patch_size")
    inter = vc.int("intermediate_size")
    grid = _side(vc.get("image_size")) // patch
    channels = vc.int("num_channels", default=3)
    b.grp("vision_embeddings", channels * patch * patch * d_model + d_model
          + grid * grid * d_model, "vision")
    b.grp("vision_post_layernorm", 2 * d_model, "vision")
    _vit_layers(b, d_model, inter, vc.int("num_hidden_layers"), qkv_bias=True,
                out_name="out_proj", norm_params_per_layer=4 * d_model)
    if vc.bool("vision_use_head", use_head_default):
        # multi-head attention pooling head (probe, in/out projections, layernorm, MLP)
        b.grp("vision_head", d_model + 3 * d_model * d_model + 3 * d_model + d_model * d_model
              + d_model + 2 * d_model + 2 * d_model * inter + inter + d_model, "vision")
    return dict(patches_per_image=grid * grid, grid=grid)


def _qwen2_vl(vc, b, *, v25: bool, text_hidden: int) -> dict:
    if v25:
        d_model = vc.int("hidden_size")
        out_dim = vc.int("out_hidden_size", default=text_hidden)
        inter = vc.int("intermediate_size")
        norm_per_layer, merger_norm = 2 * d_model, d_model  # RMSNorm (weight only)
    else:
        d_model = vc.int("embed_dim")
        out_dim = vc.int("hidden_size", default=text_hidden)
        inter = int(d_model * vc.get("mlp_ratio", default=4))
        norm_per_layer, merger_norm = 4 * d_model, 2 * d_model  # LayerNorm
    layers = vc.int("depth")
    patch = vc.int("patch_size", default=14)
    temporal = vc.int("temporal_patch_size", default=2)
    merge = vc.int("spatial_merge_size", default=2)
    channels = vc.int("in_channels", "in_chans", default=3)
    b.grp("vision_patch_embed", channels * temporal * patch * patch * d_model, "vision")
    b.lin("qkv", d_model, 3 * d_model, bias=True, layers=layers, kind="vision")
    b.lin("proj", d_model, d_model, bias=True, layers=layers, kind="vision")
    _vit_mlp(b, d_model, inter, layers, gated=v25)
    b.grp("vision_layer_norms", norm_per_layer * layers, "vision")
    merged = d_model * merge * merge
    b.grp("vision_merger_norm", merger_norm, "vision")
    b.lin("merger.mlp.0", merged, merged, bias=True, kind="vision")
    b.lin("merger.mlp.2", merged, out_dim, bias=True, kind="vision")
    return dict(d_model=d_model, layers=layers, inter=inter, patch=patch, merge=merge,
                heads=vc.int("num_heads"))


def _mllama(vc, b) -> dict:
    d_model, patch = vc.int("hidden_size"), vc.int("patch_size")
    grid = _side(vc.get("image_size")) // patch
    patches = grid * grid + 1
    tiles = vc.int("max_num_tiles", default=4)
    ratios = len(vc.get("supported_aspect_ratios", default=[0] * 8)) + 1
    channels = vc.int("num_channels", default=3)
    inter = vc.int("intermediate_size")
    b.grp("vision_embeddings", d_model + channels * patch * patch * d_model
          + 1 + patches * d_model + ratios * tiles * patches * d_model
          + 2 * (1 + ratios * tiles * d_model), "vision")
    b.grp("vision_pre_post_layernorm", 4 * d_model, "vision")
    local_layers = vc.int("num_hidden_layers")
    global_layers = vc.int("num_global_layers", default=8)
    for layers, extra in ((local_layers, 0), (global_layers, 2)):  # global layers: 2 gates
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            b.lin(name, d_model, d_model, layers=layers, kind="vision")
        b.lin("fc1", d_model, inter, bias=True, layers=layers, kind="vision")
        b.lin("fc2", inter, d_model, bias=True, layers=layers, kind="vision")
        b.grp("vision_layer_norms", (4 * d_model + extra) * layers, "vision")
    return dict(patches_per_image=patches, grid=grid, tiles=tiles,
                layers=local_layers + global_layers)


def _internvl(vc, b) -> dict:
    d_model = vc.int("hidden_size")
    patch = _side(vc.get("patch_size"))
    grid = _side(vc.get("image_size")) // patch
    channels = vc.int("num_channels", default=3)
    inter = vc.int("intermediate_size")
    layers = vc.int("num_hidden_layers")
    b.grp("vision_embeddings", d_model + (grid * grid + 1) * d_model
          + channels * patch * patch * d_model + d_model, "vision")
    rms = str(vc.get("norm_type", default="layer_norm")) == "rms_norm"
    norm_per_layer = (2 if rms else 4) * d_model
    qk_norm = (2 if rms else 4) * d_model if vc.bool("use_qk_norm", False) else 0
    # layer scale lambda_1/lambda_2 (2 x d) per layer
    _vit_layers(b, d_model, inter, layers, qkv_bias=vc.bool("attention_bias", False),
                out_name="projection_layer", norm_params_per_layer=norm_per_layer,
                extra_per_layer=2 * d_model + qk_norm)
    if not vc.bool("use_mean_pooling", True):
        b.grp("vision_layernorm", (1 if rms else 2) * d_model, "vision")
    return dict(patches_per_image=grid * grid + 1, grid=grid)


def _projector(mt: str, config: dict, c, vc, b, text_hidden: int) -> None:
    """The projector from the tower's width to the language model's (Qwen's merger is part of
    the tower)."""
    d_vision = vc.int("hidden_size")
    if mt in ("llava", "llava_next"):
        layers = config.get("vision_feature_layer", -2)
        width = d_vision * (len(layers) if isinstance(layers, list) else 1)
        bias = c.bool("multimodal_projector_bias", True)
        b.lin("linear_1", width, text_hidden, bias=bias, kind="vision")
        b.lin("linear_2", text_hidden, text_hidden, bias=bias, kind="vision")
        if mt == "llava_next":
            b.grp("image_newline", text_hidden, "vision")
    elif mt == "paligemma":
        b.lin("multi_modal_projector.linear", d_vision,
              vc.int("projection_dim", default=text_hidden), bias=True, kind="vision")
    elif mt == "gemma3":
        b.grp("mm_input_projection_weight", d_vision * text_hidden, "vision")
        b.grp("mm_soft_emb_norm", d_vision, "vision")
    elif mt == "mllama":
        b.lin("multi_modal_projector", vc.int("vision_output_dim"), text_hidden, bias=True,
              kind="vision")
    elif mt == "internvl":
        ratio = float(c.get("downsample_ratio", default=0.5))
        width = int(d_vision * round(1 / ratio) ** 2)
        b.grp("projector_layer_norm", 2 * width, "vision")
        b.lin("linear_1", width, text_hidden, bias=True, kind="vision")
        b.lin("linear_2", text_hidden, text_hidden, bias=True, kind="vision")


def vision_inventory(mt: str, config: dict, text_hidden: int, b, cfg_cls) -> VisionSpec:
    """Add the tower and projector of a ``mt`` (outer ``model_type``) config to builder ``b``
    and describe them. ``cfg_cls`` is :class:`fmest.models.hf._Cfg`."""
    raw_vc = config.get("vision_config")
    if not isinstance(raw_vc, dict):
        raise InputError("model.config.vision_config",
                         f"vision-language config of type {mt!r} needs a vision_config")
    c, vc = cfg_cls(config), cfg_cls(raw_vc)
    before = len(b.linears), len(b.groups)
    merge, tiles, heads = 1, 1, vc.int("num_attention_heads", "num_heads", "attention_heads")
    if mt in ("qwen2_vl", "qwen2_5_vl"):
        q = _qwen2_vl(vc, b, v25=(mt == "qwen2_5_vl"), text_hidden=text_hidden)
        d_model, layers, inter, patch, merge = (q["d_model"], q["layers"], q["inter"],
                                                q["patch"], q["merge"])
        image = 448  # no fixed size (dynamic resolution): the estimate's default image
        patches = (image // patch) ** 2
        tokens = patches // (merge * merge)
    else:
        d_model, inter = vc.int("hidden_size"), vc.int("intermediate_size")
        patch = _side(vc.get("patch_size"))
        image = _side(vc.get("image_size"))
        layers = vc.int("num_hidden_layers")
        if mt == "mllama":
            t = _mllama(vc, b)
            layers, tiles = t["layers"], t["tiles"]
            tokens = t["patches_per_image"] * tiles
        elif mt in ("paligemma", "gemma3"):
            t = _siglip(vc, b, use_head_default=(mt != "paligemma"))
            tokens = (c.int("mm_tokens_per_image", default=256) if mt == "gemma3"
                      else t["patches_per_image"])
        elif mt == "internvl":
            t = _internvl(vc, b)
            ratio = float(c.get("downsample_ratio", default=0.5))
            tokens = int(t["grid"] ** 2 * ratio * ratio)
        else:
            t = _clip(vc, b)
            tokens = t["grid"] ** 2
            if mt == "llava_next":
                tiles = 5  # base image + 2x2 AnyRes grid at the largest default pinpoint
                tokens = tiles * t["grid"] ** 2 + 2 * t["grid"]
        patches = t["patches_per_image"]
        _projector(mt, config, c, vc, b, text_hidden)
    if mt in ("qwen2_vl", "qwen2_5_vl"):
        projector = sum(lin.params for lin in b.linears[before[0]:] if "merger" in lin.name) \
            + sum(g.params for g in b.groups[before[1]:] if "merger" in g.name)
    else:
        projector = sum(lin.params for lin in b.linears[before[0]:]
                        if lin.name.startswith(("linear", "multi_modal"))) \
            + sum(g.params for g in b.groups[before[1]:]
                  if g.name.startswith(("mm_", "image_newline", "projector")))
    total = sum(lin.params for lin in b.linears[before[0]:]) \
        + sum(g.params for g in b.groups[before[1]:])
    return VisionSpec(model_type=str(raw_vc.get("model_type") or mt), hidden_size=d_model,
                      num_layers=layers, num_attention_heads=heads, intermediate_size=inter,
                      patch_size=patch, image_size=image, patches_per_image=patches,
                      tokens_per_image=tokens, max_tiles=tiles, merge_factor=merge * merge,
                      tower_params=total - projector, projector_params=projector)


def mllama_text_inventory(c, b) -> dict:
    """Llama-3.2-Vision's text model: a Llama decoder whose ``cross_attention_layers`` are
    replaced by gated cross-attention layers (q/k norms, two tanh gates), embedding of
    ``vocab_size + 8`` rows (transformers' MllamaTextModel)."""
    d_model = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", default=heads)
    head_dim = d_model // heads
    inter = c.int("intermediate_size")
    vocab = c.int("vocab_size")
    cross = len(c.get("cross_attention_layers", default=[]) or [])
    self_layers = layers - cross
    for kind, count in (("attention", self_layers), ("cross_attention", cross)):
        b.lin("q_proj", d_model, heads * head_dim, layers=count, kind=kind)
        b.lin("k_proj", d_model, kv_heads * head_dim, layers=count, kind=kind)
        b.lin("v_proj", d_model, kv_heads * head_dim, layers=count, kind=kind)
        b.lin("o_proj", heads * head_dim, d_model, layers=count, kind=kind)
    b.gated_mlp(d_model, inter, layers)
    b.grp("layer_norms", 2 * d_model * layers + cross * (2 * head_dim + 2), "norm")
    b.grp("final_norm", d_model, "norm")
    b.grp("embed_tokens", (vocab + 8) * d_model, "embedding")
    if not c.bool("tie_word_embeddings", False):
        b.lin("lm_head", d_model, vocab, kind="head")
    return dict(hidden_size=d_model, num_layers=layers, num_attention_heads=heads,
                num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=inter,
                vocab_size=vocab, tie_word_embeddings=False, gated_mlp=True,
                max_position_embeddings=c.int("max_position_embeddings", default=131072))
