"""tune-spec-k: choose vLLM's Dynamic speculative-decoding schedule from measured sweeps."""
