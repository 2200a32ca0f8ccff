"""Tests of the transforms (fmest.transforms): the dtype table, optimizer sizing, sharding
divisors, the communication plan, and a third-party strategy registered through
``fmest_register_parallelism`` that memory, time and the trace all follow."""

from __future__ import annotations

import attrs
import pytest

import fmest_memory_theory.plugin as memory_plugin
import fmest_time_roofline.plugin as time_plugin
from fmest.convert import job_from_dict
from fmest.default_plugins import parallelism as builtin_parallelism
from fmest.default_plugins.optimizers import BUILTIN_OPTIMIZERS
from fmest.hookspecs import hookimpl
from fmest.job import Training
from fmest.testing import new_engine
from fmest.transforms import DTYPES, ShardingStrategy

STRATEGIES = {s.name: s for s in builtin_parallelism.BUILTIN_STRATEGIES}
OPTIMIZERS = {o.name: o for o in BUILTIN_OPTIMIZERS}
H100_NODE = {"gpu": "H100-SXM-80GB", "gpus_per_node": 8}


def _ctx(parallelism, training=None, model="llama-3.2-1b", hardware=H100_NODE):
    job = job_from_dict({"model": model, "training": training or {},
                         "parallelism": parallelism, "hardware": hardware})
    return job, new_engine().context(job)


def test_one_dtype_table_fp8_storage_rule():
    """fp8 training stores bf16 (torchao float8 README) and reads 1-byte GEMM operands; the
    memory and time plugins both read this table."""
    from fmest_time_roofline import formulas as time_formulas

    assert DTYPES["fp8"].storage_bytes == 2 and DTYPES["fp8"].operand_bytes == 1
    assert time_formulas.dtype_bytes("fp8") == 1.0 and time_formulas.storage_dtype("fp8") == "bf16"
    fp8 = OPTIMIZERS["adamw"].sizing(Training(dtype="fp8"), "pure")
    assert fp8.weight_bytes == fp8.grad_bytes == fp8.state_bytes == 2


def test_optimizer_sizing_zero_paper_16_bytes():
    """Rajbhandari et al. 2020 section 3.1: mixed-precision Adam = 2 + 2 + 4 + 2 x 4 bytes per
    parameter; amp (fp32 weights and grads) = 4 + 4 + 2 x 4; 8-bit AdamW states 1 byte +
    4/2048 block scale (Dettmers et al. 2022)."""
    master = OPTIMIZERS["adamw"].sizing(Training(), "master")
    assert (master.weight_bytes + master.grad_bytes + master.master_bytes
            + master.states * master.state_bytes) == 16
    amp = OPTIMIZERS["adamw"].sizing(Training(), "amp")
    assert (amp.weight_bytes, amp.grad_bytes, amp.master_bytes, amp.state_bytes) == (4, 4, 0, 4)
    lora = OPTIMIZERS["adamw"].sizing(Training(technique="lora"), "amp")
    assert (lora.weight_bytes, lora.trainable_bytes) == (2, 4)   # bf16 base, fp32 adapters
    eight = OPTIMIZERS["adamw_8bit"].sizing(Training(), "pure")
    assert eight.state_bytes == 1.0 and eight.state_overhead_bytes == pytest.approx(4 / 2048)
    assert eight.impl == "fused" and eight.temp_states == 0.0


@pytest.mark.parametrize("name, divisors", [
    ("zero0", (1, 1, 1)), ("zero1", (1, 1, 8)), ("zero2", (1, 8, 8)), ("zero3", (8, 8, 8)),
    ("fsdp_full_shard", (8, 8, 8)), ("fsdp_no_shard", (1, 1, 1)),
])
def test_sharding_divisors(name, divisors):
    """ZeRO stages 1-3 partition optimizer states, + gradients, + parameters over the data
    parallel ranks (Rajbhandari et al. 2020, section 5)."""
    layout = attrs.make_class("L", ["dp", "cp", "gpus_per_node"])(8, 1, 8)
    par = attrs.make_class("P", ["hsdp_shard_size"])(None)
    plan = STRATEGIES[name].plan(layout, par)
    assert (plan.params_divisor, plan.grads_divisor, plan.optimizer_divisor) == divisors


