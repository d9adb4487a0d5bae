"""Embeddings: a mean-pooled vector for a token sequence, from a context of its own.

The embeddings context (one sequence, ``embeddings=True``, at most ``EMBED_MAX_TOKENS``
tokens in one ubatch) is made by ``LlamaBackend`` on first use and kept until the model
closes, so ``embed`` never disturbs the generation context's KV. Scheduler thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_cpp

from app.engine.errors import ContextOverflow, DecodeFailed, NotSupported
from app.engine.llama_handles import Batch

# The embeddings context holds one sequence of at most this many tokens in one ubatch.
EMBED_MAX_TOKENS = 2048


def embed(ctx: Any, batch: Batch, tokens: Sequence[int], n_embd: int) -> list[float]:
    """Mean-pooled embedding of ``tokens`` (checked ids, at least one) in the embeddings ``ctx``."""
    if len(tokens) > batch.capacity:
        raise ContextOverflow(f"embed takes at most {batch.capacity} tokens, got {len(tokens)}")
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    end = batch.put(0, tokens, 0, 0)
    batch.logits[:end] = 1
    batch.struct.n_tokens = end
    rc = llama_cpp.llama_decode(ctx, batch.struct)
    if rc != 0:
        raise DecodeFailed(int(rc))
    ptr = llama_cpp.llama_get_embeddings_seq(ctx, 0)
    if not ptr:
        raise NotSupported("this model produced no pooled embedding")
    return [float(x) for x in ptr[:n_embd]]
