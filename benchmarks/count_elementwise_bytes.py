"""Count the HBM bytes of the elementwise op families of a Llama layer, eager and compiled.

The time model's memory-bound term (``fmest_time_roofline.formulas``: ``*_BYTES_PER_ELEMENT``,
``ELEMENTWISE_BACKWARD_FACTOR``, ``COMPILED_BYTES_PER_ELEMENT``) multiplies bytes per element
by the elements of each op family. This script measures them on CPU, in bf16, on the code that
runs in training (transformers' ``LlamaRMSNorm``, ``torch.nn.LayerNorm`` (``reslayernorm``: the
norm of gpt2, gpt_neox, falcon, phi, ...), ``apply_rotary_pos_emb``, the SwiGLU MLP
activation, ``ForCausalLMLoss``, ``eager_attention_forward``'s scores; torchao's tensorwise
float8 cast written out as in ``torchao/float8/float8_utils.py``):

* eager: a ``TorchDispatchMode`` adds the bytes of every tensor an ATen op reads and writes
  (inputs + outputs; views, matmuls and SDPA are not elementwise traffic and are skipped;
  ``fill_``/``zero_`` only write), separately for the forward and the backward
  (``torch.autograd.grad``, so no gradient accumulation is counted);
* compiled: ``torch.compile`` (Inductor, CPU backend; its scheduler fuses the same way for the
  Triton backend except for backend-specific heuristics) and, for every kernel of the
  generated forward and backward graphs, ``BaseSchedulerNode.get_read_write_buffers_sizes()``
  (what ``torch/_inductor/graph.py`` ``count_bytes`` reports as ``num_bytes_accessed``),
  extern kernels (matmul, SDPA) left out.

Bytes are printed per element of the family's tensor (tokens x hidden for ``resnorm`` and ``reslayernorm``, tokens x
(q+kv) dims for ``rope``, tokens x intermediate for ``swiglu`` and ``gelu``, tokens x q dims for ``layout``, tokens x vocab for ``ce``,
scores for ``scores``, GEMM operand elements for ``fp8_cast``). Needs torch and transformers.

    python benchmarks/count_elementwise_bytes.py
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SKIP = {"mm", "bmm", "addmm", "matmul", "_scaled_dot_product_flash_attention_for_cpu",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
         "detach", "alias", "lift_fresh"}
_WRITE_ONLY = {"fill_", "zero_", "zeros", "zeros_like", "ones_like", "empty", "empty_like",
               "new_zeros", "new_empty", "full", "scalar_tensor", "new_empty_strided"}


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    return 0


class _Bytes(TorchDispatchMode):
    """Bytes read + written by the ATen ops dispatched inside the mode."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in _SKIP or func.is_view:
            return out
        if name not in _WRITE_ONLY:
            self.bytes += _nbytes(list(args)) + _nbytes(list(kwargs.values()))
        self.bytes += _nbytes(out)
        return out


def eager_bytes(fn, inputs, grads=True) -> tuple[int, int]:
    """(forward bytes, backward bytes) of eager ``fn(*inputs)``."""
    with _Bytes() as fwd:
        outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    if not grads:
        return fwd.bytes, 0
    diff = [o for o in outs if o.requires_grad]
    with _Bytes() as bwd:
        torch.autograd.grad(diff, [i for i in inputs if i.requires_grad],
                            [torch.ones_like(o) for o in diff], allow_unused=True)
    return fwd.bytes, bwd.bytes


