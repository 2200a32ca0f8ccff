"""The evidence set (``benchmarks/data/measured.csv``) as fmest jobs.

Public API (used by ``accuracy.py``, ``traced.py`` and the tests):

* :func:`load_rows` ``(kind=None) -> list[dict]``: the CSV rows (all, or one ``kind``:
  ``memory``, ``throughput``, ``total_time``). The path is ``$FMEST_MEASURED_CSV`` or
  ``benchmarks/data/measured.csv``.
* :func:`map_row` ``(row) -> Mapped``: the fmest job dict (:func:`fmest.convert.job_from_dict`
  input), or ``None`` and the missing feature; plus the row's stack and feature tags.
* :func:`row_to_job` ``(row) -> (job_dict or None, reason)`` (``reason`` is ``""`` when mapped).
* :func:`jobs` ``(kind=None) -> list[(row, job_dict or None, reason)]``.

Mapping rules. Each inference is stated once here and applied to every row it matches; none is
tuned per row. ``other`` is read as ``key=value; key=value`` where the parts write that way.

1. **Model** -> fmest preset by name (``find_preset``, also after dropping a `` (...)`` note and
   an ``-Instruct``/``-chat``/``-hf`` suffix: fine-tunes share the base model's architecture). Two
   published families without presets are built from their stated shapes: ``GPT-3-style
   (Megatron-LM), h=H, L=L`` (GPT-2 blocks, vocab 51200, heads per Narayanan et al. 2021 Table 1,
   Megatron-LM's 2021 default dropout 0.1: ``MEGATRON_2021_DROPOUT``)
   and ``MPT-<size>`` (the mosaicml/mpt-7b preset with ``d_model``/layers/heads/vocab from
   ``other``); ``GPT3-<size>`` -> the GPT-3 shape of Brown et al. 2020 Table 2.1 as GPT-2 blocks
   with Megatron's padded vocab 51200 (NeMo's own ``GPT3-5B``/``GPT3-20B``: the NeMo launcher's
   shapes, ``NEMO_GPT3_SHAPES``, vocab padded as NeMo pads it for the row's TP); KempnerForge's
   ``llama3-arch-*-random-init`` / ``llama3-moe-arch-*`` -> the shapes of its model configs
   (``KEMPNERFORGE_SHAPES``: Llama or Mixtral blocks); a family name followed by ``n_layers=..; hidden=..;
   n_heads=..`` (BigScience's custom GPTs) -> that family's preset architecture (BLOOM) with those
   dimensions and tr11's inherited dropout 0.1 (``BIGSCIENCE_TR11_DROPOUT``); a parenthetical ``(X shape)`` -> the preset X; a quantized checkpoint's
   ``-GPTQ``/``-AWQ``/``-Int4``/``-Int8`` suffix is dropped (the quantized release keeps its base
   model's architecture). Any other unknown model is unsupported: "no preset for model X".
2. **GPU** -> the fmest GPU table by name or alias (also without a ``-NNGB`` suffix). Names
   stating only a capacity (``80GB GPU``, ``40GB``, ``48GB``, ``24GB``) map to a GPU of that
   capacity (A100-SXM-80GB, A100-SXM-40GB, L40S-48GB, RTX4090-24GB); only capacity matters for the
   memory rows that carry them. Published names that are table aliases: ``V100`` -> V100-SXM2-16GB,
   ``TitanRTX`` -> TITAN-RTX-24GB, ``A5000`` -> RTX-A5000-24GB, ``RTXPro6000`` -> RTX-PRO-6000-96GB
   (the rows say 'NVIDIA RTX Pro 6000 (Blackwell, 96GB)' without an edition: read as the
   Workstation Edition, the card NVIDIA sells under that name; the Max-Q and Server Editions have
   other clocks). ``A6000Ada`` / ``A6000 Ada`` -> RTX6000-ADA-48GB (clouds list NVIDIA's "RTX 6000
   Ada Generation" as "A6000 Ada"; no Ada card is named A6000). Names carrying a form factor map by
   substring: ``h100-sxm-96``/``h100-96`` -> H100-SXM-96GB, ``a100-pcie-80/40``, ``a100-sxm-40/80``,
   ``h100-pcie``, ``h100-sxm``, ``h200``/``gh200`` -> H200-SXM-141GB (GH200's Hopper GPU),
   ``b200`` -> B200-SXM-180GB, ``v100-sxm-32/16``, ``gaudi2``, ``mi250x``, ``mi300x``. A name
   stating no model (``not stated``, ``8GB GPU``: the table has no 8 GB GPU) is unsupported.
3. **dtype**: ``bf16``/``fp16``/``fp32`` as written; ``fp8`` and ``bf16+float8`` -> ``fp8``; an
   ``fp32`` row whose ``other`` states TF32 matmuls (``set_float32_matmul_precision('high')``,
   ``allow_tf32 = True``, ``tf32=true``) -> ``training.tf32``.
   **Precision**: ``precision=X`` in ``other`` wins; else "pure bf16" stated, or a full fine-tune
   whose ``other`` states ``torch_dtype=bfloat16|float16`` (model loaded in half precision: HF
   Trainer and accelerate keep the loaded dtype for weights, grads and optimizer states; LoRA
   adapters are upcast by PEFT, so not for LoRA) or a ``torchtune`` row (pure bf16 recipes) ->
   ``pure``; the Megatron 2021 rows (``fp16`` on ``megatron-core``) -> ``master``; else fmest's
   ``auto`` rule. Exception first: ``hf-trainer`` + FSDP with the trainer's ``bf16``/``fp16`` flag
   on -> ``amp`` (accelerate upcasts low-precision parameters to fp32 when FSDP mixed precision is
   on: "Upcasted low precision parameters ... because mixed precision turned on in FSDP",
   accelerate ``Accelerator.prepare_model``).
4. **Technique**: ``full``/``lora``/``qlora``; ``gptq-lora`` (LoRA on a 4-bit GPTQ base) ->
   ``qlora`` with 4-bit weights and double quantization: GPTQ packs 4-bit integers with an fp16
   scale and a packed 4-bit zero per 128-weight group (AutoGPTQ ``QuantLinear``: ``qweight`` int32
   x in/8, ``scales`` fp16 and ``qzeros`` int32/8 x in/128), 0.520 B/param, and NF4 with double
   quantization stores 0.516 B/param (Dettmers et al. 2023 section 3): the same bytes within 1 %;
   both dequantize the base to the compute dtype for each matmul. Lit-GPT's ``adapter`` /
   ``adapter-v2`` -> ``adapter`` / ``adapter_v2``, their ``-4bit`` forms -> ``qadapter`` /
   ``qadapter_v2`` (``LITGPT_ADAPTERS``; ``bnb.nf4`` without double quantization, as for qlora).
   Anything else is unsupported ("technique X"). LoRA rank from ``lora_rank`` (16 if empty). LoRA targets:
   ``targets=a+b+c`` in ``other`` (Lit-GPT's ``query``/``key``/ ``value``/``projection`` ->
   ``q_proj``/``k_proj``/``v_proj``/``o_proj``, ``mlp`` -> every MLP linear of the preset
   (``_MLP_LINEARS``); ``head`` is dropped: fmest's LoRA targets exclude the output head); else stack ``torchtune`` -> torchtune's default
   (q, v, o, gate, up, down), stack ``unsloth`` or "all linear" in ``other`` -> all seven linears;
   else fmest's default (q, v: PEFT's default for Llama-family models). On models with one fused
   attention projection (Falcon, GPT-NeoX) q/k/v name ``query_key_value`` and o names ``dense``
   (PEFT's default for them is ``query_key_value``); on Phi-3 q/k/v name ``qkv_proj`` and gate/up
   ``gate_up_proj``. ``targets=`` is read wherever it stands in ``other`` (also inside a
   ``lora r=.. targets=..`` part). ``targets=DEFAULT`` on an ms-swift row is ms-swift 1.x's
   default, the model's q/k/v projection(s) (``MS_SWIFT_DEFAULT_TARGETS``: Qwen v1 ``c_attn``,
   ChatGLM ``query_key_value``, Baichuan ``W_pack``, Llama-style q/k/v). The remote-code
   presets (Qwen v1, ChatGLM2/3, Baichuan2) are built from the models' own modules
   (``fmest.models.presets.UPSTREAM_BUILT``), so their targets keep the upstream names: Qwen
   ``c_attn`` (fused q/k/v), ``c_proj`` (PEFT matches the name suffix: ``attn.c_proj`` and
   ``mlp.c_proj``), ``w1``, ``w2``; ChatGLM ``query_key_value``, ``dense``, ``dense_h_to_4h``,
   ``dense_4h_to_h``; Baichuan ``W_pack``. A
   short name X that is no module of the model names ``X_proj`` (Answer.AI's ``q,k,v,up,down,
   gate``); names the model lacks are dropped when others match (PEFT adapts the matching
   modules and fails only when none matches: ``BaseTuner.inject_adapter``). QLoRA: ``quantization=bnb.nf4`` (Lit-GPT's name for NF4 without double
   quantization, beside ``bnb.nf4-dq``) -> ``double_quantization`` false; else fmest's default
   (true: the QLoRA recipe). ``quant bits=N`` in ``other`` (N = 4 or 8) -> ``quantization_bits``
   N: ms-swift's ``int8 (gptq)`` rows load an 8-bit GPTQ checkpoint (the ``qwen-*-chat-int8``
   registrations pass ``gptq_bits=8``, which ``get_model_tokenizer_from_repo`` hands to
   ``_check_gptq_model`` -> ``GPTQConfig(bits=8)``: ms-swift swift/llm/utils/model.py at
   46922151e06cdfc110882e182757674f12352f2c); AutoGPTQ 0.5.1 ``qlinear_cuda_old.QuantLinear``
   stores 8-bit ``qweight`` as int32 x in/4 (1 B/param) plus fp16 ``scales`` and int32/4
   ``qzeros`` per 128-weight group (0.023 B/param): 1.023 B/param, fmest's 8-bit (LLM.int8)
   bytes 1.0 B/param + one fp32 scale per row within 2.3 %. ``gptq-lora`` also passes
   ``quantization_method=gptq``: AutoGPTQ's CUDA-old layer unpacks the weights with torch ops in
   training (time_roofline ``gptq_dequant_bytes_per_param``); not for rows naming AutoGPTQ's
   triton kernels (fms-acceleration ``accelerated-peft-autogptq``: the kernel dequantizes
   inside its own autograd function, as bitsandbytes does, so fmest's default applies).
   ``modules_to_save`` in ``other`` with the module names it gives (``wte``, ``lm_head``, ...) ->
   ``lora_modules_to_save`` (embedding, head). LoRA dropout: ``lora ... dropout=P`` in ``other``
   -> ``lora_dropout`` P. PEFT's k-bit
   preparation: fms-acceleration's ``baseline-peft-bnb`` rows without sharding run TRL
   SFTTrainer's PEFT path (trl 0.13.0 ``SFTTrainer.__init__``: ``prepare_model_for_kbit_training``
   for a 4-bit model whose ``Params4bit`` are not on cpu/meta, i.e. not sharded QLoRA, then
   ``peft_module_casting_to_bf16`` under ``bf16=True``; huggingface/trl v0.13.0
   4ea33ced3dd017571de7a013e680e6333089a680 trl/trainer/sft_trainer.py) -> ``kbit_prep``
   ``peft_bf16_head`` (``peft`` without ``trainer bf16=TRUE``); the ``accelerated-peft-bnb``
   rows use fms-acceleration's own ``_prepare_model_for_kbit_training`` without the cast
   (foundation-model-stack/fms-acceleration 0f5c9ae08e44d2a0279f37bc95e678ecda8bec2d
   plugins/accelerated-peft/src/fms_acceleration_peft/framework_plugin_bnb.py): fmest's
   default (none). A row stating ``kbit_prep=peft`` (or ``peft_bf16_head``) in ``other`` (the
   preparation its harness's code runs, cited there) -> that ``kbit_prep``.
   fms-acceleration's ``*foak*`` rows (fused-ops-and-kernels) ->
   ``fused_kernels`` (where the job model has that field): norm, rope and loss (Unsloth's
   Triton RMSNorm, RoPE and cross-entropy), + lora on a quantized base (``fused_lora``), the
   loss only for GPT-BigCode (``_foak_fused_kernels``). A row stating ``fused_kernels=a+b`` in
   ``other`` (the kernels its model code calls, cited there) -> those too.
5. **Optimizer**: ``8bit``/``8-bit`` (not "non-8-bit") -> ``adamw_8bit`` (``paged`` ->
   ``paged_adamw_8bit``); ``adafactor``, ``lion``, ``sgd`` (``sgd_momentum`` when momentum is
   stated) by name; everything else -> ``adamw``; ``fused=true`` or stack ``torchtune`` ->
   ``optimizer_impl=fused``; ``optimizer_in_bwd=true`` -> optimizer in backward.
6. **Sharding** (``zero_or_fsdp``): ``1``/``2``/``3`` -> ``zero_stage``; ``distopt`` (Megatron
   distributed optimizer: optimizer states sharded over DP, ZeRO-1-like) -> ``zero_stage=1``;
   ``fsdp`` -> ``fsdp=full_shard``; ``fsdp-hybrid`` -> ``hybrid_shard`` sharded within a node
   (``hsdp_shard_size`` = GPUs per node); ``fsdp-grad-op`` -> ``shard_grad_op``; ``none``/``0``/
   empty -> no sharding. A CPU offload stated in ``other`` (``offload=...``, "cpu offload",
   "offload(ed|ing) to CPU", "CPU optimizer offload(ing)", "optimizer (states) offload"; not
   when negated or false, nor an offload of the activation checkpoints, rule 9) ->
   ``cpu_offload=params`` when the text names parameters or weights or the row is FSDP (FSDP's
   ``CPUOffload`` has only ``offload_params``: parameters, gradients and the optimizer step move
   to the host), else ``optimizer`` (ZeRO-Offload).
7. **Layout**: ``tp``/``pp``/``cp``/``ep`` as given (1 if empty); ``dp`` as given, else ``num_gpus
   / (tp*pp*cp)`` (expert parallelism lives inside DP, Megatron-Core's layout). A row whose
   ``dp*tp*pp*cp`` differs from ``num_gpus`` is unsupported. GPUs per node = min(8, GPUs). TP on
   ``torchtitan`` and ``megatron-core`` rows, or ``sequence_parallel=true``, is sequence-parallel;
   except the Megatron 2021 rows (fp16 on ``megatron-core``, as in rule 3): the PTD-P runs
   (Narayanan et al. 2021) predate sequence parallelism (Korthikanti et al. 2022) and
   Transformer Engine's TP communication overlap (``--tp-comm-overlap``, 2023), so their TP is
   plain all-reduce, not overlapped (``tp_comm_overlap`` false), and they predate gradient
   accumulation fusion (Megatron-LM 83b1e42f, 2022-02: ``grad_accumulation_fusion`` false). Expert TP: ``ETP=N`` (or
   ``expert_tp=N``, ``expert_tensor_parallel_size=N``) in ``other``, or
   ``expert_tensor_parallel_size=N`` / ``--expert-tensor-parallel-size N`` in
   ``source_quote`` -> ``expert_tp`` (Megatron-Core's default when unstated: = tp). Unstated
   where the stated layout rules the default out (``ep x tp`` does not divide the ``tp x dp x
   cp`` ranks of a stage, Megatron-Core's expert rank grid, parallel_state
   ``initialize_model_parallel``): the one divisor of tp that fits, when the row's own EP/TP/DP
   admit exactly one (Qwen3-235B on 256 H100: TP 2, DP 16, EP 32 -> expert TP 1); otherwise the
   row stays unanswered.
8. **Batch**: ``micro_batch`` and ``grad_accum`` as given; ``grad_accum`` empty with
   ``global_batch`` stated -> ``global_batch / (micro_batch * dp)``; else 1. ``micro_batch``
   empty: (a) ``local bs N`` in ``other`` (torchtitan PP tables) -> as many micro-batches as
   pipeline stages in total (torchtitan ``build_pipeline_schedule``; interleaved 1F1B builds 2
   stages per rank), so ``micro_batch = N / stages``; without PP ``micro_batch = N``; (b)
   ``megatron-core`` rows with ``global_batch`` -> micro-batch 1 and accumulation ``global_batch /
   dp`` (the PTD-P runs' micro-batch is unpublished: 1 is an assumption, the smallest micro-batch,
   which the weak-scaling table's global batches always allow); (c) otherwise unsupported
   ("micro-batch size not stated"). PP schedule: ``virtual_pipeline_stages=N`` (N > 1) in
   ``other``, or a stated ``vp`` (``vp=5``, ``VP=8`` in a copied table, ``-vp 12`` on a
   launcher's command line) -> ``interleaved`` with N virtual stages; else "interleaved" ->
   ``interleaved`` with 2; "gpipe" -> ``gpipe``; else 1F1B.
9. **Activation checkpointing**: ``full``/``selective`` as given; ``offload`` -> ``full`` plus
   ``activation_offload`` (Unsloth-style offloaded checkpoints); empty on ``unsloth`` rows and on
   rows from Unsloth's documents (their Hugging Face baselines) -> ``full`` (without it the
   published context lengths could not fit the stated GPUs); empty on ``megatron-deepspeed`` rows
   -> ``full`` (BigScience's Megatron-DeepSpeed runs pass ``--checkpoint-activations``, as the
   tr11 README states; the 72-80-layer test models of its prequel tables could not hold
   uncheckpointed activations at their micro-batches); ``gradient_checkpointing=true`` in
   ``other`` -> ``full``. Block-level selective AC (IBM fms-fsdp ``selective_checkpointing`` p:
   full AC on a share p of the blocks, foundation-model-stack/fms-fsdp
   5a296afe42f9932f590783cb053fa0f9384e01fc fms_fsdp/policies/ac_handler.py; the row's
   ``other`` says "block-level, not op-level") -> ``full`` with ``checkpoint_fraction`` p when
   ``other`` states ``checkpoint_fraction=`` or ``selective_checkpointing=``, else unsupported
   ("... without the fraction stated": the fms-fsdp README tables do not give p); ``full`` with
   a stated fraction -> that fraction. ``selective`` with a stated module list
   (``recompute_modules=a,b``, or a ladder's "recompute: steps A-B recompute X; from step C on
   Y" with the row's "ladder step N") -> ``recompute_modules``; a cumulative ladder's MoE fusion
   steps (``_LADDER_FUSION_STEPS``) -> ``moe_permute_fusion`` / ``moe_router_fusion`` false on
   the rows before them.
10. **Attention**: ``attention=sdpa|eager|flash`` stated in ``other`` (the kernel the run's code
    takes, with its source) wins; else ``flash_attention`` true -> ``flash``, false -> ``eager``; unknown -> ``flash``
    on ``megatron-core`` (Transformer Engine's fused attention is Megatron-Core's default
    backend); on a transformers-based stack ``eager`` when the row states a transformers
    version before 4.36 or, without a version, its source id names a year-month before 2023-12
    (or ``other`` dates the runs, ``RUN_DATE_IN_OTHER``: "report first committed 2023-11-29")
    (SDPA became ``from_pretrained``'s default in transformers v4.36.0, 2023-12-11:
    ``_autoset_attn_implementation``; ``SDPA_DEFAULT_TRANSFORMERS``); else ``sdpa``.
11. **Kernels and loss**: ``compile`` stated on (``compile=true``, ``compile_model=True``, "compile on", "torch.compile",
    torchtune ladder wording) -> ``compile``; on a torchtitan row naming a commit from a window in
    which ``--compile`` left the loss eager (``TORCHTITAN_EAGER_LOSS_WINDOWS``) also
    ``compile_loss`` false (torchtitan's default compiles it); a BigScience Megatron-DeepSpeed
    fork row run before the fork's 2022-03-06 sync of Megatron-LM's fused kernels (1cb76a64;
    the run date from ``bigscience_run_date``) -> ``masked_softmax_fusion`` false where that
    fork's ``is_kernel_available`` refused the fused kernel (``bigscience_fused_softmax_before_sync``:
    keys up to 2048, and its ``get_batch_per_block(b, np, sq, sk)`` staticmethod received
    ``(sq, sk, b, np)``, so the kernel's batches per block came from the heads per rank instead
    of the key length: 541b967f megatron/model/fused_softmax.py lines 146 and 189); a bf16 row
    of that fork run before 2022-02-28 -> ``main_grads_dtype`` compute (its prequel: the
    BF16_Optimizer that accumulates gradients in fp32 was in use from the 02-28 tables on,
    ``bigscience_before_bf16_optimizer``); a row of that fork -> ``hardware.cuda_version`` 11.5
    (``BIGSCIENCE_CUDA``: its cuBLAS runs misaligned eager-attention GEMMs the pre-11.7 way);
    a PyTorch release stated in ``stack_version`` or ``other`` (``torch 2.11.0+cu130``,
    ``pytorch 2.4``, ``torch==2.1``, a nightly's ``torch nightly >= 2.2.0.dev``) ->
    ``hardware.torch_version`` MAJOR.MINOR (``stated_torch_version``); fmest's GPU probe's
    "attention=sdpa restricted to flash/efficient backends" -> ``attention=flash`` (it forces
    SDPA's flash backend, not SDPA's own choice);
    "chunked CE" -> ``loss=chunked``; ``liger=true``
    (Liger fused linear cross-entropy), a fused cross-entropy named in ``other`` or a "fused
    (chunked) LM head" (prime-rl's RL trainer: ``FusedOutputLinear`` computes the log-probs and
    entropy over 2048-column vocabulary chunks, never the full logits; ``fused_lm_head_chunk_size``
    auto = 2048 for RL, disabled for SFT: PrimeIntellect-ai/prime-rl @b798a90d
    src/prime_rl/trainer/models/layers/lm_head.py, rl/config.py, sft/config.py) ->
    ``loss=fused``; TRL's SFT ``loss_type chunked_nll`` (the ``lm_head`` and cross-entropy of
    256 valid tokens at a time under checkpointing, never the full logits: huggingface/trl
    f2cd57710 trl/trainer/sft_trainer.py ``_chunked_cross_entropy_loss``; fmest's TRL reader,
    core/fmest/configs/trl.py) -> ``loss=fused``; "activation offloading" -> ``activation_offload``. ``litgpt`` LoRA/QLoRA
    rows -> ``loss=chunked``: Lit-GPT's finetune/lora.py always computes the head and the
    cross-entropy in 128-token chunks (``lm_head_chunk_size=128``, ``chunked_cross_entropy``),
    at 8641822 and in the 2024 package alike (litgpt/finetune/lora.py, adapter.py,
    adapter_v2.py at 00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d). Full fine-tunes stay
    ``standard``: finetune/full.py runs the head unchunked (8641822: ``chunk_size=0``;
    00af8b0d: the default 128-row chunks of the cross-entropy only, over the whole logits).
12. **Stack**: the ``stack`` column is kept on the mapping (``Mapped.stack``, the breakdown's key)
    and passed as ``training.stack`` when fmest's job has that field (issue 12), detected at run
    time. Stacks outside issue 12's profiles pass as the profile they run on (``STACK_PROFILES``:
    ms-swift -> hf-trainer, its trainer is transformers'; litgpt -> lit-gpt, the 2023 Lit-GPT
    profile of stacks.toml (the resource tables name Lit-GPT commit 8641822), or -> litgpt, the
    2024+ ``litgpt`` package's profile, when the row states that package
    (``litgpt_package_2024``: a Lit-GPT/LitGPT commit its ``stack_version`` or ``other`` names
    and ``LITGPT_COMMIT_DATES`` dates 2024 or later decides; else ``config_hub``, a
    ``litgpt/<package dir>`` source path, ``litgpt finetune`` or a ``litgpt`` package version
    in ``stack_version``/``other``/``source_url``); xtuner ->
    deepspeed, mmengine on DeepSpeed). A ``litgpt`` row runs Lit-GPT's own model code, not
    transformers': where the preset's ``hidden_act`` names an activation Lit-GPT computes
    as one fused op, the row's ``model_config`` says so (``LITGPT_ACTIVATIONS``). A row whose
    ``other`` names the harness AnswerDotAI/fsdp_qlora train.py runs on the ``fsdp-qlora``
    profile (its breakdown key stays ``pytorch``); its "ddp" strategy (stated in ``other``) is
    FSDP ``no_shard`` (train.py: ``sharding_strategy == "ddp"`` -> ``ShardingStrategy.NO_SHARD``),
    and the cloud table's "CPU + activation offload" column set true adds
    ``activation_offload`` (``--use_activation_cpu_offload``: ``offload_wrapper(model)``) to
    the parameter offload of rule 6 (AnswerDotAI/fsdp_qlora e877dda train.py).
13. Rows with ``seq_len`` empty are unsupported ("sequence length not stated"). A throughput
    row whose ``other`` says its ``seq_len`` caps variable-length, unpacked samples ("seq_len is
    the cap", "variable-length samples truncated") is unsupported ("tokens per sample not
    stated"): its rate follows the mean truncated length, which the source does not give (on
    ms-swift's table a 7B LoRA at the 2048 cap would run above the A100's dense peak). The
    memory rows of such runs keep the cap: the longest samples reach it. Likewise a throughput
    row whose ``seq_len`` is only the dataset's longest sample ("first iteration runs the
    longest example", LitGPT's resource tables): Lit-GPT pads each micro-batch of random
    samples to its own longest (``get_batch`` in finetune/lora.py at Lit-GPT 8641822), so the
    time per iteration follows the mean padded length, which the source does not give (it
    publishes the longest Alpaca sample per tokenizer only). Its memory rows keep the longest:
    the first iteration runs it (``longest_seq_ix``). A throughput row whose timed step also
    writes the model's weights to disk ("writes the updated weights to disk ... inside the
    timed step": prime-rl's RL benchmark, whose filesystem weight broadcast saves the whole
    model every step) is unsupported: fmest estimates the training step, not a checkpoint write.
14. **Padding**: a row whose ``other`` states the dataset's length distribution ("token length
    M+-S") and that ``seq_len`` caps unpacked samples (rule 13's wording) runs with
    ``training.padding = longest`` and ``workload.avg_seq_len`` / ``seq_len_std`` = M / S; where
    it names ms-swift's default truncation strategy, ``training.truncation = delete`` (ms-swift
    1.x ``truncation_strategy='delete'``, swift/llm/utils/template.py at 46922151). M and S
    are the dataset's; the job states the lengths as trained (after the cap), from a lognormal
    of those two moments (``capped_lognormal_moments``). The memory model adds the allocator
    reserve of varying shapes (docs/allocator.md). Rule 13 still holds for their throughput
    rows: the trained mean from an assumed lognormal puts ms-swift's 7B LoRA at 1.8 samples/s
    against 4.3 measured (the real lengths are shorter than the assumed shape says), so a rate
    follows only a stated mean.
15. **DeepSpeed buffers**: on a ZeRO row (``zero_or_fsdp`` 1-3), ``reduce_bucket_size``,
    ``stage3_prefetch_bucket_size``, ``stage3_max_live_parameters`` and ``sub_group_size``
    stated in ``other`` (the run's DeepSpeed config, e.g. "sub_group_size 1e8") set
    ``parallelism.zero_reduce_bucket_elems`` / ``zero3_prefetch_bucket_elems`` /
    ``zero3_max_live_params`` / ``zero3_sub_group_elems`` (``ZERO_BUFFER_KEYS``); unstated keys
    keep DeepSpeed's defaults.

"""

