"""Encoder-decoder ``config.json`` -> parameter inventory: T5 (t5, mt5: T5, Flan-T5, mT5, mT0, T0)
and BART.

Mirrors ``T5ForConditionalGeneration`` / ``MT5ForConditionalGeneration`` /
``BartForConditionalGeneration`` of transformers 5 module by module (checked on the meta device
by tests/test_encdec.py). ``num_layers`` of the resulting spec counts both stacks; the decoder
layers carry a cross-attention block (kind ``cross_attention``), which attends to the encoder's
output of ``source_len`` tokens.

Sources: Raffel et al. 2020 (T5, arXiv:1910.10683, section 2.1: relative position buckets shared
per stack, no biases, RMSNorm-style layer norm without bias); T5 v1.1 / mT5 (gated-GELU FFN,
untied head: https://github.com/google-research/text-to-text-transfer-transformer/blob/main/
released_checkpoints.md); Lewis et al. 2020 (BART, arXiv:1910.13461: learned positions with an
offset of 2, biases, layernorm_embedding).
"""

from __future__ import annotations

ENCODER_DECODER_TYPES = ("t5", "mt5", "bart")


def t5_inventory(c, b) -> dict:
    """T5 / mT5 stacks. ``c`` is hf._Cfg, ``b`` hf._Builder."""
    d_model = c.int("d_model")
    d_kv = c.int("d_kv")
    heads = c.int("num_heads")
    d_ff = c.int("d_ff")
    enc_layers = c.int("num_layers")
    dec_layers = c.int("num_decoder_layers", default=enc_layers)
    vocab = c.int("vocab_size")
    buckets = c.int("relative_attention_num_buckets", default=32)
    gated = str(c.get("feed_forward_proj", default="relu")).startswith("gated")
    tie = c.bool("tie_word_embeddings", True)
    inner = heads * d_kv
    for kind, layers in (("attention", enc_layers + dec_layers), ("cross_attention", dec_layers)):
        for name in ("q", "k", "v"):
            b.lin(name, d_model, inner, layers=layers, kind=kind)
        b.lin("o", inner, d_model, layers=layers, kind=kind)
    ffn_layers = enc_layers + dec_layers
    if gated:
        b.lin("wi_0", d_model, d_ff, layers=ffn_layers, kind="mlp")
        b.lin("wi_1", d_model, d_ff, layers=ffn_layers, kind="mlp")
    else:
        b.lin("wi", d_model, d_ff, layers=ffn_layers, kind="mlp")
    b.lin("wo", d_ff, d_model, layers=ffn_layers, kind="mlp")
    # one relative position bias table per stack, in its first layer (Raffel et al. 2.1)
    # kind "other": relative buckets extrapolate to any length (not a learned position table)
    b.grp("relative_attention_bias", 2 * buckets * heads, "other")
    b.grp("layer_norms", (2 * enc_layers + 3 * dec_layers) * d_model, "norm")
    b.grp("final_layer_norm", 2 * d_model, "norm")
    b.embed_and_head(vocab, d_model, tie, emb_name="shared")
    return dict(hidden_size=d_model, num_layers=enc_layers + dec_layers, num_attention_heads=heads,
                num_kv_heads=heads, head_dim=d_kv, intermediate_size=d_ff, vocab_size=vocab,
                tie_word_embeddings=tie, gated_mlp=gated, max_position_embeddings=c.int(
                    "n_positions", default=512),
                is_encoder_decoder=True, num_encoder_layers=enc_layers,
                relative_attention_num_buckets=buckets,
                # T5Attention adds the position bias to explicit scores: eager attention only
                eager_only=True,
                dropout=float(c.get("dropout_rate", default=0.1) or 0.0))


def bart_inventory(c, b) -> dict:
    """BART stacks (learned positions with an offset of 2, biases everywhere)."""
    d_model = c.int("d_model")
    enc_layers = c.int("encoder_layers")
    dec_layers = c.int("decoder_layers")
    heads = c.int("encoder_attention_heads")
    enc_ffn = c.int("encoder_ffn_dim")
    dec_ffn = c.int("decoder_ffn_dim", default=enc_ffn)
    vocab = c.int("vocab_size")
    max_pos = c.int("max_position_embeddings", default=1024)
    tie = c.bool("tie_word_embeddings", True)
    for kind, layers in (("attention", enc_layers + dec_layers), ("cross_attention", dec_layers)):
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            b.lin(name, d_model, d_model, bias=True, layers=layers, kind=kind)
    b.lin("fc1", d_model, enc_ffn, bias=True, layers=enc_layers, kind="mlp")
    b.lin("fc2", enc_ffn, d_model, bias=True, layers=enc_layers, kind="mlp")
    b.lin("fc1", d_model, dec_ffn, bias=True, layers=dec_layers, kind="mlp")
    b.lin("fc2", dec_ffn, d_model, bias=True, layers=dec_layers, kind="mlp")
    b.grp("embed_positions", 2 * (max_pos + 2) * d_model, "position")
    b.grp("layer_norms", (2 * 2 * enc_layers + 3 * 2 * dec_layers) * d_model, "norm")
    b.grp("layernorm_embedding", 2 * 2 * d_model, "norm")
    b.embed_and_head(vocab, d_model, tie, emb_name="shared")
    return dict(hidden_size=d_model, num_layers=enc_layers + dec_layers, num_attention_heads=heads,
                num_kv_heads=heads, head_dim=d_model // heads, intermediate_size=enc_ffn,
                vocab_size=vocab, tie_word_embeddings=tie, gated_mlp=False,
                max_position_embeddings=max_pos, is_encoder_decoder=True,
                num_encoder_layers=enc_layers,
                dropout=float(c.get("dropout", default=0.1) or 0.0))
