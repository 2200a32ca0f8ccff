"""Image tokens of vision-language models: how many tiles a tower runs on one image, how many
patches each, and how many tokens the language model sees (sources per model in
:mod:`fmest.models.hf_vision` and docs/models.md). Shared by the memory and time plugins.
"""

from __future__ import annotations

import math
from typing import Optional

from attrs import frozen

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


def vlm_sequence_len(seq_len: int, vision, *, image_size: Optional[int] = None,
                     images: int = 1) -> int:
    """Tokens per sample the language model processes: ``seq_len`` text tokens plus the image
    tokens of ``images`` images (LLaVA-style models insert them into the sequence; Llama-3.2-
    Vision cross-attends to them instead, so its text sequence is unchanged)."""
    if vision is None:
        return seq_len
    tokens = image_tokens(vision, image_size)
    return seq_len if tokens.cross_attention else seq_len + images * tokens.lm_tokens
