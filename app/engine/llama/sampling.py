"""Sampler chains: ``SamplingParams`` → one owned ``llama_sampler`` chain.

The chain order is fixed by docs/design.md §1:

    grammar → repetition penalty → top-k → top-p → min-p → (temp → dist(seed) | greedy)

A stage whose setting is neutral (``top_k == 0``, ``top_p == 1``, ``min_p == 0``,
``repetition_penalty == 1``, no grammar) is left out, so a greedy request is a one-stage chain.

A **grammar → greedy** chain (a forced tool call, ``response_format``) is sampled argmax-first
(``SamplerChain.sample_greedy``), as llama.cpp's own ``common_sampler`` does: the logits' argmax
is checked against the grammar alone, and only when the grammar refuses it does the whole
chain run over the vocabulary. Same token either way: the argmax is the first maximum (numpy
and llama.cpp's greedy stage both keep the first), the grammar judges each token on its own
(``llama_grammar_apply_impl``), and an allowed argmax keeps its logit, so it is still the
first maximum once every refused token is at -inf.
NOTE: whole-vocabulary masking cost 3-20 ms of CPU per token on SmolLM2 (49,152 tokens, B14's
tool-call grammar; AMD EPYC, 1 thread), the argmax-first check ~0.1 ms when it holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import llama_cpp
import numpy as np

from app.engine.backend import SamplingParams
from app.engine.errors import GrammarFailed
from app.engine.validation import check_sampling

log = logging.getLogger(__name__)

# How many recent tokens the repetition penalty looks at (llama.cpp's common default).
PENALTY_LAST_N = 64

FAST_GRAMMAR = True
"""Sample grammar → greedy chains argmax-first (``SamplerChain.sample_greedy``); False: the
whole chain over the vocabulary every time (the reference the tests compare with)."""


class SamplerChain:
    """Owns one native sampler chain; ``close()`` is idempotent."""

    __slots__ = ("_ptr", "params", "is_plain_greedy", "is_grammar_greedy", "_one", "_one_array")

    def __init__(self, ptr: Any, params: SamplingParams) -> None:
        self._ptr: Any = ptr
        self.params = params
        # A lone greedy stage keeps no state, so the backend may take the argmax itself.
        self.is_plain_greedy = params.is_plain_greedy
        self.is_grammar_greedy = bool(params.grammar) and replace(params, grammar=None).is_plain_greedy
        """Grammar then greedy, nothing between: sampled argmax-first (``sample_greedy``)."""
        self._one = llama_cpp.llama_token_data(0, 0.0, 0.0)
        self._one_array = llama_cpp.llama_token_data_array(ctypes.pointer(self._one), 1, -1, False)

    @property
    def ptr(self) -> Any:
        if self._ptr is None:
            raise RuntimeError("sampler chain used after close()")
        return self._ptr

    @property
    def is_closed(self) -> bool:
        return self._ptr is None

    def stage_names(self) -> list[str]:
        """The chain's stages in order, as llama.cpp names them (e.g. ["top-k", "greedy"])."""
        ptr = self.ptr
        return [
            llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(ptr, i)).decode()
            for i in range(llama_cpp.llama_sampler_chain_n(ptr))
        ]

    def sample_greedy(self, logits: np.ndarray[Any, np.dtype[np.float32]], whole: Callable[[], int]) -> int:
        """A grammar → greedy chain's token (``is_grammar_greedy``): the argmax of ``logits``
        when the grammar allows it (then accepted, as ``llama_sampler_sample`` accepts its
        choice), else ``whole()`` — the chain over the whole vocabulary."""
        if FAST_GRAMMAR:
            token = int(logits.argmax())
            if self.grammar_allows(token, float(logits[token])):
                self.accept(token)
                return token
        return whole()

    def grammar_allows(self, token: int, logit: float) -> bool:
        """Would the grammar stage, in its state now, leave ``token`` (with ``logit``) sampleable?"""
        self._one_array.data[0] = llama_cpp.llama_token_data(token, logit, 0.0)  # (into ``_one``)
        self._one_array.selected = -1
        grammar = llama_cpp.llama_sampler_chain_get(self.ptr, 0)  # the chain's first stage
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(self._one_array))
        return self._one.logit != -math.inf  # a refused token's logit is set to -inf

    def accept(self, token: int) -> None:
        """Record a token the chain did not choose (penalty history, grammar state)."""
        llama_cpp.llama_sampler_accept(self.ptr, token)

    def reset(self) -> None:
        llama_cpp.llama_sampler_reset(self.ptr)

    def close(self) -> None:
        if self._ptr is not None:
            llama_cpp.llama_sampler_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # last resort; owners call close()
        # Interpreter shutdown: the bindings may already be gone.
        with contextlib.suppress(Exception):
            self.close()


def validate(params: SamplingParams) -> None:
    """Raise ``InvalidRequest`` for settings llama.cpp would silently misread.

    ``Model`` checks options at admission (``app.engine.validation``); this second check keeps
    the backend safe for callers that build ``SamplingParams`` themselves.
    """
    check_sampling(params)


def build_chain(vocab: Any, params: SamplingParams) -> SamplerChain:
    """Build the chain in its fixed order (docs/design.md §1) for ``params``; ``GrammarFailed`` for a malformed grammar."""
    validate(params)
    chain_params = llama_cpp.llama_sampler_chain_default_params()
    chain_params.no_perf = True
    chain = SamplerChain(llama_cpp.llama_sampler_chain_init(chain_params), params)
    try:
        if params.grammar:
            _add(chain, _grammar(vocab, params.grammar))
        if params.repetition_penalty != 1.0:
            n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
            _add(chain, llama_cpp.llama_sampler_init_penalties(
                n_vocab, PENALTY_LAST_N, params.repetition_penalty, 0.0, 0.0))
        if params.top_k > 0:
            _add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
        if params.top_p < 1.0:
            _add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0.0:
            _add(chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
        if params.temperature > 0.0:
            _add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
            _add(chain, llama_cpp.llama_sampler_init_dist(params.seed))
        else:
            _add(chain, llama_cpp.llama_sampler_init_greedy())
    except BaseException:
        chain.close()
        raise
    return chain


def _grammar(vocab: Any, grammar: str) -> Any:
    ptr = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not ptr:
        raise GrammarFailed("malformed grammar: llama.cpp could not parse it (GBNF, root rule 'root')")
    return ptr


def _add(chain: SamplerChain, stage: Any) -> None:
    if not stage:
        raise RuntimeError("llama.cpp returned a NULL sampler stage")
    # The chain takes ownership of the stage.
    llama_cpp.llama_sampler_chain_add(chain.ptr, stage)

