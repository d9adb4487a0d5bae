"""Embeddings: a mean-pooled vector for a token sequence, from a context of its own.

The embeddings context (one sequence, ``embeddings=True``, at most ``EMBED_MAX_TOKENS``
tokens in one ubatch) is made by ``LlamaBackend`` on first use and kept until the model
closes, so ``embed`` never disturbs the generation context's KV. Scheduler thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import llama_cpp

from app.engine.errors import ContextOverflow, DecodeFailed, InvalidRequest, NotSupported
from app.engine.llama.llama_handles import Batch
from app.engine.llama.llama_lora import AdapterSet, apply_adapters

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


class Embeddings:
    """A mixin of ``LlamaBackend``: ``embed`` on its embeddings context, made on first use."""

    n_ctx_per_seq: int
    _n_embd: int
    _embed_ctx: Any
    _embed_batch: Batch | None
    _stack: ExitStack
    _lora: AdapterSet

    if TYPE_CHECKING:  # LlamaBackend's and TickChecks', for the type checker only

        def _new_context(self, *, n_ctx: int | None = None, n_seq_max: int | None = None,
                         embeddings: bool = False) -> Any: ...
        def _check_tokens(self, tokens: Sequence[int]) -> None: ...

    def embed(self, tokens: Sequence[int]) -> list[float]:
        """Mean-pooled embedding of ``tokens`` (``n_embd`` floats), from a second context."""
        if not tokens:
            raise InvalidRequest("embed needs at least one token")
        self._check_tokens(tokens)
        ctx, batch = self._embedding_context()
        return embed(ctx, batch, tokens, int(self._n_embd))

    def _embedding_context(self) -> tuple[Any, Batch]:
        if self._embed_ctx is None:
            n = min(self.n_ctx_per_seq, EMBED_MAX_TOKENS)
            ctx = self._new_context(n_ctx=n, n_seq_max=1, embeddings=True)
            if not ctx:
                raise NotSupported("llama.cpp could not create an embeddings context")
            self._stack.callback(llama_cpp.llama_free, ctx)
            self._embed_ctx, self._embed_batch = ctx, Batch(n)
            apply_adapters(ctx, self._lora.active)
        assert self._embed_batch is not None
        return self._embed_ctx, self._embed_batch
