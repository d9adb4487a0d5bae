"""What each memory type lets the backend do with a sequence's state (issue 28), on real llama.cpp.

The backend learns the model's memory at load (``BackendInfo.memory``) and answers
``can_trim`` from it; a cut it cannot make is refused before llama.cpp sees it, and a copy of
a state that cannot be cut is made only whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.engine.errors import NotSupported
from app.engine.llama.llama_backend import LlamaBackend
from tests.helpers.tiny_families import GEMMA3_WINDOW, ensure_tiny_family
from tests.integration.backend.driver import prefill

PROMPT = [int(t) for t in np.random.default_rng(5).integers(100, 40_000, 400)]


def _backend(path: Path, **kw) -> LlamaBackend:
    kw.setdefault("n_ctx_per_seq", 1024)
    kw.setdefault("n_seq_max", 2)
    kw.setdefault("n_batch", 64)
    return LlamaBackend(str(path), n_threads=2, **kw)


@pytest.mark.parametrize(
    ("family", "kind", "cut", "trim"),
    [("mamba2", "recurrent", False, False), ("lfm2", "hybrid", False, False), ("gemma3", "sliding_window", False, True)],
)
def test_each_memory_type_is_recognised(assets_dir, family, kind, cut, trim):
    with _backend(ensure_tiny_family(family, assets_dir)) as b:
        caps = b.info.memory
        assert (caps.kind, caps.cut_states, caps.trim_tail) == (kind, cut, trim)
        assert caps.needs_checkpoints


def test_the_tiny_llama_is_attention(tiny_model_path):
    with _backend(tiny_model_path) as b:
        assert b.info.memory.kind == "attention" and not b.info.memory.needs_checkpoints


@pytest.mark.parametrize("family", ["mamba2", "lfm2"])
def test_a_recurrent_state_is_never_cut_and_copied_only_whole(assets_dir, family):
    with _backend(ensure_tiny_family(family, assets_dir)) as b:
        prefill(b, 0, PROMPT[:50])
        assert b.can_trim(0, 50) and b.can_trim(0, 0) and not b.can_trim(0, 49)
        before = bytes(b.kv_pack(0))
        with pytest.raises(NotSupported):
            b.seq_rm(0, 30)
        assert bytes(b.kv_pack(0)) == before  # nothing was touched
        with pytest.raises(NotSupported):
            b.seq_cp(0, 1, 30)
        b.seq_cp(0, 1, 50)  # whole: the same state in seq 1
        assert b.seq_pos_max(1) == 49
        b.seq_rm(0, 0)
        assert b.seq_pos_max(0) == -1


@pytest.mark.parametrize("swa_full", [True, False])
def test_a_sliding_window_seq_is_trimmed_only_while_its_window_cells_are_held(assets_dir, swa_full):
    # n_batch 64: without swa_full the windowed layer's cache is 256 cells that wrap around,
    # so after 400 tokens its oldest cells are gone.
    with _backend(ensure_tiny_family("gemma3", assets_dir), swa_full=swa_full) as b:
        prefill(b, 0, PROMPT, chunk=64)
        assert b.can_trim(0, len(PROMPT) - 1)  # a regenerate: the tail is inside the window
        deep = 100
        assert b.can_trim(0, deep) is swa_full
        if not swa_full:
            with pytest.raises(NotSupported):
                b.seq_rm(0, deep)
        # a state restored from a save holds only the last window: its last token can be
        # read again, nothing deeper
        b.kv_unpack(1, b.kv_pack(0))
        assert b.seq_pos_max(1) == len(PROMPT) - 1
        assert b.can_trim(1, len(PROMPT) - 1)
        assert not b.can_trim(1, len(PROMPT) - GEMMA3_WINDOW)
        assert not b.can_trim(1, deep)
