"""Vision-language models: image tokens, and the vision tower's memory and FLOPs.

The tower (a ViT: CLIP, SigLIP, Qwen2-VL's, Mllama's, InternViT) runs once per image tile over
its patches; the projector maps its output into the language model's width; the resulting
image tokens join the text sequence (Llama-3.2-Vision instead cross-attends to them). Shapes
come from :class:`fmest.models.spec.VisionSpec` (sources in ``fmest.models.hf_vision``).

Saved activations of a trained ViT layer follow Korthikanti et al. 2022 (arXiv:2205.05198,
eq. 1) with memory-efficient attention (no s^2 term): ``34 x patches x hidden`` bytes per layer
and sequence in 16-bit training. A frozen tower (``--train-vision-tower`` off, the usual LLaVA
and Qwen2-VL fine-tuning recipe) runs without autograd: nothing is saved, only one layer's
working set is alive (about ``(4 x hidden + intermediate) x patches`` elements) plus its output.
"""

from __future__ import annotations

import math
from typing import Optional

from attrs import frozen

#: Korthikanti et al. 2022 eq. 1 without the 5as/h attention-score term (flash/SDPA): bytes per
#: token per hidden unit a 16-bit transformer layer saves for backward.
SAVED_BYTES_PER_TOKEN_HIDDEN = 34.0
#: LLaVA-NeXT's largest default AnyRes grid is 2x2 tiles of 336 px (image_grid_pinpoints up to
#: 672x672) plus the base image; InternVL uses up to 12 tiles of 448 px plus a thumbnail
#: (``max_dynamic_patch`` 12); Llama-3.2-Vision up to 4 tiles of 560 px (``max_num_tiles``).
MAX_GRID_TILES = {"llava_next": 4, "internvl": 12, "mllama": 4}


@frozen(kw_only=True)
class ImageTokens:
    """One image at a given size: tiles the tower runs, patches per tile, and tokens the
    language model sees (``cross_attention``: Llama-3.2-Vision attends to them instead)."""

    tiles: int
    patches_per_tile: int
    lm_tokens: int
    cross_attention: bool = False


def image_tokens(vision, image_size: Optional[int] = None) -> ImageTokens:
    """Tiles, patches and language-model tokens of one square image of ``image_size`` pixels
    (``None``: the model's default image, see ``VisionSpec``).

    Fixed-resolution towers (LLaVA-1.5's CLIP, PaliGemma's and Gemma 3's SigLIP) resize every
    image to their ``image_size``; tiling models cut it into ``ceil(size/tile)^2`` tiles (capped)
    plus a base/thumbnail image; Qwen2-VL keeps the native resolution, one token per 28 x 28
    pixels (14-px patches merged 2 x 2).
    """
    kind = vision.model_type
    if image_size is None:
        tiles = vision.max_tiles
        if kind.startswith("qwen"):
            patches = vision.patches_per_image
            return ImageTokens(tiles=1, patches_per_tile=patches, lm_tokens=vision.tokens_per_image)
        return ImageTokens(tiles=tiles, patches_per_tile=vision.patches_per_image,
                           lm_tokens=vision.tokens_per_image,
                           cross_attention=kind.startswith("mllama"))
    if kind.startswith("qwen"):
        side = math.ceil(image_size / (vision.patch_size * 2)) * 2  # patches, merged 2 x 2
        patches = side * side
        return ImageTokens(tiles=1, patches_per_tile=patches,
                           lm_tokens=patches // vision.merge_factor)
    per_tile_tokens = vision.tokens_per_image // max(1, vision.max_tiles)
    grid = math.ceil(image_size / vision.image_size) ** 2
    if kind.startswith("mllama"):
        tiles = min(MAX_GRID_TILES["mllama"], grid)
        return ImageTokens(tiles=tiles, patches_per_tile=vision.patches_per_image,
                           lm_tokens=tiles * vision.patches_per_image, cross_attention=True)
    if vision.max_tiles > 1:  # LLaVA-NeXT: grid tiles + the base image
        tiles = min(MAX_GRID_TILES["llava_next"], grid) + 1
        return ImageTokens(tiles=tiles, patches_per_tile=vision.patches_per_image,
                           lm_tokens=tiles * per_tile_tokens)
    if kind.startswith("internvl"):
        tiles = min(MAX_GRID_TILES["internvl"], grid)
        tiles += 1 if tiles > 1 else 0  # a thumbnail when the image was split
        return ImageTokens(tiles=tiles, patches_per_tile=vision.patches_per_image,
                           lm_tokens=tiles * vision.tokens_per_image)
    return ImageTokens(tiles=1, patches_per_tile=vision.patches_per_image,
                       lm_tokens=vision.tokens_per_image)


def vision_activation_bytes(vision, tokens: ImageTokens, *, images: int, act_bytes: float,
                            trained: bool, checkpointing: bool = False) -> float:
    """Activation bytes of the tower for ``images`` images on one GPU (micro-batch x images per
    sample). Trained: every layer saves ``34 x patches x hidden`` bytes (scaled to the compute
    dtype), or only its input under full checkpointing; frozen: one layer's working set plus the
    tower output. The projector's output (the image tokens in the LM width) is counted by the
    language model as part of its sequence."""
    patches = images * tokens.tiles * tokens.patches_per_tile
    hidden = vision.hidden_size
    if trained:
        if checkpointing:  # each layer keeps its input only
            per_layer = patches * hidden * act_bytes
        else:  # Korthikanti's 34 bytes are for 2-byte activations
            per_layer = SAVED_BYTES_PER_TOKEN_HIDDEN * patches * hidden * act_bytes / 2
        return per_layer * vision.num_layers
    working = (4 * hidden + vision.intermediate_size) * patches * act_bytes
    return working + hidden * patches * act_bytes


def vision_forward_flops(vision, tokens: ImageTokens, *, images: int) -> float:
    """Forward FLOPs of the tower and projector for ``images`` images: 2 x parameters per patch
    (Kaplan et al. 2020) plus bidirectional attention (4 x patches x hidden per patch and layer,
    Narayanan et al. 2021 eq. 2 without the causal half)."""
    patches_per_tile = tokens.patches_per_tile
    patches = images * tokens.tiles * patches_per_tile
    linear = 2.0 * (vision.tower_params + vision.projector_params) * patches
    attention = 4.0 * patches * patches_per_tile * vision.hidden_size * vision.num_layers
    return linear + attention


def vision_trainable_params(vision, *, train_tower: bool, train_projector: bool = True) -> int:
    """Parameters of the image side that get gradients and optimizer states."""
    return (vision.tower_params if train_tower else 0) + \
        (vision.projector_params if train_projector else 0)


def vlm_sequence_len(seq_len: int, vision, *, image_size: Optional[int] = None,
                     images: int = 1) -> int:
    """Tokens per sample the language model processes: ``seq_len`` text tokens plus the image
    tokens of ``images`` images (LLaVA-style models insert them into the sequence; Llama-3.2-
    Vision cross-attends to them instead, so its text sequence is unchanged)."""
    if vision is None:
        return seq_len
    tokens = image_tokens(vision, image_size)
    return seq_len if tokens.cross_attention else seq_len + images * tokens.lm_tokens
