"""The GPU path, checked in one command: eval, RL in bf16 and FSDP2 on NCCL, on one GPU.

    python -m agentenvs.benchmarks.gpu_check --out results/gpu-check            # one CUDA GPU
    python -m agentenvs.benchmarks.gpu_check --dry-run --out /tmp/gpu-check     # CPU, tiny shapes
    python -m agentenvs.benchmarks.gpu_check --out DIR --steps rl_ptgpo,torchrun_fsdp2   # a rerun

Without network or weights, on one GPU and within ``--budget-s`` (default 480 s), it runs these
steps, each under its own time limit (and never past the budget), each failure recorded (step
name, error, traceback tail) without stopping the steps that do not need the failed one
(:mod:`~agentenvs.benchmarks.gpu_check.runner`):

``models``
    random-init models of SmolLM2-135M's shape (``LlamaForCausalLM``) and Qwen3-1.7B's
    (``Qwen3ForCausalLM``; :mod:`agentenvs.benchmarks.speed.model_shapes`), with the tiny model's
    tokenizer (:func:`agentenvs.agents.tiny_model.build_tiny_model`; its ~512 tokens are the low
    ids of the models' published vocabularies, so every prompt encodes and a sampled id above
    them decodes to nothing), saved in bf16 under ``OUT/models``
    (:mod:`~agentenvs.benchmarks.gpu_check.measure`).
``eval_<shape>``
    ``agentenvs eval`` (:func:`agentenvs.benchmarks.eval.evaluate.evaluate`) on TextCraft with the
    transformers backend on CUDA in bf16: 64 episodes in one batch (8 tasks x 8 samples), turns
    and reply length capped (a random model never stops, so every reply is full length): generated
    tokens per second, episodes per minute (both over the whole call, model load included) and
    peak GPU memory.
``rl_ptgpo``, ``rl_prefix_grpo``
    3 iterations of the native trainer (:class:`agentenvs.train.rl.RLTrainer`, transformers
    rollout engine, fp32 master weights, ``precision=bf16`` autocast) on the Qwen3-1.7B shape;
    Prefix-GRPO's queries are cut, replay-validated and given sidecars from the expert's
    episodes first (:mod:`agentenvs.replay`). Per iteration: seconds in rollout / old-log-prob /
    update, the mean |rollout log-prob - trainer log-prob| per reply token
    (``rollout/trainer_logprob_gap``), and the update's TFLOP/s and MFU
    (:mod:`~agentenvs.benchmarks.gpu_check.rl`). A random model earns no reward, so every row has
    advantage 0 and the trainer would skip its passes: the check turns that skip off
    (``UpdateSettings.skip_zero_advantage=False``) so the passes it times run.
``torchrun_fsdp2``
    ``torchrun --nproc_per_node=1`` of the check's worker: one RL iteration (PTGPO) with the
    policy sharded by FSDP2 (:func:`agentenvs.train.distributed.shard_model`) on an NCCL group
    (:mod:`~agentenvs.benchmarks.gpu_check.fsdp`).

Everything goes to ``OUT/gpu_check.json`` (:data:`~agentenvs.benchmarks.gpu_check.plan.
SCHEMA_VERSION`; fields in docs/gpu-check.md) with the torch, CUDA, NCCL and transformers
versions, and a table is printed (:mod:`~agentenvs.benchmarks.gpu_check.cli`). The exit status is
1 when any step failed. ``--dry-run`` runs every step on CPU with small shapes of the same
architectures, a few short episodes and gloo instead of NCCL (about a minute on two cores), so
the test suite runs the whole check on machines without a GPU. The check needs the ``llm``
extra (torch, transformers).
"""
