"""Every engine format, one module each, each defining ``FORMAT``
(:class:`lib.deploy.engine_format.EngineFormat`); :func:`lib.deploy.registry.formats` finds them:

- :mod:`~lib.deploy.formats.trtllm`: TensorRT-LLM's ``max_draft_len`` and ``draft_len_schedule``;
- :mod:`~lib.deploy.formats.vllm`: vLLM's ``num_speculative_tokens`` and
  ``num_speculative_tokens_per_batch_size``, capped to the CUDA-graph capture ceiling;
- :mod:`~lib.deploy.formats.sglang`: SGLang's ``--speculative-adaptive-config`` file;
- :mod:`~lib.deploy.formats.vllm_context`: a context grid as today's vLLM can hold it (one batch
  schedule for a context mix);
- :mod:`~lib.deploy.formats.vllm_rfc_48944`: a context grid as PR #48944's 5-item entries;
- :mod:`~lib.deploy.formats.vllm_pr_54801`: a context grid as PR #54801's batch and length
  tables.

What the context formats share is :mod:`lib.deploy.grid`.
"""
