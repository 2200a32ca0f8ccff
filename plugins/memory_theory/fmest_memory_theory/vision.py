"""Vision-language models: image tokens, and the vision tower's memory and FLOPs.

The tower (a ViT: CLIP, SigLIP, Qwen2-VL's, Mllama's, InternViT) runs once per image tile over
its patches; the projector maps its output into the language model's width; the resulting
image tokens join the text sequence (Llama-3.2-Vision instead cross-attends to them). Shapes
come from :class:`fmest.models.spec.VisionSpec` (sources in ``fmest.models.hf_vision``).

Image tokens per model and image size are core's (:mod:`fmest.models.images`, shared with the
time plugin). Saved activations of a trained ViT layer follow Korthikanti et al. 2022 (arXiv:2205.05198,
eq. 1) with memory-efficient attention (no s^2 term): ``34 x patches x hidden`` bytes per layer
and sequence in 16-bit training. A frozen tower (``--train-vision-tower`` off, the usual LLaVA
and Qwen2-VL fine-tuning recipe) runs without autograd: nothing is saved, only one layer's
working set is alive (about ``(4 x hidden + intermediate) x patches`` elements) plus its output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fmest.models.images import ImageTokens, image_tokens, vlm_sequence_len  # noqa: F401

if TYPE_CHECKING:
    from fmest.models.spec import VisionSpec

#: Korthikanti et al. 2022 eq. 1 without the 5as/h attention-score term (flash/SDPA): bytes per
#: token per hidden unit a 16-bit transformer layer saves for backward.
SAVED_BYTES_PER_TOKEN_HIDDEN = 34.0


def vision_activation_bytes(vision: VisionSpec, tokens: ImageTokens, *, images: int,
                            act_bytes: float, trained: bool,
                            checkpointing: bool = False) -> float:
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


def vision_forward_flops(vision: VisionSpec, tokens: ImageTokens, *, images: int) -> float:
    """Forward FLOPs of the tower and projector for ``images`` images: 2 x parameters per patch
    (Kaplan et al. 2020) plus bidirectional attention (4 x patches x hidden per patch and layer,
    Narayanan et al. 2021 eq. 2 without the causal half)."""
    patches_per_tile = tokens.patches_per_tile
    patches = images * tokens.tiles * patches_per_tile
    linear = 2.0 * (vision.tower_params + vision.projector_params) * patches
    attention = 4.0 * patches * patches_per_tile * vision.hidden_size * vision.num_layers
    return linear + attention


def vision_trainable_params(vision: VisionSpec, *, train_tower: bool,
                            train_projector: bool = True) -> int:
    """Parameters of the image side that get gradients and optimizer states."""
    return (vision.tower_params if train_tower else 0) + \
        (vision.projector_params if train_projector else 0)