def test_hybrid_shard_divides_within_node_and_all_reduces_across():
    """HSDP (Zhao et al. 2023): shard over the 8 GPUs of a node, replicate over 2 nodes; the
    gradient shard is all-reduced across replicas."""
    job, ctx = _ctx({"fsdp": "hybrid_shard"}, hardware=dict(H100_NODE, nodes=2))
    plan, comm = ctx.transforms.sharding, ctx.transforms.communication
    assert (plan.group_size, plan.replicas) == (8, 2)
    kinds = [(c.kind, c.phase, c.group_size) for c in comm.collectives]
    assert kinds == [("all_gather", "forward", 8), ("all_gather", "backward", 8),
                     ("reduce_scatter", "backward", 8), ("all_reduce", "backward", 2)]


@pytest.mark.parametrize("parallelism, expected", [
    ({}, [("all_reduce", "gradients", "backward", False, True)]),
    ({"zero_stage": 1}, [("all_reduce", "gradients", "backward", False, True),
                         ("all_gather", "parameters", "step", False, False)]),
    ({"zero_stage": 2}, [("reduce_scatter", "gradients", "backward", True, True),
                         ("all_gather", "parameters", "step", False, False)]),
    ({"fsdp": "full_shard"}, [("all_gather", "parameters", "forward", True, True),
                              ("all_gather", "parameters", "backward", True, True),
                              ("reduce_scatter", "gradients", "backward", True, True)]),
    ({"fsdp": "full_shard", "fsdp_backward_prefetch": "post"},
     [("all_gather", "parameters", "forward", True, True),
      ("all_gather", "parameters", "backward", True, False),
      ("reduce_scatter", "gradients", "backward", True, True)]),
    ({"fsdp": "shard_grad_op"}, [("all_gather", "parameters", "forward", True, True),
                                 ("reduce_scatter", "gradients", "backward", True, True)]),
])
def test_communication_plan_per_strategy(parallelism, expected):
    """DDP all-reduces bucketed gradients once per step during backward (Li et al. 2020);
    ZeRO-1/2 gather updated parameters after the step, ZeRO-2 reduce-scatters per micro-batch;
    FSDP FULL_SHARD gathers per unit in forward and backward (BACKWARD_POST leaves the backward
    gather exposed), SHARD_GRAD_OP only in forward (Zhao et al. 2023 section 3)."""
    job, ctx = _ctx(parallelism)
    got = [(c.kind, c.what, c.phase, c.per_micro_batch, c.overlappable)
           for c in ctx.transforms.communication.collectives]
    assert got == expected
    grads = [c for c in ctx.transforms.communication.collectives if c.what == "gradients"][0]
    params = ctx.model.param_counts().total
    bytes_per = 4.0 if ctx.transforms.precision in ("amp", "master") else 2.0
    assert grads.payload_bytes == pytest.approx(bytes_per * params)


def test_single_gpu_has_no_collectives():
    job, ctx = _ctx({}, hardware={"gpu": "H100-SXM-80GB", "gpus_per_node": 1})
    assert ctx.transforms.communication.collectives == ()
    assert ctx.transforms.stack.name == "pytorch"   # no stack stated: eager PyTorch (issue 12)


# -- a third-party strategy through the registration hook ------------------------------------

class _ToyParallelism:
    """A third-party plugin: registers ``toy_zero1``, a new strategy that behaves like ZeRO-1
    (optimizer states sharded, gradients all-reduced, parameters gathered per step) under a
    name no estimator knows."""

    @hookimpl
    def fmest_register_parallelism(self, register):
        register(attrs.evolve(STRATEGIES["zero1"], name="toy_zero1", aliases=(),
                              source="toy (test)"))


TINY = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 688,
        "vocab_size": 4000, "max_position_embeddings": 1024, "tie_word_embeddings": False}


def _toy_engine(*plugins):
    return new_engine(*plugins, (_ToyParallelism(), "toy_parallelism"))


def _job(parallelism: dict, method: str = "theory"):
    return job_from_dict({"model": "tiny-llama", "model_config": dict(TINY),
                          "training": {"dtype": "bf16", "precision": "master", "seq_len": 128,
                                       "micro_batch_size": 2},
                          "parallelism": parallelism, "hardware": H100_NODE,
                          "options": {"method": method}})