from __future__ import annotations

import csv
import functools
import math
import os
import re
from pathlib import Path
from typing import Optional

import attrs

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = REPO_ROOT / "benchmarks" / "data" / "measured.csv"

MEGATRON_HEADS = {2304: 24, 3072: 32, 4096: 32, 6144: 48, 8192: 64, 10240: 80, 12288: 96,
                  16384: 128, 20480: 128, 25600: 160,  # Narayanan et al. 2021, Table 1
                  768: 12, 1024: 16}  # GPT-3 Small / Medium: Brown et al. 2020, Table 2.1
_CAPACITY_ONLY = {"80": "A100-SXM-80GB", "24": "RTX4090-24GB", "40": "A100-SXM-40GB",
                  "48": "L40S-48GB"}
_TORCHTUNE_LORA_TARGETS = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: Lit-GPT's module names -> the Hugging Face names fmest's presets use (rule 4).
_LITGPT_NAMES = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "projection": "o_proj"}
#: Models with fused projections: Hugging Face LoRA target names -> the fused module's name.
_FUSED_NAMES = {
    **{t: {"q_proj": "query_key_value", "k_proj": "query_key_value",
           "v_proj": "query_key_value", "o_proj": "dense"}
       for t in ("falcon", "gpt_neox", "RefinedWeb", "RefinedWebModel")},
    "phi3": {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
             "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"},
}
#: GPT-3 shapes (Brown et al. 2020, Table 2.1): name -> (layers, d_model, heads).
GPT3_SHAPES = {"175B": (96, 12288, 96), "13B": (40, 5140, 40), "6.7B": (32, 4096, 32),
               "2.7B": (32, 2560, 32), "1.3B": (24, 2048, 24)}