def compiled_bytes(fn, inputs) -> list[int]:
    """Bytes of the Inductor kernels (extern kernels left out) of each graph compiled for
    ``fn`` (forward, then backward)."""
    import torch._inductor.config
    from torch._inductor import graph as inductor_graph
    from torch._inductor.scheduler import ExternKernelSchedulerNode, NopKernelSchedulerNode

    per_graph: list[int] = []
    original = inductor_graph.GraphLowering.codegen

    def codegen(self, *a, **k):
        result = original(self, *a, **k)
        per_graph.append(sum(n.get_read_write_buffers_sizes() for n in self.scheduler.nodes
                             if not isinstance(n, (ExternKernelSchedulerNode,
                                                   NopKernelSchedulerNode))))
        return result

    torch._dynamo.reset()
    torch._inductor.config.force_disable_caches = True   # a cache hit skips codegen
    inductor_graph.GraphLowering.codegen = codegen
    try:
        compiled = torch.compile(fn, dynamic=False)
        outs = compiled(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        diff = [o for o in outs if o.requires_grad]
        if diff:
            torch.autograd.grad(diff, [i for i in inputs if i.requires_grad],
                                [torch.ones_like(o) for o in diff], allow_unused=True)
    finally:
        inductor_graph.GraphLowering.codegen = original
    return per_graph


def families(tokens: int = 256, hidden: int = 512, q_heads: int = 8, kv_heads: int = 2,
             head_dim: int = 64, inter: int = 1024, vocab: int = 2048):
    """(name, fn, inputs, elements) of each op family, bf16, trainable where training is."""
    from transformers.models.llama import modeling_llama as llama

    bf = torch.bfloat16
    torch.manual_seed(0)

    def leaf(*shape, dtype=bf, grad=True):
        return torch.randn(*shape, dtype=dtype).requires_grad_(grad)

    def resnorm(res, branch, weight):     # h = res + branch; LlamaRMSNorm.forward(h) verbatim
        h = res + branch
        x = h.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + 1e-6)
        return h, weight * x.to(h.dtype)

    def reslayernorm(res, branch, weight, bias):   # h = res + branch; torch.nn.LayerNorm(h)
        h = res + branch
        return h, torch.nn.functional.layer_norm(h, (hidden,), weight, bias, 1e-5)

    def resnorm_amp(res, branch, weight):     # under torch.autocast: the fp32 stream (HF amp),
        with torch.autocast("cpu", dtype=bf):  # LlamaRMSNorm, the next Linear's input cast
            h = res + branch
            x = h.to(torch.float32)
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            return h, (weight * x.to(h.dtype)).to(bf)

    def reslayernorm_amp(res, branch, weight, bias):  # nn.LayerNorm on autocast's fp32 list
        with torch.autocast("cpu", dtype=bf):
            h = res + branch
            return h, torch.nn.functional.layer_norm(h, (hidden,), weight, bias, 1e-5).to(bf)

    def rope(q_lin, k_lin, cos, sin):     # HF: view + transpose, then apply_rotary_pos_emb
        q = q_lin.view(1, tokens, q_heads, head_dim).transpose(1, 2)
        k = k_lin.view(1, tokens, kv_heads, head_dim).transpose(1, 2)
        return llama.apply_rotary_pos_emb(q, k, cos, sin)

    def swiglu(gate, up):                 # LlamaMLP: act_fn(gate_proj(x)) * up_proj(x)
        return torch.nn.functional.silu(gate) * up

    def gelu(x):                          # non-gated MLP activation (GPT-2 style gelu_new)
        return torch.nn.functional.gelu(x, approximate="tanh")

    def layout(o):                        # sdpa_attention_forward: transpose(1, 2).contiguous()
        return o.transpose(1, 2).contiguous()

    def ce(logits, labels):               # transformers ForCausalLMLoss (fp32 upcast)
        from transformers.loss.loss_utils import ForCausalLMLoss
        return ForCausalLMLoss(logits, labels, vocab)

    seq = 128

    def scores(q, k, mask):               # eager_attention_forward up to the AV matmul input
        w = torch.matmul(q, k.transpose(2, 3)) * head_dim ** -0.5
        w = w + mask
        return torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)

    def fp8_cast(x):                      # torchao tensorwise dynamic scaling, one operand
        amax = torch.max(torch.abs(x)).to(torch.float64)
        scale = (448.0 / torch.clamp(amax, min=1e-12)).to(torch.float32)
        y = (x.to(torch.float32) * scale).clamp(-448.0, 448.0)
        return y.to(torch.float8_e4m3fn)

    cos = torch.randn(1, tokens, head_dim, dtype=bf)
    sin = torch.randn(1, tokens, head_dim, dtype=bf)
    mask = torch.triu(torch.full((seq, seq), float("-inf")), 1).to(bf)[None, None]
    return [
        ("resnorm", resnorm, [leaf(tokens, hidden), leaf(tokens, hidden),
                                       leaf(hidden)], tokens * hidden),
        ("reslayernorm", reslayernorm, [leaf(tokens, hidden), leaf(tokens, hidden),
                                        leaf(hidden), leaf(hidden)], tokens * hidden),
        ("resnorm_amp", resnorm_amp, [leaf(tokens, hidden, dtype=torch.float32),
                                      leaf(tokens, hidden), leaf(hidden, dtype=torch.float32)],
         tokens * hidden),
        ("reslayernorm_amp", reslayernorm_amp,
         [leaf(tokens, hidden, dtype=torch.float32), leaf(tokens, hidden),
          leaf(hidden, dtype=torch.float32), leaf(hidden, dtype=torch.float32)], tokens * hidden),
        ("rope", rope, [leaf(1, tokens, q_heads * head_dim), leaf(1, tokens, kv_heads * head_dim),
                        cos, sin], tokens * (q_heads + kv_heads) * head_dim),
        ("swiglu", swiglu, [leaf(tokens, inter), leaf(tokens, inter)], tokens * inter),
        ("gelu", gelu, [leaf(tokens, inter)], tokens * inter),
        ("layout", layout, [leaf(1, q_heads, tokens, head_dim)], tokens * q_heads * head_dim),
        ("ce", ce, [leaf(1, tokens, vocab), torch.randint(0, vocab, (1, tokens))],
         tokens * vocab),
        ("scores", scores, [leaf(2, q_heads, seq, head_dim), leaf(2, q_heads, seq, head_dim),
                            mask], 2 * q_heads * seq * seq),
        ("fp8_cast", fp8_cast, [leaf(tokens, hidden, grad=False)], tokens * hidden),
    ]


def main() -> int:
    torch.set_num_threads(1)
    print(f"{'family':10s} {'eager fwd':>9s} {'eager bwd':>9s} {'bwd/fwd':>7s} "
          f"{'comp fwd':>8s} {'comp bwd':>8s} {'bwd/fwd':>7s}  (bytes per element)")
    for name, fn, inputs, elements in families():
        e_fwd, e_bwd = eager_bytes(fn, inputs, grads=name != "fp8_cast")
        graphs = compiled_bytes(fn, inputs)
        c_fwd = graphs[0] if graphs else 0
        c_bwd = sum(graphs[1:])
        print(f"{name:10s} {e_fwd / elements:9.2f} {e_bwd / elements:9.2f} "
              f"{e_bwd / max(e_fwd, 1):7.2f} {c_fwd / elements:8.2f} {c_bwd / elements:8.2f} "
              f"{c_bwd / max(c_fwd, 1):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
