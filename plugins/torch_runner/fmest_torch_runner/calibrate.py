""""The theory learns from the trace": exact per-layer bytes by the difference method.

Tracing the same architecture with 1 and with 2 decoder layers (fake mode, CPU semantics,
no rounding) and subtracting gives what one layer adds and what sits outside the layers
(embeddings, final norm, logits, loss), for the job's precision, attention, checkpointing and
LoRA settings -- numbers an analytic formula can be checked or fitted against.
"""

from __future__ import annotations

from fmest_torch_runner.runner import RunSpec, run, run_spec_from_job


def _trace(base: RunSpec, layers: int):
    import attrs

    res = run(attrs.evolve(base, num_layers=layers), "fake")
    if res.status != "ok":
        raise RuntimeError(f"trace with {layers} layer(s) failed: {res.status}: {res.error}")
    return res


def per_layer_bytes(spec, training, *, optimizer_name: str | None = None) -> dict:
    """Bytes per decoder layer and outside the layers for ``spec`` (a ModelSpec with
    ``hf_config``) trained as ``training`` (a :class:`fmest.job.Training`).

    Keys (bytes; "saved" = alive at the end of the steady-state forward, i.e. kept for
    backward, plus the loss):

    * ``activation_bytes_per_layer``, ``activation_bytes_outside_layers`` (the latter is
      embeddings output + final norm + logits/log-softmax saved for the loss);
    * ``logits_loss_bytes``: the same bytes under the name formulas use: everything saved
      outside the decoder layers (final norm input, head input, logits and their fp32 upcast /
      log-softmax for the loss); embedding outputs are counted in the first layer's input;
    * ``params_bytes_per_layer``, ``params_bytes_outside_layers``;
    * ``forward_peak_bytes_per_layer``, ``step_peak_bytes_per_layer``: growth of the
      steady-state forward peak and of the whole-step peak per layer;
    * ``forward_transient_bytes``: forward peak minus what is alive at the forward's end
      (1 layer; the logits upcast and loss temporaries);
    * ``peak_1_layer_bytes``, ``peak_2_layer_bytes``, ``peak_window_1_layer``.
    """
    from fmest.job import Job

    job = Job(model=spec.name, training=training)
    base = run_spec_from_job(job, spec, optimizer_name=optimizer_name, device="fake")
    r1, r2 = _trace(base, 1), _trace(base, 2)

    def saved(r):
        return r.window_end_bytes["s2_forward"]["activations"]

    def params(r):
        return r.window_end_bytes["s2_forward"]["params"]

    a1, a2 = saved(r1), saved(r2)
    per_layer = a2 - a1
    outside = a1 - per_layer
    fwd1 = r1.phase_peaks_bytes["s2_forward"]
    return {
        "activation_bytes_per_layer": per_layer,
        "activation_bytes_outside_layers": outside,
        "logits_loss_bytes": outside,
        "params_bytes_per_layer": params(r2) - params(r1),
        "params_bytes_outside_layers": 2 * params(r1) - params(r2),
        "forward_peak_bytes_per_layer": r2.phase_peaks_bytes["s2_forward"] - fwd1,
        "step_peak_bytes_per_layer": r2.peak_bytes - r1.peak_bytes,
        "forward_transient_bytes": fwd1 - sum(r1.window_end_bytes["s2_forward"].values()),
        "peak_1_layer_bytes": r1.peak_bytes,
        "peak_2_layer_bytes": r2.peak_bytes,
        "peak_window_1_layer": r1.peak_window,
    }