#: NeMo's own GPT-3 sizes (not in Brown et al.'s table): name -> (layers, hidden, heads), from
#: NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/5b.yaml and 20b.yaml @
#: 26e42fa91d9e608897ce485b4911c263a4b57008 (ffn_hidden_size 4 x hidden; NeMo 1.0's GPT defaults
#: the files keep: learned absolute positions, LayerNorm, biases, gelu, tied embeddings = GPT-2
#: blocks). Vocab: GPT2BPETokenizer's 50257 padded to a multiple of make_vocab_size_divisible_by
#: (128) x TP (NeMo megatron_base_model.py _vocab_size_with_padding @
#: 8cfedd7203462cb251a914e700e5605444277561).
NEMO_GPT3_SHAPES = {"5B": (24, 4096, 32), "20B": (44, 6144, 48)}
NEMO_GPT3_VOCAB, NEMO_VOCAB_DIVISOR = 50257, 128


def _kf_ffn(dim: int, multiplier: float = 1.3) -> int:
    """KempnerForge ``ModelConfig.computed_ffn_hidden_dim``: int(4 x dim x 2/3 x multiplier)
    rounded up to a multiple of 256 (kempnerforge/config/schema.py @ bc775fe, the benchmark's
    commit; kempnerforge/config/model.py @ 5666d0d161539998210f99f16f986b1ab76cbffe)."""
    return 256 * -(-int(4 * dim * (2 / 3) * multiplier) // 256)


#: KempnerForge's random-init Llama-3-architecture models (its MFU and MoE-EP reports): the row's
#: model name -> (the preset whose model_type and remaining keys apply, the stated shape).
#: KempnerInstitute/KempnerForge @ 5666d0d161539998210f99f16f986b1ab76cbffe:
#: configs/model/llama_{7b,13b,70b}.toml and benchmarks/mfu_scaling/mfu_bench.sh (dim, layers,
#: heads, kv_heads, vocab 128256, ffn_dim_multiplier 1.3 or ffn_hidden_dim 28672, max_seq_len
#: 4096, rope_theta 5e5, untied); benchmarks/moe_expert_parallel/moe_ep_bench.sh (dim 2048, 24
#: layers, 16/4 heads, 8 experts top-2 on every layer, softmax top-k router = one bias-free gate
#: linear as Mixtral's, experts of the dense FFN width: kempnerforge/model/transformer.py
#: build_moe(hidden_dim=config.computed_ffn_hidden_dim) @ bc775fe). RMSNorm weights only, no
#: linear biases (kempnerforge/model/attention.py, norm.py). The MoE report's "~4B total / ~1.8B
#: active" does not follow from that shape (the code builds 8 x 3 x 2048 x 7168 expert weights
#: per layer: ~9.0B total, ~2.8B active); the shape the code builds is used.
_KF_LLAMA = {"model_type": "llama", "vocab_size": 128256, "max_position_embeddings": 4096,
             "rope_theta": 500000.0, "tie_word_embeddings": False, "rms_norm_eps": 1e-05}
KEMPNERFORGE_SHAPES = {
    "llama3-arch-7b-random-init": ("meta-llama/Meta-Llama-3-8B", dict(
        _KF_LLAMA, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, intermediate_size=_kf_ffn(4096))),
    "llama3-arch-13b-random-init": ("meta-llama/Meta-Llama-3-8B", dict(
        _KF_LLAMA, hidden_size=5120, num_hidden_layers=40, num_attention_heads=40,
        num_key_value_heads=8, intermediate_size=_kf_ffn(5120))),
    "llama3-arch-70b-random-init": ("meta-llama/Meta-Llama-3-8B", dict(
        _KF_LLAMA, hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, intermediate_size=28672)),
    "llama3-moe-arch-4b-a1.8b-random-init": ("mistralai/Mixtral-8x7B-v0.1", dict(
        _KF_LLAMA, model_type="mixtral", hidden_size=2048, num_hidden_layers=24,
        num_attention_heads=16, num_key_value_heads=4, intermediate_size=_kf_ffn(2048),
        num_local_experts=8, num_experts_per_tok=2, router_aux_loss_coef=0.01,
        sliding_window=None)),
}
#: Families whose custom shapes are written in the model name -> the preset of that family.
_FAMILY_PRESETS = {"bigscience": "bigscience/bloom"}
LONG_CONTEXT = 16384

#: ``other`` wording of a seq_len that only caps variable-length, unpacked samples (rule 13)
VARIABLE_LENGTH = re.compile(r"seq_len is the cap|variable-length samples truncated", re.I)
#: ``other`` wording of a seq_len that is only the longest of variable-length samples, each
#: micro-batch padded to its own longest (rule 13: LitGPT's resource tables)
LONGEST_SAMPLE_ONLY = re.compile(r"first iteration runs the longest example", re.I)
#: ``other`` wording of a timed step that also writes the model's weights to disk (rule 13:
#: prime-rl's RL benchmark step includes the filesystem weight broadcast, safetensors of the
#: whole model every step; PrimeIntellect-ai/prime-rl @b798a90d src/prime_rl/trainer/rl/train.py)
WEIGHTS_WRITTEN_IN_STEP = re.compile(r"writes the updated weights to disk[^;]*inside the timed "
                                     r"step", re.I)
#: ``other`` wording of a stated sample-length distribution (rule 14): "token length M+-S"
LENGTH_DISTRIBUTION = re.compile(r"token length (\d+(?:\.\d+)?) ?\+-(\d+(?:\.\d+)?)", re.I)
#: AutoGPTQ's triton kernels named in ``other`` (rule 4: the kernel dequantizes inside its own
#: autograd function; "quant=GPTQ 4-bit (AutoGPTQ triton v2 kernels, ...)")
AUTOGPTQ_TRITON = re.compile(r"autogptq[^;]*triton", re.I)
#: ms-swift 1.x's default over-length handling named in ``other`` (rule 14)
MS_SWIFT_DEFAULT_TRUNCATION = re.compile(r"ms-swift default truncation strategy", re.I)
#: Hugging Face ``hidden_act`` -> the activation Lit-GPT's model code runs (rule 12): its
#: GptNeoxMLP calls ``torch.nn.functional.gelu(x, approximate=config.gelu_approximate)``, one
#: fused op, and its phi configs set ``gelu_approximate="tanh"`` (lit_gpt/model.py and
#: lit_gpt/config.py at Lit-GPT 8641822b3249bb94f068c254aa5d13decbc9f0a0), the op transformers
#: calls ``gelu_pytorch_tanh``; transformers' ``gelu_new`` (phi) is the same function written
#: as several eager ops.
LITGPT_ACTIVATIONS = {"gelu_new": "gelu_pytorch_tanh"}
#: Lit-GPT/LitGPT commits the evidence rows name, with their commit dates (the mirror
#: Lightning-AI/litgpt, ``git log -1 --format=%cd``), for rule 12's profile choice
LITGPT_COMMIT_DATES = {"8641822": "2023-10-16", "00af8b0d": "2024-09-27"}
#: a stated Lit-GPT/LitGPT commit (rule 12): "Lit-GPT commit 8641822", "litgpt@00af8b0d"
LITGPT_COMMIT = re.compile(r"lit[-_ ]?gpt\s*(?:commit\s*|@\s*)([0-9a-f]{7,40})\b", re.I)
#: wording of the 2024+ ``litgpt`` package (rule 12): its config_hub, a path inside the
#: package (``litgpt/finetune/lora.py``; not the repository URL's ``litgpt/blob/``), its CLI,
#: a pip version (the 2023 ``lit_gpt`` package had none)
LITGPT_2024_WORDING = re.compile(
    r"config_hub|litgpt finetune|(?<![\w-])litgpt/(?:finetune|model|lora|adapter|adapter_v2|"
    r"utils|config|data|pretrain|generate|scripts|api|tokenizer|args|prompts)\b|"
    r"\blitgpt\s*(?:==|v)?\s*0\.\d+\.\d+", re.I)


def litgpt_package_2024(row: dict) -> bool:
    """Rule 12: the ``litgpt`` row ran the 2024+ ``litgpt`` package (stacks.toml ``litgpt``),
    not the 2023 ``lit_gpt`` one (``lit-gpt``). A dated commit stated in ``stack_version`` or
    ``other`` decides (the URL's blob commit may be a later copy of an older table: the 2023
    resource tables are read at 4839345a, 2024-03, and ran 8641822); else the package's
    wording in ``stack_version``, ``other`` or ``source_url`` (``LITGPT_2024_WORDING``)."""
    stated = f"{row.get('stack_version') or ''} {row.get('other') or ''}"
    for commit in LITGPT_COMMIT.findall(stated):
        for known, date in LITGPT_COMMIT_DATES.items():
            if commit.lower().startswith(known) or known.startswith(commit.lower()):
                return date >= "2024"
    return bool(LITGPT_2024_WORDING.search(f"{stated} {row.get('source_url') or ''}"))


#: Stacks outside issue 12's profile names -> the profile they run on (rule 12).
STACK_PROFILES = {"ms-swift": "hf-trainer", "litgpt": "lit-gpt", "xtuner": "deepspeed",
                  "llama-factory": "hf-trainer", "axolotl": "hf-trainer",
                  "fms-fsdp": "pytorch", "nemo": "megatron-core"}

#: rule 4: the ``technique`` column's Lit-GPT Adapter runs -> fmest.job techniques
#: (``adapter-4bit``: finetune/adapter.py with ``--quantize bnb.nf4``/``bnb.nf4-dq``)
LITGPT_ADAPTERS = {"adapter": "adapter", "adapter-4bit": "qadapter",
                   "adapter-v2": "adapter_v2", "adapter-v2-4bit": "qadapter_v2"}
#: ``other`` wording of a run of Answer.AI's fsdp_qlora train.py (rule 12): its own profile
FSDP_QLORA_HARNESS = re.compile(r"harness=AnswerDotAI/fsdp_qlora train\.py", re.I)
#: ``other`` wording of a KempnerForge run (rule 12): its own profile (stacks.toml
#: ``kempnerforge``; the breakdown key stays the row's ``stack``)
KEMPNERFORGE_FRAMEWORK = re.compile(r"framework=KempnerForge\b")
#: its sharding strategy "ddp" is FSDP NO_SHARD (rule 12; train.py maps
#: --sharding_strategy ddp to ShardingStrategy.NO_SHARD)
FSDP_QLORA_NO_SHARD = re.compile(r"FSDP NO_SHARD 'ddp' strategy", re.I)
#: the cloud table's "CPU+Activation Offload" column set true (rule 12: train.py's
#: --use_cpu_offload and --use_activation_cpu_offload)
FSDP_QLORA_ACT_OFFLOAD = re.compile(r"cpu_offload=true \(CPU \+ activation offload column\)",
                                    re.I)

#: Feature tags (for the per-feature breakdown) and the rule that sets each.
FEATURES = ("LoRA", "QLoRA", "ZeRO-3/FSDP", "TP", "PP", "CP", "EP", "fp8", "offload",
            "long context >=16k")


@attrs.frozen(kw_only=True)
class Mapped:
    """One row as an fmest job (``job`` None when fmest cannot express it: ``reason`` says
    which feature is missing)."""

    job: Optional[dict]
    reason: str
    stack: str
    features: tuple[str, ...]


def csv_path() -> Path:
    return Path(os.environ.get("FMEST_MEASURED_CSV") or DEFAULT_CSV)


def load_rows(kind: Optional[str] = None) -> list[dict]:
    """Rows of the evidence CSV (optionally only those of ``kind``), as dicts of strings."""
    with open(csv_path(), newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r for r in rows if kind is None or r["kind"] == kind]


def _int(v: str, default: Optional[int] = None) -> Optional[int]:
    v = (v or "").strip()
    if not v:
        return default
    try:
        return int(float(v))
    except ValueError:
        return default


def other_kv(row: dict) -> dict[str, str]:
    """``key=value`` parts of ``other`` (keys lower-cased; first value wins)."""
    out: dict[str, str] = {}
    for part in (row.get("other") or "").split(";"):
        if "=" in part:
            key, value = part.split("=", 1)
            out.setdefault(key.strip().lower(), value.strip())
    return out


#: expert TP spelt in a row's ``source_quote`` (Megatron-LM flag or config key)
_EXPERT_TP_QUOTE = re.compile(r"expert[_-]tensor[_-]parallel[_-]size[\s=:]+(\d+)", re.I)


def _expert_tp(row: dict, kv: dict) -> Optional[int]:
    """The row's stated expert tensor-parallel size (rule 7), None when it states none."""
    for key in ("etp", "expert_tp", "expert_tensor_parallel_size"):
        value = _int(kv.get(key) or "")
        if value is not None and value >= 1:
            return value
    m = _EXPERT_TP_QUOTE.search(row.get("source_quote") or "")
    return int(m.group(1)) if m and int(m.group(1)) >= 1 else None


#: a row's ``dispatcher=`` text -> ``parallelism.moe_dispatcher`` (Megatron-Core
#: ``--moe-token-dispatcher-type alltoall`` / ``flex`` with ``--moe-flex-dispatcher-backend
#: deepep|hybridep``)
_MOE_DISPATCHERS = {"alltoall": "alltoall", "a2a": "alltoall", "deepep": "deepep",
                    "hybridep": "hybridep"}
#: EP A2A overlap stated in a row (Megatron-Core ``--overlap-moe-expert-parallel-comm``, the
#: merged 1F1B forward/backward schedule; the MoE model zoo writes "+1f1b overlap")
_MOE_A2A_OVERLAP = re.compile(r"1f1b (a2a |ep )?overlap|overlap[-_ ]moe[-_ ]expert[-_ ]parallel"
                              r"[-_ ]comm", re.I)


def _moe_settings(kv: dict, low: str) -> dict:
    """``parallelism`` MoE settings the row states (rule 7): the token dispatcher and the EP
    A2A overlap; nothing for a setting the row leaves unstated."""
    out: dict = {}
    stated = kv.get("dispatcher") or ""
    inline = re.search(r"\bdispatcher=([a-z0-9_-]+)", low)
    if not stated and inline:    # "..., dispatcher=deepep read from <config>" inside a part
        stated = inline.group(1)
    name = re.sub(r"[^a-z0-9]", "", stated.lower())
    if name in _MOE_DISPATCHERS:
        out["moe_dispatcher"] = _MOE_DISPATCHERS[name]
    if _MOE_A2A_OVERLAP.search(low) and "no 1f1b overlap" not in low:
        out["moe_a2a_overlap"] = True
    return out


#: Megatron-Core module names a row's recompute text may use -> ``training.recompute_modules``
_RECOMPUTE_NAMES = {"core attn": "core_attn", "core-attn": "core_attn",
                    "mla up-proj": "mla_up_proj", "mla-up-proj": "mla_up_proj",
                    "moe-act": "moe_act", "layernorm": "layernorm", "mlp": "mlp", "moe": "moe",
                    "shared-experts": "shared_experts"}
#: "recompute: steps 1-4 recompute mlp + mla up_proj; from step 5 on mlp + moe_act" with the
#: row's "ladder step N" (the DeepSeek-V3 GB200 optimisation ladder's text)
_LADDER_STEP = re.compile(r"ladder step (\d+)")
_LADDER_RECOMPUTE = re.compile(r"recompute: steps (\d+)-(\d+) recompute ([a-z0-9_ +-]+); from "
                               r"step (\d+) on ([a-z0-9_ +-]+)")
#: the cumulative ladder's step that switched on a Megatron-Core MoE fusion, by source
#: (NVIDIA/Megatron-LM 1d9edcf8c7c16c66ca6acc3801265b21588116a3 docs/discussions/
#: deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md, its table: step 2 "Fuse
#: torch.zeros for scaling factor allocation & Permute kernel Optimization", step 3 "Router
#: fusion"); the steps before it run without (``training.moe_permute_fusion`` /
#: ``moe_router_fusion`` False), the rows' own step names stating each
_LADDER_FUSION_STEPS = {"megatron-lm-dsv3-gb200-optimization": {"moe_permute_fusion": 2,
                                                                "moe_router_fusion": 3}}


def _recompute_names(text: str) -> tuple:
    out = []
    for part in text.replace("_", "-").split("+"):
        name = _RECOMPUTE_NAMES.get(part.strip())
        if name and name not in out:
            out.append(name)
    return tuple(out)


def _megatron_modules(source: str, low: str) -> dict:
    """Selective recompute modules and MoE fusions a Megatron-Core row states (rule 9): a
    ``recompute_modules=a,b`` item, or a ladder's per-step recompute text with the row's
    ``ladder step N``; the fusions its ladder switched on after the row's step are off."""
    out: dict = {}
    step_m = _LADDER_STEP.search(low)
    step = int(step_m.group(1)) if step_m else None
    stated = re.search(r"recompute[-_]modules=([a-z0-9_,+ -]+)", low)
    ladder = _LADDER_RECOMPUTE.search(low)
    if stated:
        modules = _recompute_names(stated.group(1).replace(",", "+"))
        if modules:
            out["recompute_modules"] = modules
    elif ladder and step is not None:
        lo, hi, first, later, rest = ladder.groups()
        if int(lo) <= step <= int(hi):
            out["recompute_modules"] = _recompute_names(first)
        elif step >= int(later):
            out["recompute_modules"] = _recompute_names(rest)
    for name, on_at in _LADDER_FUSION_STEPS.get(source, {}).items():
        if step is not None and step < on_at:
            out[name] = False
    return out


#: a row's partial-graph wording -> Megatron-Core ``CudaGraphModule`` names (rows of
#: megatron-moe-modelzoo-qwen3: "cuda graphs partial (attn, router, preprocess) per command",
#: i.e. ``--cuda-graph-scope attn moe_router moe_preprocess``)
_GRAPH_WORDS = {"attn": "attn", "attention": "attn", "router": "moe_router",
                "moe_router": "moe_router", "preprocess": "moe_preprocess",
                "moe_preprocess": "moe_preprocess", "mlp": "mlp", "moe": "moe"}
_GRAPH_PARTIAL = re.compile(r"cuda graphs partial \(([a-z_, ]+)\)")
#: a Megatron-Bridge performance table's "(tokendrop)" model label (rows' "token-drop MoE run
#: (table label)"): its scripts/performance ``--use_tokendrop`` applies
#: ``apply_moe_token_drop`` with its defaults, capacity factor 1.0 and padding to capacity
#: (NVIDIA-NeMo/Megatron-Bridge @067f987df03b8355b03192d88d70f1709fedf51a
#: src/megatron/bridge/training/utils/moe_token_drop.py, scripts/performance/utils/overrides.py)
_TOKENDROP_LABEL = re.compile(r"\(tokendrop\)|token-drop moe run \(table label\)")


def _megatron_graphs_and_drop(source: str, low: str) -> dict:
    """CUDA-graph scope and token drop a Megatron-Core row states (rule 9): the partial graph
    list it names (``_GRAPH_PARTIAL``), a Megatron-Bridge "(tokendrop)" label
    (``_TOKENDROP_LABEL``). A row saying only "CUDA Graphs" (a ladder step) names no scope and
    is left without graphs."""
    out: dict = {}
    m = _GRAPH_PARTIAL.search(low)
    if m:
        names = tuple(dict.fromkeys(_GRAPH_WORDS[w.strip()] for w in m.group(1).split(",")
                                    if w.strip() in _GRAPH_WORDS))
        if names:
            out["cuda_graph_scope"] = names
    if source.startswith("megatron-bridge-perf") and _TOKENDROP_LABEL.search(low):
        out["moe_expert_capacity_factor"] = 1.0
        out["moe_pad_to_capacity"] = True
    return out


#: transformers release whose ``from_pretrained`` picks SDPA by default
#: (``PreTrainedModel._autoset_attn_implementation`` / ``_check_and_enable_sdpa``, added in
#: huggingface/transformers v4.36.0, released 2023-12-11; before it, Llama-family modeling code
#: ran its eager attention unless flash-attn was asked for)
SDPA_DEFAULT_TRANSFORMERS = (4, 36)
SDPA_DEFAULT_DATE = (2023, 12)
#: a date the row's ``other`` gives the runs by (a bare-year source id cannot place them on
#: either side of ``SDPA_DEFAULT_DATE``): "report first committed 2023-11-29 (...)"
RUN_DATE_IN_OTHER = re.compile(r"\b(?:first committed|published|dated|run|measured)(?: on)? "
                               r"(20\d\d)-(0[1-9]|1[0-2])-\d\d")
#: stacks whose attention is transformers' modeling code (rule 10)
_TRANSFORMERS_STACKS = ("hf-trainer", "ms-swift", "trl", "axolotl", "llama-factory")


def _modules_to_save_in(other: str) -> list[str]:
    """Rule 4: the modules a row says are trained in full beside LoRA (``modules_to_save`` in
    ``other``, with the module names it gives: fmest.job.MODULES_TO_SAVE's aliases)."""
    if "modules_to_save" not in other.lower():
        return []
    from fmest.job import module_to_save_name

    words = re.findall(r"[a-z_.]+", other.lower())
    found = [canon for canon in map(module_to_save_name, words) if canon]
    return list(dict.fromkeys(found))


def _unknown_attention(row: dict, stack: str) -> str:
    """Rule 10 for ``flash_attention`` unknown on a transformers-based stack: ``eager`` when the
    row states a transformers version before 4.36 (``stack_version`` or ``other``), or, with
    no version, when its source names a year-month before 2023-12 (``...-2023-10``) or its
    ``other`` dates the runs before it (``RUN_DATE_IN_OTHER``); else
    ``sdpa``. A bare year is not enough (2023 holds both)."""
    if stack not in _TRANSFORMERS_STACKS:
        return "sdpa"
    text = f"{row.get('stack_version') or ''} {row.get('other') or ''}"
    version = re.search(r"transformers[ =v]*(\d+)\.(\d+)", text, re.IGNORECASE)
    if version:
        stated = (int(version.group(1)), int(version.group(2)))
        return "eager" if stated < SDPA_DEFAULT_TRANSFORMERS else "sdpa"
    date = re.search(r"(20\d\d)-(0[1-9]|1[0-2])(?!\d)", row.get("source") or "") \
        or RUN_DATE_IN_OTHER.search(row.get("other") or "")
    if date and (int(date.group(1)), int(date.group(2))) < SDPA_DEFAULT_DATE:
        return "eager"
    return "sdpa"


def _true(text: Optional[str]) -> bool:
    return (text or "").strip().lower().split(" ")[0] in ("true", "1", "yes", "on")


@functools.lru_cache(maxsize=None)
def _preset(name: str) -> Optional[str]:
    from fmest.models.presets import find_preset

    paren = re.search(r"\(([^)]*)\)", name)
    cands = [name, name.split(" (")[0].strip()]
    if paren:  # "llama2-arch-34b (CodeLlama-34B shape)"
        inner = re.sub(r"\s*shape$", "", paren.group(1).strip())
        cands += [inner, inner + "-hf"]
    cands += [re.sub(r"-(gptq|awq|int4|int8)$", "", c, flags=re.I) for c in cands]
    cands += [re.sub(r"-(instruct|chat|hf|it)(-v[\d.]+)?$", "", c, flags=re.I) for c in cands]
    cands += [re.sub(r"-(instruct|chat|it)", "", c, flags=re.I) for c in cands]
    for cand in cands:
        hit = find_preset(cand)
        if hit:
            return hit
    return None


#: Megatron-LM's default dropout in 2021, which the PTD-P runs (Narayanan et al. 2021) do not
#: override: ``--attention-dropout`` and ``--hidden-dropout`` default 0.1 (NVIDIA/Megatron-LM
#: a8d172b31e921d0ad0889660443846098496d696 megatron/arguments.py lines 337-340), as GPT-2
#: config keys (attention probabilities, residual branches)
MEGATRON_2021_DROPOUT = {"attn_pdrop": 0.1, "resid_pdrop": 0.1}
#: BigScience tr11 (the prequel's runs): "The default Megatron-LM dropout settings are
#: inherited: --attention-dropout 0.1 --hidden-dropout default=0.1"
#: (bigscience-workshop/bigscience @59a90eec train/tr11-176B-ml/README.md)
BIGSCIENCE_TR11_DROPOUT = {"attention_dropout": 0.1, "hidden_dropout": 0.1}


def _model(row, kv) -> tuple[Optional[str], Optional[dict], str]:
    raw = row["model"].strip()
    hit = _preset(raw)
    if hit:
        return hit, None, ""
    other = row.get("other", "")
    if raw.startswith("GPT-3-style"):
        hidden = int(re.search(r"h=(\d+)", raw).group(1))
        layers = int(re.search(r"L=(\d+)", raw + " " + other).group(1))
        return f"megatron-gpt-h{hidden}", {
            "model_type": "gpt2", "n_embd": hidden, "n_layer": layers,
            "n_head": MEGATRON_HEADS.get(hidden, hidden // 128), "vocab_size": 51200,
            "n_positions": max(2048, _int(row["seq_len"], 2048)), "tie_word_embeddings": True,
            **MEGATRON_2021_DROPOUT}, ""
    gpt3 = re.match(r"GPT-?3[- ]?(\d+(\.\d+)?B)\b", raw)
    if gpt3 and gpt3.group(1) in GPT3_SHAPES:
        layers, hidden, heads = GPT3_SHAPES[gpt3.group(1)]
        return f"gpt3-{gpt3.group(1).lower()}", {
            "model_type": "gpt2", "n_embd": hidden, "n_layer": layers, "n_head": heads,
            "vocab_size": 51200, "n_positions": max(2048, _int(row["seq_len"], 2048)),
            "tie_word_embeddings": True}, ""
    if gpt3 and "nemo" in raw.lower() and gpt3.group(1) in NEMO_GPT3_SHAPES:
        layers, hidden, heads = NEMO_GPT3_SHAPES[gpt3.group(1)]
        mult = NEMO_VOCAB_DIVISOR * max(1, _int(row.get("tp", ""), 1) or 1)
        return f"nemo-gpt3-{gpt3.group(1).lower()}", {
            "model_type": "gpt2", "n_embd": hidden, "n_layer": layers, "n_head": heads,
            "n_inner": 4 * hidden, "vocab_size": -(-NEMO_GPT3_VOCAB // mult) * mult,
            "n_positions": max(2048, _int(row["seq_len"], 2048) or 2048),
            "tie_word_embeddings": True}, ""
    if raw in KEMPNERFORGE_SHAPES:
        from fmest.models.presets import preset_data

        base, dims = KEMPNERFORGE_SHAPES[raw]
        return raw, dict(preset_data(base)["config"], **dims), ""
    family = raw.split(" ")[0].lower()
    shape = {k: int(v) for k, v in re.findall(r"(n_layers|hidden|n_heads)=(\d+)", raw)}
    if family in _FAMILY_PRESETS and len(shape) == 3:
        from fmest.models.presets import preset_data

        cfg = dict(preset_data(_FAMILY_PRESETS[family])["config"])
        cfg.update(n_layer=shape["n_layers"], n_embed=shape["hidden"],
                   num_attention_heads=shape["n_heads"])
        if family == "bigscience":
            cfg.update(BIGSCIENCE_TR11_DROPOUT)
        return f"{family}-custom-l{shape['n_layers']}-h{shape['hidden']}", cfg, ""
    if raw.startswith("MPT-") and re.search(r"d_model (\d+)", other):
        from fmest.models.presets import preset_data

        cfg = dict(preset_data("mosaicml/mpt-7b")["config"])
        cfg.update(d_model=int(re.search(r"d_model (\d+)", other).group(1)),
                   n_layers=int(re.search(r"(\d+) layers", other).group(1)),
                   n_heads=int(re.search(r"(\d+) heads", other).group(1)),
                   vocab_size=int(re.search(r"vocab (\d+)", other).group(1)),
                   max_seq_len=_int(row["seq_len"], 2048))
        return raw.split(" ")[0], cfg, ""
    return None, None, f"no preset for model {raw!r} (architecture config needed)"


def _litgpt_model_config(model: str) -> Optional[dict]:
    """Rule 12: the preset's config with the activation Lit-GPT's model code runs
    (``LITGPT_ACTIVATIONS``), or None when the preset's already is."""
    from fmest.models.presets import find_preset, preset_data

    if not find_preset(model):
        return None
    cfg = dict(preset_data(model).get("config", {}))
    act = cfg.get("hidden_act")
    if act not in LITGPT_ACTIVATIONS:
        return None
    cfg["hidden_act"] = LITGPT_ACTIVATIONS[act]
    return cfg


_OFFLOAD = re.compile(r"(?<!no )(?<!without )(cpu[ _-]offload|offload(?:ed|ing)? to (?:the )?cpu"
                      r"|cpu optimizer offload|optimizer (?:states? )?offload|offload=)"
                      r"([^;]{0,60})")
#: an offload of the activation checkpoints (rule 9's ``activation_offload``), not of model
#: states: "activation-checkpoint offload to CPU", ``activation_checkpoint_cpu_offload``
_ACTIVATION_OFFLOAD_BEFORE = re.compile(r"(activation|checkpoint)[\w -]{0,3}$")


def _cpu_offload(low: str, fsdp: bool = False) -> str:
    """Rule 6: ``params`` when an offload named moves parameters or weights (always under
    FSDP, whose ``CPUOffload`` has only ``offload_params``), ``optimizer`` otherwise, "" when
    none is stated (or it is negated / false). An offload of the activation checkpoints is
    not a model-state offload (rule 9)."""
    found = ""
    for match in _OFFLOAD.finditer(low):
        tail = match.group(2)
        if re.match(r"\W*(false|none|no\b|0\b)", tail):
            continue
        before = low[max(0, match.start() - 24):match.start()]
        if _ACTIVATION_OFFLOAD_BEFORE.search(before):
            continue
        if fsdp or "param" in tail or "param" in before or "weights" in before:
            return "params"
        found = "optimizer"
    return found


def _fused_names(model: str, model_config: Optional[dict]) -> dict[str, str]:
    """Rule 4: HF target name -> fused module name on models with fused projections."""
    from fmest.models.presets import find_preset, preset_data

    cfg = model_config or (preset_data(model).get("config", {}) if find_preset(model) else {})
    return _FUSED_NAMES.get(cfg.get("model_type", ""), {})


def _present(model: str, names: list) -> list:
    """Rule 4: ``X`` -> ``X_proj`` when only that is a module of the preset; names the
    preset lacks are dropped while others match (PEFT skips unmatched targets)."""
    from fmest.models.presets import find_preset, load_preset

    if not find_preset(model):
        return names
    known = set(load_preset(model).linear_names())
    names = [n if n in known or n + "_proj" not in known else n + "_proj" for n in names]
    kept = [n for n in names if n in known]
    return kept or names


#: MLP linears by their module names across the presets' architectures (Llama gate/up/down,
#: Falcon/GPT-NeoX dense_h_to_4h/dense_4h_to_h, GPT-2 c_fc, Phi fc1/fc2, Phi-3 gate_up_proj)
_MLP_LINEARS = ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "dense_h_to_4h",
                "dense_4h_to_h", "c_fc", "fc1", "fc2", "w1", "w2", "w3")


def _mlp_names(model: str) -> list:
    """Rule 4: Lit-GPT's ``mlp`` target (``lora_mlp``: every linear of the MLP) -> the preset's
    MLP linears."""
    from fmest.models.presets import find_preset, load_preset

    if not find_preset(model):
        return ["gate_proj", "up_proj", "down_proj"]
    known = set(load_preset(model).linear_names())
    return [n for n in _MLP_LINEARS if n in known]


#: ms-swift 1.x's ``--lora_target_modules DEFAULT`` (its default): ``get_default_lora_target_modules``
#: reads the model's registered ``LoRATM`` entry, the attention's q/k/v projection(s) (modelscope/
#: ms-swift @46922151e06cdfc110882e182757674f12352f2c, the benchmark doc's commit:
#: swift/llm/utils/model.py ``LoRATM`` lines 366-372 -- ``qwen = ['c_attn']``, ``chatglm =
#: ['query_key_value']``, ``baichuan = ['W_pack']``, ``llama2 = ['q_proj', 'k_proj', 'v_proj']``
#: --, and the registrations of qwen_*_chat (LoRATM.qwen), chatglm3_6b, baichuan2_*_chat,
#: yi_*_chat and openbuddy_zephyr_7b_chat (LoRATM.llama2); argument.py
#: ``_prepare_target_modules``), keyed by the preset's (upstream) model type.
MS_SWIFT_DEFAULT_TARGETS = {"qwen": ("c_attn",), "chatglm": ("query_key_value",),
                            "baichuan": ("W_pack",)}
MS_SWIFT_DEFAULT_LLAMA2 = ("q_proj", "k_proj", "v_proj")


def _ms_swift_default_targets(model: str) -> tuple[str, ...]:
    """Rule 4: the modules ms-swift 1.x's ``DEFAULT`` LoRA targets adapt on ``model``."""
    from fmest.models.presets import find_preset, preset_data

    if not find_preset(model):
        return MS_SWIFT_DEFAULT_LLAMA2
    d = preset_data(model)
    mt = (d.get("upstream_config") or d.get("config") or {}).get("model_type", "")
    return MS_SWIFT_DEFAULT_TARGETS.get(mt, MS_SWIFT_DEFAULT_LLAMA2)



@functools.lru_cache(maxsize=None)
def _gpu_names() -> dict[str, str]:
    from fmest.gpus import shipped_gpus

    names = {}
    for spec in shipped_gpus():
        for alias in (spec.name,) + tuple(spec.aliases):
            names[alias.lower()] = spec.name
    return names


def gpu_name(published: str) -> Optional[str]:
    """The fmest GPU table name for a published GPU name (rule 2), or None."""
    text = published.strip()
    names = _gpu_names()
    base = text.split(" (")[0]
    for cand in (text, base, text.replace("RTXA6000", "RTX-A6000"),
                 re.sub(r"-\d+GB$", "", base)):
        if cand.lower() in names:
            return names[cand.lower()]
    m = re.match(r"^(\d+)GB GPU", text)
    if m:
        return _CAPACITY_ONLY.get(m.group(1))
    low = text.lower().replace("_", "-")
    if "a6000ada" in re.sub(r"[^a-z0-9]", "", low):
        return "RTX6000-ADA-48GB"
    for key, name in (("h100-sxm-96", "H100-SXM-96GB"), ("h100-96", "H100-SXM-96GB"),
                      ("a100-pcie-80", "A100-PCIE-80GB"), ("a100-pcie-40", "A100-PCIE-40GB"),
                      ("a100-sxm-40", "A100-SXM-40GB"), ("a100-sxm-80", "A100-SXM-80GB"),
                      ("h100-pcie", "H100-PCIE-80GB"), ("h100-sxm", "H100-SXM-80GB"),
                      ("h200", "H200-SXM-141GB"), ("gh200", "H200-SXM-141GB"),
                      ("b200", "B200-SXM-180GB"), ("v100-sxm-32", "V100-SXM2-32GB"),
                      ("v100-sxm-16", "V100-SXM2-16GB"), ("gaudi2", "GAUDI2-96GB"),
                      ("mi250x", "MI250X-128GB"), ("mi300x", "MI300X-192GB")):
        if key in low:
            return name
    return None


def gpu_family(row: dict) -> str:
    """GPU family for the breakdown (A100, H100, H200, L40S, consumer RTX, ...)."""
    g = row["gpu"].upper()
    for fam in ("GH200", "H200", "H100", "A100", "B200", "L40S", "L4", "A10G", "V100", "T4",
                "MI300X", "MI250X", "GAUDI"):
        if fam in g:
            return fam
    if "RTX" in g or "A6000" in g or "A5000" in g:
        return "RTX/workstation"
    if "NOT STATED" in g or "GB GPU" in g:
        return "not stated"
    return "other"


def features(row: dict) -> tuple[str, ...]:
    """The row's feature tags (``FEATURES``), read from the row's columns."""
    tags = []
    tech = (row.get("technique") or "").lower()
    zf = (row.get("zero_or_fsdp") or "").lower()
    low = (row.get("other") or "").lower()
    if tech == "lora":
        tags.append("LoRA")
    if tech in ("qlora", "gptq-lora"):
        tags.append("QLoRA")
    if zf in ("3", "fsdp", "fsdp-hybrid"):
        tags.append("ZeRO-3/FSDP")
    for name in ("tp", "pp", "cp", "ep"):
        if (_int(row.get(name), 1) or 1) > 1:
            tags.append(name.upper())
    if "fp8" in row.get("dtype", "") or "float8" in row.get("dtype", ""):
        tags.append("fp8")
    if row.get("activation_checkpointing") == "offload" or _cpu_offload(low) or \
            re.search(r"(?<!no )activation offloading(?!\W*false)|offloads activations", low):
        tags.append("offload")
    if (_int(row.get("seq_len"), 0) or 0) >= LONG_CONTEXT:
        tags.append("long context >=16k")
    return tuple(tags)


def _foak_fused_kernels(framework_config: str, model: str) -> tuple[str, ...]:
    """The chains fms-acceleration's fused-ops-and-kernels plugin fuses in a row whose
    ``framework_config`` names ``foak`` (rule 4): its benchmark configurations turn on
    ``fast_loss``, ``fast_rms_layernorm`` and ``fast_rope_embeddings`` (Unsloth's Triton
    cross-entropy, RMSNorm and RoPE kernels), and with a quantized base (``accelerated-peft-
    bnb-foak``, ``accelerated-peft-autogptq-foak``) ``fused_lora`` (Unsloth's fused LoRA
    q/k/v/o: the rows' targets); GPT-BigCode gets the cross-entropy only (its model file has
    no other rule). foundation-model-stack/fms-acceleration
    876e2ed6fc4e966785e3f4315f5ee3cdf8e3d097 sample-configurations/foak-fast-kernels-sample-
    configuration.yaml, accelerated-peft-bnb-nf4-foak-sample-configuration.yaml,
    accelerated-peft-autogptq-foak-sample-configuration.yaml; plugins/fused-ops-and-kernels/
    src/fms_acceleration_foak/models/{llama,mistral,mixtral,gpt_bigcode}.py."""
    config = framework_config.strip().lower()
    if "foak" not in config:
        return ()
    if "bigcode" in model.lower():
        return ("loss",)
    fused_lora = config.startswith("accelerated-peft-")
    return ("norm", "rope", "loss") + (("lora",) if fused_lora else ())


#: CUDA toolkit of the BigScience tr11 runs (train/tr11-176B-ml/README.md @59a90eec:
#: "PyTorch-1.11 w/ CUDA-11.5")
BIGSCIENCE_CUDA = "11.5"


#: rule 11: the PyTorch release a row states (``torch 2.11.0+cu130``, ``pytorch 2.4``,
#: ``torch==2.1``, or a nightly's stated line ``torch nightly >= 2.2.0.dev``)
TORCH_STATED = re.compile(r"\b(?:py)?torch(?: nightly >=|==| v?)\s*(\d\.\d{1,2})\b")


def stated_torch_version(row: dict) -> Optional[str]:
    """Rule 11: ``hardware.torch_version`` (MAJOR.MINOR) from ``stack_version`` or ``other``."""
    for text in (row.get("stack_version") or "", row.get("other") or ""):
        m = TORCH_STATED.search(text.lower())
        if m:
            return m.group(1)
    return None


@functools.lru_cache(maxsize=None)
def _hardware_fields() -> frozenset:
    """The fields fmest's ``Hardware`` has (the mapper sets only those)."""
    from fmest.job import Hardware

    return frozenset(f.name for f in attrs.fields(Hardware))


@functools.lru_cache(maxsize=1)
def _training_fields() -> frozenset:
    from fmest.job import Training

    return frozenset(f.name for f in attrs.fields(Training))


def map_row(row: dict) -> Mapped:
    """The fmest job for one row, or why not (module doc, rules 1-15)."""
    stack = (row.get("stack") or "").strip().lower()
    tags = features(row)
    try:
        job, why = _job(row, stack)
    except Exception as exc:  # a malformed row is reported, not fatal
        job, why = None, f"{type(exc).__name__}: {exc}"
    return Mapped(job=job, reason=why, stack=stack or "(empty)", features=tags)


#: DeepSpeed ``zero_optimization`` keys a row may state in ``other`` (rule 15) -> the job's
#: parallelism fields (fmest.job.Parallelism; DeepSpeed's defaults are the fields' own)
ZERO_BUFFER_KEYS = {"reduce_bucket_size": "zero_reduce_bucket_elems",
                    "stage3_prefetch_bucket_size": "zero3_prefetch_bucket_elems",
                    "stage3_max_live_parameters": "zero3_max_live_params",
                    "sub_group_size": "zero3_sub_group_elems"}


def _zero_buffer_sizes(other: str, stage: int) -> dict:
    """Rule 15: ``reduce_bucket_size``, ``stage3_prefetch_bucket_size``,
    ``stage3_max_live_parameters`` and ``sub_group_size`` stated in ``other``
    ("stage3_max_live_parameters 1e8", "reduce_bucket_size=5e8") -> the job's ``zero_*``
    fields (the stage-3 keys only at stage 3); unstated keys keep DeepSpeed's defaults."""
    out: dict = {}
    for key, field in ZERO_BUFFER_KEYS.items():
        if (key.startswith("stage3_") or key == "sub_group_size") and stage != 3:
            continue
        m = re.search(re.escape(key) + r"\s*[=:]?\s*\"?([0-9][0-9.]*(?:e[0-9]+)?)", other, re.I)
        if m:
            out[field] = int(float(m.group(1)))
    return out


#: fp32 matmuls stated to run as TF32 (rule 3): "TF32 matmuls", torch's
#: ``set_float32_matmul_precision('high'|'medium')``, ``allow_tf32 = True``, ``tf32=True``
_TF32_STATED = re.compile(r"tf32 matmul|set_float32_matmul_precision\(\s*['\"](?:high|medium)"
                          r"|allow_tf32\s*=\s*true|\btf32\s*[=:]\s*true", re.I)


#: a stated virtual-pipeline size (rule 8): "vp=5", "VP=8" in a copied table, "-vp 12" on a
#: launcher's command line; "vp=NA" / "VP=-" state none
_VP_STATED = re.compile(r"(?<![a-z_])vp\s*[=:]?\s*(\d+)\b", re.I)


def _stated_vp(other: str) -> int:
    """Rule 8: the virtual pipeline stages ``other`` states (:data:`_VP_STATED`), 1 if none."""
    m = _VP_STATED.search(other)
    return max(1, int(m.group(1))) if m else 1


#: torchtitan commits the evidence rows name, with their commit dates (the mirror
#: pytorch/torchtitan, ``git log -1 --format=%cd``), for rule 11's compiled loss
TORCHTITAN_COMMIT_DATES = {"9dec370": "2024-12-26", "6a6f755d": "2024-12-03",
                           "83c879f1": "2024-03-28", "eddce126": "2025-01-23",
                           "069bae286": "2025-02-27", "820504e": "2025-06-13"}
#: when torchtitan's ``--compile`` left the loss eager: before e10cb9494 (2024-10-22, "compile
#: it if compiling") and from e8977b007 (2024-12-18, "turning off compile on loss function")
#: until bbb1b616e (2025-04-02, ``build_cross_entropy_loss`` compiles it again)
TORCHTITAN_EAGER_LOSS_WINDOWS = (("0000-00-00", "2024-10-22"), ("2024-12-18", "2025-04-02"))


def bigscience_run_date(row: dict) -> Optional[tuple[int, int, int]]:
    """(year, month, day) of the run: the year in ``stack_version`` and a trailing ``| MM-DD |``
    table note in ``source_quote`` (the BigScience chronicles date every benchmark row so)."""
    year = re.search(r"\b(20\d\d)\b", row.get("stack_version") or "")
    md = re.search(r"\|\s*(\d\d)-(\d\d)\b[^|]*\|\s*$", (row.get("source_quote") or "").strip())
    if not year or not md:
        return None
    return int(year.group(1)), int(md.group(1)), int(md.group(2))


#: the BigScience prequel's "Rebalancing layers" section (02-28 tables): "from now on the testing
#: is happening with BF16 optimizer that was just written to accumulate gradients in fp32 ...
#: compared to fp16 which grad accumulates in fp16. The additional memory usage is 4bytes x
#: params" (bigscience-workshop/bigscience @59a90eec train/tr11-176B-ml/chronicles-prequel.md)
BIGSCIENCE_BF16_OPTIMIZER = (2022, 2, 28)


def bigscience_before_bf16_optimizer(row: dict) -> bool:
    """Rule 11: a BigScience fork bf16 row run before DeepSpeed's BF16_Optimizer (fp32
    gradient accumulation) was in use (``BIGSCIENCE_BF16_OPTIMIZER``): its ZeRO-1 optimizer
    accumulated gradients in bf16, as fp16 runs do in fp16 (``main_grads_dtype`` compute)."""
    text = f"{row.get('stack_version') or ''} {row.get('other') or ''}".lower()
    date = bigscience_run_date(row)
    return "bigscience" in text and date is not None and date < BIGSCIENCE_BF16_OPTIMIZER


#: bigscience-workshop/Megatron-DeepSpeed 1cb76a64 (2022-03-06), "sync the whole Meg-LM
#: fused_kernels sub-tree": fixed the argument order of FusedScaleMaskSoftmax.get_batch_per_block
#: and raised the key-length limit of the fused softmax from 2048 to 4096 (later)
BIGSCIENCE_FUSED_KERNEL_SYNC = (2022, 3, 6)


def bigscience_fused_softmax_before_sync(row: dict, training: dict, par: dict,
                                         model_config: Optional[dict]) -> bool:
    """Rule 11: whether the BigScience fork ran its fused causal softmax kernel for the row.
    From 1cb76a64 on (or with no run date, or not that fork): True (fmest's own rule,
    fmest.physics.megatron_softmax, applies). Before it, the fork's ``is_kernel_available``
    (541b967f megatron/model/fused_softmax.py) required ``16 < sq <= 2048``, ``sk % 4 == 0``,
    ``b * np % 4 == 0`` and, causal, ``b * np`` a multiple of ``get_batch_per_block(sq, sk,
    b, np)``, whose staticmethod took ``(b, np, sq, sk)`` and passed ``(sq, sk, b, np)`` to
    the CUDA helper: the helper's key length was the heads per rank ``np``."""
    text = f"{row.get('stack_version') or ''} {row.get('other') or ''}".lower()
    date = bigscience_run_date(row)
    if "bigscience" not in text or date is None or date >= BIGSCIENCE_FUSED_KERNEL_SYNC:
        return True
    from fmest.physics.megatron_softmax import batches_per_block

    heads = int((model_config or {}).get("num_attention_heads") or 0)
    tp = int(par.get("tp", 1))
    if not heads or heads % tp:
        return True
    b, np_, s = int(training["micro_batch_size"]), heads // tp, int(training["seq_len"])
    if not (16 < s <= 2048 and s % 4 == 0 and (b * np_) % 4 == 0):
        return False
    return (b * np_) % batches_per_block(np_) == 0


def _torchtitan_eager_loss(low: str) -> bool:
    """Rule 11: a torchtitan row naming a torchtitan commit in ``other`` or ``stack_version``
    (``TORCHTITAN_COMMIT_DATES``, as ``torchtitan @<hash>``, ``torchtrain @<hash>`` (its first
    name) or the hash alone: the rule runs on torchtitan rows only) of a window in which ``--compile`` did not compile the loss
    (``TORCHTITAN_EAGER_LOSS_WINDOWS``) -> ``compile_loss`` false; a row without a dated
    commit keeps the stack's default (compiled)."""
    for commit, date in TORCHTITAN_COMMIT_DATES.items():
        if re.search(rf"\b{commit}", low):
            return any(lo <= date < hi for lo, hi in TORCHTITAN_EAGER_LOSS_WINDOWS)
    return False


def _fraction_of(text: str) -> float:
    """A stated checkpoint fraction: ``0.5`` or ``1/3`` (fms-fsdp's ``selective_checkpointing``
    takes either, fms_fsdp/policies/ac_handler.py)."""
    num, _, den = text.strip().partition("/")
    return float(num) / float(den) if den else float(num)


def _job(row: dict, stack: str) -> tuple[Optional[dict], str]:
    kv = other_kv(row)
    other = row.get("other", "")
    low = other.lower()
    tech = (row["technique"] or "full").strip().lower()
    gptq = tech == "gptq-lora"
    if gptq:  # rule 4: a 4-bit GPTQ base holds NF4-with-double-quantization's bytes
        tech = "qlora"
    # rule 4: Lit-GPT's finetune/adapter.py, adapter_v2.py (4-bit: --quantize bnb.nf4*)
    tech = LITGPT_ADAPTERS.get(tech, tech)
    if tech not in ("full", "lora", "qlora") + tuple(LITGPT_ADAPTERS.values()):
        return None, f"technique {tech!r}"  # rule 4 first: it names the missing feature
    if row["kind"] == "throughput" and VARIABLE_LENGTH.search(other):  # rule 13
        return None, "tokens per sample not stated (seq_len caps variable-length samples)"
    if row["kind"] == "throughput" and WEIGHTS_WRITTEN_IN_STEP.search(other):  # rule 13
        return None, ("the timed step includes writing the model's weights to disk, which "
                      "fmest does not estimate")
    if row["kind"] == "throughput" and LONGEST_SAMPLE_ONLY.search(other):  # rule 13
        return None, ("tokens per iteration not stated (each micro-batch is padded to its own "
                      "longest sample; only the dataset's longest is published)")
    model, model_config, why = _model(row, kv)
    if model is None:
        return None, why
    if stack == "litgpt" and model_config is None:  # rule 12: Lit-GPT's own model code
        model_config = _litgpt_model_config(model)
    gpu = gpu_name(row["gpu"])
    if gpu is None:
        return None, f"no GPU in fmest's table for {row['gpu']!r}"
    training: dict = {}
    # rule 3
    dtype_raw = (row["dtype"] or "bf16").strip().lower()
    if "float8" in dtype_raw or dtype_raw.startswith("fp8"):
        training["dtype"] = "fp8"
    else:
        training["dtype"] = next((d for d in ("fp16", "fp32", "bf16") if dtype_raw.startswith(d)),
                                 "bf16")
    if training["dtype"] == "fp32" and _TF32_STATED.search(row["other"] or ""):
        training["tf32"] = True
    precision = kv.get("precision", "").split(" ")[0].lower()
    precision = {"bf16-true": "pure", "16-true": "pure", "bf16-mixed": "amp",
                 "16-mixed": "amp"}.get(precision, precision)
    fsdp_upcast = stack == "hf-trainer" and (row["zero_or_fsdp"] or "").startswith("fsdp") \
        and re.search(r"trainer (bf16|fp16)=true", other, re.I)
    if precision in ("pure", "amp", "master"):
        training["precision"] = precision
    elif tech == "full" and fsdp_upcast:
        training["precision"] = "amp"
    elif re.search(r"pure bf16", other, re.I) or (
            tech == "full" and (re.search(r"torch_dtype=(bfloat16|float16)", other)
                                or stack == "torchtune")):
        training["precision"] = "pure"
    elif stack == "megatron-core" and training["dtype"] == "fp16":
        training["precision"] = "master"
    # rule 4
    training["technique"] = tech
    if tech in LITGPT_ADAPTERS.values():
        if tech.startswith("q") and re.search(r"nf4(?!-dq)\b", kv.get("quantization", "").lower()):
            training["double_quantization"] = False  # Lit-GPT's bnb.nf4 vs bnb.nf4-dq
    elif tech != "full":
        training["lora_rank"] = _int(row["lora_rank"], 16)
        quant = kv.get("quantization", "").lower()
        if tech == "qlora" and not gptq and re.search(r"nf4(?!-dq)\b", quant):
            training["double_quantization"] = False  # Lit-GPT's bnb.nf4 vs bnb.nf4-dq
        bits = re.search(r"\bquant bits=(\d+)", low)
        if tech == "qlora" and bits and int(bits.group(1)) in (4, 8):
            training["quantization_bits"] = int(bits.group(1))  # rule 4: GPTQ int8 rows
        if gptq and not AUTOGPTQ_TRITON.search(low):
            training["quantization_method"] = "gptq"  # rule 4, when the job has the field
        inline = re.search(r"\btargets=([\w.+|,-]+)", other)
        targets = kv.get("targets") or kv.get("lora_targets") or (
            inline.group(1) if inline else "")
        if stack == "ms-swift" and targets.strip().lower() == "default":
            targets = "+".join(_ms_swift_default_targets(model))   # rule 4: ms-swift DEFAULT
        if targets and "all" not in targets.lower() and targets.lower() != "default":
            names = [_LITGPT_NAMES.get(t.strip(), t.strip())
                     for t in re.split(r"[+,| ]", targets.split(" (")[0]) if t.strip()]
            names = list(dict.fromkeys(names))
            fused = _fused_names(model, model_config)
            names = sorted({fused.get(n, n) for n in names}) if fused else names
            if "mlp" in names:
                names = [n for n in names if n != "mlp"] + _mlp_names(model)
            training["lora_target_modules"] = _present(model, names)
        elif stack == "unsloth" or "all linear" in low or "all-linear" in low \
                or row["id"].startswith("dev-unsloth") or "all" in targets.lower():
            # a model without the Llama names (Qwen v1's c_attn/c_proj/w1/w2): PEFT's
            # "all-linear", every linear but the output head
            from fmest.models.presets import find_preset, load_preset

            training["lora_target_modules"] = list(_ALL_LINEAR) \
                if not find_preset(model) or set(_ALL_LINEAR) <= set(
                    load_preset(model).linear_names()) \
                else ["all-linear"]
        elif stack == "torchtune":
            training["lora_target_modules"] = list(_TORCHTUNE_LORA_TARGETS)
        elif _fused_names(model, model_config):
            fused = _fused_names(model, model_config)
            training["lora_target_modules"] = sorted({fused.get(n, n)
                                                      for n in ("q_proj", "v_proj")})
        saved = _modules_to_save_in(other)
        if saved and "lora_modules_to_save" in _training_fields():
            training["lora_modules_to_save"] = saved  # rule 4: modules trained in full
        dropout = re.search(r"\blora\b[^;]*?\bdropout=([0-9.]+)", other)
        if dropout and "lora_dropout" in _training_fields():
            training["lora_dropout"] = float(dropout.group(1))  # rule 4: stated dropout
        if (tech == "qlora" and kv.get("framework_config", "").startswith("baseline-peft-bnb")
                and (row.get("zero_or_fsdp") or "none").lower() in ("none", "0", "")
                and "kbit_prep" in _training_fields()):
            # rule 4: TRL SFTTrainer's PEFT path prepares an unsharded 4-bit model
            training["kbit_prep"] = ("peft_bf16_head" if re.search(
                r"trainer bf16=true", other, re.I) else "peft")
    stated_prep = (kv.get("kbit_prep") or "").split(" ")[0]
    if tech == "qlora" and stated_prep in ("peft", "peft_bf16_head") \
            and "kbit_prep" in _training_fields():
        training["kbit_prep"] = stated_prep      # rule 4: the k-bit preparation a row states
    foak = _foak_fused_kernels(kv.get("framework_config", ""), row.get("model") or "")
    # a row stating the kernels its model code fuses (``fused_kernels=a+b``, cited there)
    stated_fused = tuple(k for k in re.split(r"[+,\s]+", (kv.get("fused_kernels") or "")
                                             .split("(")[0].strip()) if k)
    if (foak or stated_fused) and "fused_kernels" in _training_fields():
        # rule 4: fms-acceleration's foak kernels, and kernels a row states
        training["fused_kernels"] = list(dict.fromkeys(foak + stated_fused))
    # rule 5
    opt = (row["optimizer"] or "").lower()
    if ("8-bit" in opt or "8bit" in opt) and "non-8-bit" not in opt:
        training["optimizer"] = "paged_adamw_8bit" if "paged" in opt else "adamw_8bit"
    elif "adafactor" in opt:
        training["optimizer"] = "adafactor"
    elif "lion" in opt:
        training["optimizer"] = "lion"
    elif "sgd" in opt:
        training["optimizer"] = "sgd_momentum" if "momentum" in opt else "sgd"
    else:
        training["optimizer"] = "adamw"
        if "fused=true" in opt or stack == "torchtune":
            training["optimizer_impl"] = "fused"
    if "optimizer_in_bwd=true" in opt:
        training["optimizer_in_backward"] = True
    # rule 13
    seq = _int(row["seq_len"])
    if seq is None:
        return None, "sequence length not stated"
    training["seq_len"] = seq
    # rule 7
    num = _int(row["num_gpus"], 1) or 1
    tp, pp, cp, ep = (_int(row[k], 1) or 1 for k in ("tp", "pp", "cp", "ep"))
    dp = _int(row["dp"]) or max(1, num // (tp * pp * cp))
    if dp * tp * pp * cp != num:
        return None, f"dp*tp*pp*cp = {dp * tp * pp * cp} != num_gpus {num}"
    par: dict = {"dp": dp, "tp": tp, "pp": pp, "cp": cp}
    if ep > 1:
        par["ep"] = ep
    etp = _expert_tp(row, kv)
    if etp is None and ep > 1 and (tp * dp * cp) % (ep * tp):
        # rule 7: the stated layout rules out the default expert TP (= tp); the largest
        # expert TP that divides tp and fits the stage's tp x dp x cp expert rank grid
        fits = [e for e in range(tp, 0, -1) if tp % e == 0 and (tp * dp * cp) % (ep * e) == 0]
        etp = fits[0] if len(fits) == 1 else None   # only when the layout leaves one size
    if etp is not None:
        par["expert_tp"] = etp
    if ep > 1:  # rule 7: the MoE dispatcher and EP overlap the row states
        par.update(_moe_settings(kv, low))
    megatron_2021 = stack == "megatron-core" and (row["dtype"] or "").lower().startswith("fp16")
    if megatron_2021 and "grad_accumulation_fusion" in _training_fields():
        # rule 7: the PTD-P runs predate gradient accumulation fusion (Megatron-LM 83b1e42f,
        # 2022-02-16, "gradient accumulation fusion")
        training["grad_accumulation_fusion"] = False
    if tp > 1 and megatron_2021:  # rule 7: before sequence parallelism and TP overlap
        par["tp_comm_overlap"] = False
    elif tp > 1 and (stack in ("torchtitan", "megatron-core")
                     or _true(kv.get("sequence_parallel"))):
        par["sequence_parallel"] = True
    # rule 8
    mb, ga = _int(row["micro_batch"]), _int(row["grad_accum"])
    gbs = _int(row.get("global_batch"))
    if mb is None:
        m = re.search(r"local bs (\d+)", low)
        if m is not None:
            local = int(m.group(1))
            stages = pp * (2 if "interleaved" in low else 1) if pp > 1 else 1
            mb, ga = max(1, local // stages), stages
        elif stack == "megatron-core" and gbs:
            mb, ga = 1, max(1, gbs // dp)
        else:
            return None, "micro-batch size not stated"
    if ga is None:
        ga = max(1, gbs // (mb * dp)) if gbs else 1
    training["micro_batch_size"] = mb
    training["grad_accum_steps"] = ga
    if pp > 1:
        virtual = _int(kv.get("virtual_pipeline_stages")) or _stated_vp(row["other"] or "")
        if virtual > 1:
            par["pp_schedule"], par["pp_virtual_stages"] = "interleaved", virtual
        elif "interleaved" in low:
            par["pp_schedule"], par["pp_virtual_stages"] = "interleaved", 2
        elif "gpipe" in low:
            par["pp_schedule"] = "gpipe"
    # rule 6
    zf = (row["zero_or_fsdp"] or "").strip().lower()
    gpn = min(8, num)
    if zf in ("1", "2", "3"):
        par["zero_stage"] = int(zf)
    elif zf == "distopt":
        par["zero_stage"] = 1
    elif zf == "fsdp":
        par["fsdp"] = "full_shard"
    elif zf == "fsdp-hybrid":
        par["fsdp"], par["hsdp_shard_size"] = "hybrid_shard", gpn
    elif zf == "fsdp-grad-op":
        par["fsdp"] = "shard_grad_op"
    elif zf not in ("", "none", "0"):
        return None, f"zero_or_fsdp {zf!r}"
    if zf in ("1", "2", "3"):   # rule 15: buffer sizes the run's DeepSpeed config states
        par.update(_zero_buffer_sizes(row["other"] or "", int(zf)))
    offload = _cpu_offload(low, fsdp=zf.startswith("fsdp"))
    if offload:
        par["cpu_offload"] = offload
    # rule 9
    ac = (row["activation_checkpointing"] or "").strip().lower()
    block_level = ac == "selective" and "block-level, not op-level" in low
    fraction = kv.get("checkpoint_fraction") or kv.get("selective_checkpointing")
    if block_level and not fraction:
        return None, "block-level selective AC (a fraction of the blocks checkpointed) " \
            "without the fraction stated"
    if block_level or (ac == "full" and fraction):
        training["activation_checkpointing"] = "full"
        training["checkpoint_fraction"] = _fraction_of(fraction)
    elif ac in ("full", "selective"):
        training["activation_checkpointing"] = ac
        if ac == "selective" and "recompute_modules" in _training_fields():
            training.update(_megatron_modules(row["source"], low))
    elif ac == "offload":
        training["activation_checkpointing"] = "full"
        training["activation_offload"] = True
    elif not ac and (stack in ("unsloth", "megatron-deepspeed")
                     or row["source"].startswith("unsloth")
                     or _true(kv.get("gradient_checkpointing"))):
        training["activation_checkpointing"] = "full"
    if stack == "megatron-core" and "cuda_graph_scope" in _training_fields():
        training.update(_megatron_graphs_and_drop(row["source"], low))
    # rule 10
    fa = (row["flash_attention"] or "").strip().lower()
    training["attention"] = {"true": "flash", "false": "eager"}.get(
        fa, "flash" if stack == "megatron-core" else _unknown_attention(row, stack))
    stated_attention = re.search(r"\battention=(sdpa|eager|flash)\b", low)
    if stated_attention:   # the kernel the row's code runs, stated with its source
        training["attention"] = stated_attention.group(1)
        if re.search(r"attention=sdpa restricted to flash", low):
            # fmest's GPU probe forces SDPA's flash (and efficient) backends: not SDPA's own
            # choice, which is cuDNN on sm90 from PyTorch 2.11
            training["attention"] = "flash"
    # rule 11
    if (_true(kv.get("compile")) or re.search(r"torch\.compile|\+ ?compile|compile \+|"
                                               r"compile (true|on)|, compile,|"
                                               r"compile_model=true", low)) \
            and "compile off" not in low and "compile false" not in low:
        training["compile"] = True
        if stack == "torchtitan" and _torchtitan_eager_loss(
                f"{low} {(row.get('stack_version') or '').lower()}"):
            training["compile_loss"] = False
    if stack == "megatron-deepspeed" and (row["dtype"] or "").lower() == "bf16" \
            and "main_grads_dtype" in _training_fields() and bigscience_before_bf16_optimizer(row):
        training["main_grads_dtype"] = "compute"
    if stack == "megatron-deepspeed" and training["attention"] == "eager" \
            and "masked_softmax_fusion" in _training_fields() \
            and not bigscience_fused_softmax_before_sync(row, training, par, model_config):
        training["masked_softmax_fusion"] = False
    if "chunked ce" in low or "cewithchunkedoutputloss" in low:
        training["loss"] = "chunked"
    elif _true(kv.get("liger")) or re.search(r"fused[- ]linear[- ]cross|flce=true", low) \
            or re.search(r"fused (chunked )?lm head(?! disabled)", low) \
            or re.search(r"loss_type[ =:]*\W?chunked_nll", low):
        training["loss"] = "fused"
    if "activation offloading" in low and "no activation offloading" not in low:
        training["activation_offload"] = True
    if stack == "litgpt" and tech in ("lora", "qlora") + tuple(LITGPT_ADAPTERS.values()):
        # rule 11: Lit-GPT's finetune/lora.py (adapter.py, adapter_v2.py alike) runs the head and
        # the cross-entropy in chunks of 128 tokens (model(input_ids, lm_head_chunk_size=128);
        # chunked_cross_entropy)
        training["loss"] = "chunked"
    # rule 12
    if stack and "stack" in _training_fields():
        training["stack"] = STACK_PROFILES.get(stack, stack)
        if stack == "litgpt" and litgpt_package_2024(row):
            training["stack"] = "litgpt"
    if KEMPNERFORGE_FRAMEWORK.search(other) and "stack" in _training_fields():
        training["stack"] = "kempnerforge"
    if FSDP_QLORA_HARNESS.search(other) and "stack" in _training_fields():
        training["stack"] = "fsdp-qlora"
        if zf in ("", "none", "0") and dp > 1 and FSDP_QLORA_NO_SHARD.search(other):
            par["fsdp"] = "no_shard"
        if FSDP_QLORA_ACT_OFFLOAD.search(other):
            training["activation_offload"] = True
    hardware = {"gpu": gpu, "gpus_per_node": gpn, "nodes": max(1, num // gpn)}
    if stack == "megatron-deepspeed" and "bigscience" in (row.get("stack_version") or "").lower() \
            and "cuda_version" in _hardware_fields():
        # rule 11: the BigScience fork's runs used PyTorch 1.11 with CUDA 11.5
        # (bigscience-workshop/bigscience @59a90eec train/tr11-176B-ml/README.md; the earlier JZ
        # environment, pt-1.10.1 / CUDA 11.3 in jz/envs/README.md, is in the same <= 11.6 range)
        hardware["cuda_version"] = BIGSCIENCE_CUDA
    torch_version = stated_torch_version(row)
    if torch_version and "torch_version" in _hardware_fields():
        hardware["torch_version"] = torch_version
    job = {"model": model, "training": training, "parallelism": par, "hardware": hardware}
    if model_config is not None:
        job["model_config"] = model_config
    dist = LENGTH_DISTRIBUTION.search(other)
    if dist and VARIABLE_LENGTH.search(other) and "padding" in _training_fields():
        # rule 14: the row states its length distribution and that seq_len caps unpacked
        # samples: batches padded to their longest (ms-swift's collator), the dataset's mean
        # and sd; ms-swift 1.x drops an over-long sample (truncation_strategy='delete',
        # swift/llm/utils/template.py @ 46922151e06cdfc110882e182757674f12352f2c)
        training["padding"] = "longest"
        delete = bool(MS_SWIFT_DEFAULT_TRUNCATION.search(other))
        if delete:
            training["truncation"] = "delete"
        mean, sd = capped_lognormal_moments(float(dist.group(1)), float(dist.group(2)),
                                            float(training["seq_len"]), delete)
        job["workload"] = {"avg_seq_len": mean, "seq_len_std": sd}
    return job, ""


def capped_lognormal_moments(mean: float, sd: float, cap: float,
                             delete: bool) -> tuple[float, float]:
    """(mean, sd) of the lengths as trained (rule 14) when the dataset's lengths (``mean``,
    ``sd``) follow a lognormal of those moments (an assumption: the sources state two moments
    only) and a sample over ``cap`` is dropped (``delete``) or cut to it: the closed forms of
    the truncated lognormal's first two moments (E[X^k; X <= c] = exp(k mu + k^2 s^2 / 2)
    Phi((ln c - mu - k s^2) / s))."""
    s2 = math.log(1.0 + (sd / mean) ** 2)
    mu, s = math.log(mean) - s2 / 2.0, math.sqrt(s2)

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    z = (math.log(cap) - mu) / s
    below = phi(z)
    m1 = math.exp(mu + s2 / 2.0) * phi(z - s)
    m2 = math.exp(2.0 * mu + 2.0 * s2) * phi(z - 2.0 * s)
    if delete:
        m1, m2 = m1 / below, m2 / below
    else:
        m1, m2 = m1 + cap * (1.0 - below), m2 + cap * cap * (1.0 - below)
    return round(m1, 1), round(math.sqrt(max(0.0, m2 - m1 * m1)), 1)


def row_to_job(row: dict) -> tuple[Optional[dict], str]:
    """``(job_dict, "")`` or ``(None, reason)`` for one row (see module doc)."""
    mapped = map_row(row)
    return mapped.job, mapped.reason


def jobs(kind: Optional[str] = None) -> list[tuple[dict, Optional[dict], str]]:
    """``(row, job_dict or None, reason)`` for every row of ``kind``."""
    return [(row, *row_to_job(row)) for row in load_rows(kind)]