def test_registered_strategy_drives_memory_and_time():
    """Memory and time follow the registered strategy's behaviour, not its name: the toy
    strategy, chosen by ``parallelism.sharding``, answers exactly as ZeRO-1 does, and unlike
    FULL_SHARD."""
    plugins = ((memory_plugin, "memory_theory"), (time_plugin, "time_roofline"))
    toy = _toy_engine(*plugins).estimate(_job({"sharding": "toy_zero1"}))
    zero1 = new_engine(*plugins).estimate(_job({"zero_stage": 1}))
    real = new_engine(*plugins).estimate(_job({"fsdp": "full_shard"}))
    assert toy.context.transforms.sharding.strategy.source == "toy (test)"
    assert toy.memory.components == zero1.memory.components
    assert toy.time.breakdown == zero1.time.breakdown
    assert toy.memory.components["weights"] > 4 * real.memory.components["weights"]
    assert toy.time.breakdown["communication_dp"] != real.time.breakdown["communication_dp"]


def test_registered_strategy_drives_the_trace(tmp_path, monkeypatch):
    """The traced plugin scales by the toy strategy's divisors (ZeRO-1: only optimizer state);
    it would trace FSDP2 only for a strategy that gathers a full shard."""
    runner = pytest.importorskip("fmest_torch_runner.plugin")
    monkeypatch.setenv("FMEST_CACHE_DIR", str(tmp_path))
    plugins = ((runner, "torch_runner"),)
    toy = _toy_engine(*plugins).estimate(_job({"sharding": "toy_zero1"}, "traced"),
                                         quantities=("memory",))
    zero1 = new_engine(*plugins).estimate(_job({"zero_stage": 1}, "traced"),
                                          quantities=("memory",))
    assert toy.memory.provenance.basis == "traced"
    assert toy.memory.components == zero1.memory.components
    assert "FSDP2" not in toy.memory.provenance.detail


def test_strategy_subclass_overrides_collectives():
    """A strategy is an object with behaviour: a subclass that adds a collective is priced by
    the time plugin without any change to it."""

    @attrs.frozen(kw_only=True)
    class ChattyDDP(ShardingStrategy):
        def collectives(self, **kw):
            base = super().collectives(**kw)
            return base + tuple(attrs.evolve(c, phase="step", overlappable=False) for c in base)

    class Chatty:
        @hookimpl
        def fmest_register_parallelism(self, register):
            register(ChattyDDP(**dict(attrs.asdict(STRATEGIES["zero0"], recurse=False),
                                      name="chatty_ddp", aliases=())))

    plugins = ((time_plugin, "time_roofline"), (memory_plugin, "memory_theory"))
    chatty = new_engine(*plugins, (Chatty(), "chatty")).estimate(
        _job({"sharding": "chatty_ddp"}))
    plain = new_engine(*plugins).estimate(_job({}))
    assert chatty.time.breakdown["communication_dp"] > plain.time.breakdown["communication_dp"]
    assert chatty.memory.total_bytes == plain.memory.total_bytes


def test_transforms_follow_the_job_they_are_asked_for():
    """The engine's ``ctx.transforms`` serve jobs that differ only in micro-batch (the batch
    search); a job differing in a field they depend on is resolved afresh."""
    from fmest.transforms import transforms_of

    job, ctx = _ctx({"zero_stage": 3})
    assert transforms_of(job.evolve(training={"micro_batch_size": 8}), ctx) is ctx.transforms
    pure = transforms_of(job.evolve(training={"precision": "pure"}), ctx)
    assert ctx.transforms.precision == "master" and pure.precision == "pure"


def test_transforms_follow_main_grads_dtype():
    """A job that differs from the context's only in training.main_grads_dtype gets its own
    transforms (fp32 vs compute-dtype gradients), not the context's cached ones."""
    from fmest import to_job
    from fmest.transforms import transforms_of

    engine = new_engine()
    base = to_job({"model": "meta-llama/Llama-2-7b-hf",
                   "training": {"stack": "megatron-core", "precision": "master"},
                   "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8}})
    ctx = engine.context(base)
    other = base.evolve(training={"main_grads_dtype": "compute"})
    fp32 = transforms_of(base, ctx).optimizer.grad_bytes
    compute = transforms_of(other, ctx).optimizer.grad_bytes
    assert (fp32, compute) == (4, 2)
