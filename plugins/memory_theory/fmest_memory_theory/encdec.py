"""Encoder-decoder (T5, mT5, BART) training memory: two stacks at two lengths plus
cross-attention.

The encoder's layers see ``source_len`` tokens with bidirectional self-attention; the decoder's
layers see ``target_len`` tokens with causal self-attention, then cross-attend to the encoder's
output (queries from the target, keys/values projected from the ``source_len`` encoder states
in every decoder layer). T5 adds one relative-position bias tensor per stack, [heads, s, s] in
fp32, computed in the first layer and reused by the others (Raffel et al. 2020,
arXiv:1910.10683, section 2.1; transformers ``T5Attention.compute_bias``).

The per-layer activation formula itself is the plugin's (``per_layer_bytes(seq_len)``: one
decoder-style layer at that length); this module decides which lengths each stack runs at and
adds what a decoder-only layer does not have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from attrs import frozen

if TYPE_CHECKING:
    from fmest.models.spec import ModelSpec

#: T5's position bias is computed in fp32 (``relative_attention_bias`` embedding output, added
#: to fp32 scores); one [1, heads, q, k] tensor per stack is saved for backward.
POSITION_BIAS_BYTES = 4.0
#: Eager attention keeps the fp32 softmax output and its compute-dtype copy per score element
#: (about 6 bytes for bf16: docs/research/trace_feasibility.md section 2a, eager vs sdpa), plus a
#: 1-byte dropout mask when attention dropout is on (Korthikanti et al. 2022 eq. 1).
EAGER_SCORE_BYTES = 6.0


@frozen(kw_only=True)
class StackLengths:
    """Tokens per sequence each stack processes."""

    encoder_layers: int
    source_len: int
    decoder_layers: int
    target_len: int


def stack_lengths(model: ModelSpec, *, seq_len: int, source_len: Optional[int] = None,
                  target_len: Optional[int] = None) -> StackLengths:
    """``--source-len`` / ``--target-len``, each defaulting to ``seq_len`` (issue 14)."""
    return StackLengths(encoder_layers=model.num_encoder_layers,
                        source_len=source_len or seq_len,
                        decoder_layers=model.num_decoder_layers,
                        target_len=target_len or seq_len)


def cross_attention_extra_bytes(model: ModelSpec, *, batch: int, target_len: int, source_len: int,
                                act_bytes: float, tp: int = 1) -> float:
    """What one decoder layer's cross-attention block saves beyond a self-attention block's
    share already counted by the per-layer formula: its own norm input and query/output
    projections' inputs on the target (3 x target x hidden, the attention block of Korthikanti
    et al. 2022 eq. 1 without its K/V part), plus the K and V projections of the encoder output
    (2 x source x kv width) and the attention output on the target. Flash/SDPA attention keeps
    no score matrix."""
    kv_width = 2 * model.num_kv_heads * model.head_dim / tp
    q_width = model.num_attention_heads * model.head_dim / tp
    target = batch * target_len * (3 * model.hidden_size + 2 * q_width)
    source = batch * source_len * kv_width
    scores = 0.0
    if model.eager_only:  # T5: explicit [b, heads, tgt, src] scores (softmax in fp32)
        per_score = EAGER_SCORE_BYTES + (1.0 if model.dropout > 0 else 0.0)
        scores = batch * model.num_attention_heads / tp * target_len * source_len * per_score
    return (target + source) * act_bytes + scores


def relative_bias_bytes(model: ModelSpec, *, batch: int, source_len: int, target_len: int,
                        tp: int = 1) -> float:
    """T5's saved position-bias tensors: encoder [heads, src, src] and decoder [heads, tgt,
    tgt] in fp32 (batch-independent: broadcast over the batch). BART has none."""
    if not model.relative_attention_num_buckets:
        return 0.0
    heads = model.num_attention_heads / tp
    del batch  # the bias is shared by every sequence of the micro-batch
    return heads * (source_len ** 2 + target_len ** 2) * POSITION_BIAS_BYTES


def encdec_activation_bytes(model: ModelSpec, per_layer_bytes: Callable[[int], float], *,
                            lengths: StackLengths, batch: int, act_bytes: float,
                            tp: int = 1) -> float:
    """Saved activations of both stacks: ``encoder_layers x per_layer(source_len)`` +
    ``decoder_layers x (per_layer(target_len) + cross-attention extra)`` + position bias + the
    encoder output kept for every decoder layer's K/V projection (one copy)."""
    encoder = lengths.encoder_layers * per_layer_bytes(lengths.source_len)
    decoder = lengths.decoder_layers * (
        per_layer_bytes(lengths.target_len)
        + cross_attention_extra_bytes(model, batch=batch, target_len=lengths.target_len,
                                      source_len=lengths.source_len, act_bytes=act_bytes, tp=tp))
    encoder_output = batch * lengths.source_len * model.hidden_size * act_bytes
    return encoder + decoder + encoder_output + relative_bias_bytes(
        model, batch=batch, source_len=lengths.source_len, target_len=lengths.target_len, tp=tp)