"""The exactness tests of test_exact_kv.py, on models of every common weight type: a sequence
batched with others, decoded next to neighbours of other lengths, read whole or in chunks or
one token a tick, or read ahead on other threads, gives bit-identical logits (and KV bytes)
— with the kernels Hearth picks for the model's weights (app.engine.llama.weight_kernels).

The SmolLM2 requantizations reach the batch-dependent kernels (tests/helpers/weight_types.py):
with llama.cpp's defaults (``GGML_CPU_TILED_MM=1``, repacked weights on) these tests fail for
them on the machine they were written on; under Hearth's choice they pass. So do the tiny f16
and bf16 models with llama.cpp's float matmuls as they come (``GGML_CPU_MM_BATCH_INVARIANT=0``,
test_float_mm_batch_invariant.py)."""

from __future__ import annotations

import pytest

from app.engine.llama.llama_backend import LlamaBackend
from app.engine.llama.llama_info import ctx_params_hash
from tests.helpers.weight_types import SMOLLM2_TYPES, TINY_TYPES, ensure_weight_type_model
from tests.integration.backend.test_exact_kv import (  # collected here, on these models
    test_a_prompt_read_ahead_on_other_threads_ends_on_the_same_logits_and_kv,
    test_a_seq_decoded_next_to_seqs_of_other_lengths_equals_it_alone,
    test_batch_of_eight_equals_alone_bit_for_bit,
    test_exact_kv_types_give_the_same_logits_however_the_prompt_is_run,
)

__all__ = [
    "test_a_prompt_read_ahead_on_other_threads_ends_on_the_same_logits_and_kv",
    "test_a_seq_decoded_next_to_seqs_of_other_lengths_equals_it_alone",
    "test_batch_of_eight_equals_alone_bit_for_bit",
    "test_exact_kv_types_give_the_same_logits_however_the_prompt_is_run",
]

WEIGHTS = [
    *(pytest.param(("tiny", t), id=f"tiny-{t}") for t in TINY_TYPES),
    *(pytest.param(("smollm2", t), id=f"smollm2-{t}", marks=pytest.mark.smollm2) for t in SMOLLM2_TYPES),
]


@pytest.fixture(scope="module", params=WEIGHTS)
def model_path(request: pytest.FixtureRequest, smollm2_path: object) -> str:
    base, ftype = request.param
    return str(ensure_weight_type_model(base, ftype))


@pytest.fixture
def any_model_path(model_path: str) -> str:
    return model_path


def test_k_quant_models_get_row_independent_kernels(model_path: str) -> None:
    """The choice itself: K-quant models load without repacked weights, with the tiled matmul
    off, f16/bf16 models with batch-invariant float matmuls, and their context key says so;
    the other types keep llama.cpp's defaults."""
    with LlamaBackend(model_path, n_ctx_per_seq=256, n_seq_max=1, n_batch=64, n_threads=1) as backend:
        kernels = backend.kernels
        k_quant = any(t.endswith("_K") for t in kernels.weight_types)
        floats = [t for t in kernels.weight_types if t in ("F16", "BF16")]
        assert bool(kernels.batch_dependent) == k_quant, kernels
        assert kernels.float_weights == tuple(floats), kernels
        assert kernels.extra_bufts == (not k_quant)
        defaults = ctx_params_hash(backend.type_k, backend.type_v, True)
        if k_quant:
            assert kernels.cache_key() == {"weights": "batch_dependent", "extra_bufts": False, "tiled_mm": "off"}
            assert "row-independent kernels" in backend.info.extra["weight_kernels"]
        elif floats:
            assert kernels.cache_key() == {"float_mm": "batch_invariant"}
            assert "matmuls: tinyBLAS for every ubatch" in backend.info.extra["weight_kernels"]
        else:
            assert kernels.cache_key() is None
            assert backend.info.ctx_params_hash == defaults
        if k_quant or floats:
            # KV computed with llama.cpp's default kernels (an older cache) is never served.
            assert backend.info.ctx_params_hash != defaults
