"""Hearth's llama.cpp build makes flash attention batch-invariant for f16 K and V
(packaging/llama-cpp/patches/04-fa-batch-invariant.patch, switched on by
``GGML_CPU_FA_BATCH_INVARIANT=1``, which Hearth sets): then f16 K+V is exact in every check
that breaks it with llama.cpp's shape-dependent choice of path — and without the switch, the
same checks fail, in a process of its own (llama.cpp reads the switch once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.llama.native_log import init_llama
from app.engine.llama.weight_kernels import FA_ENV, fa_batch_invariant

CHILD = r"""
import json, sys
from app.engine.llama.kv_checks import PROMPTS, check_batched, check_chunking, check_neighbours
from app.engine.llama.llama_backend import LlamaBackend
with LlamaBackend(sys.argv[1], n_ctx_per_seq=1024, n_seq_max=8, n_batch=512, n_threads=1,
                  type_k="f16", type_v="f16", flash_attn=True) as b:
    long = b.tokenize(" ".join(PROMPTS) * 12)
    ok, worst, _, differ = check_chunking(b, long[:300])
    batched = check_batched(b, [b.tokenize(p) for p in PROMPTS[:8]])
    next_to_4 = check_neighbours(b, 4)
print(json.dumps({"chunking": [ok, worst, differ], "batched": list(batched), "next to 4": list(next_to_4)}))
"""

MODELS = [pytest.param("tiny_model_path", id="tiny"),
          pytest.param("smollm2_path", id="smollm2", marks=pytest.mark.smollm2)]


def _checks(path: Path, switch: str) -> dict:
    env = {**os.environ, FA_ENV: switch}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_hearth_asks_for_batch_invariant_flash_attention() -> None:
    init_llama()  # set_process_kernels, before llama.cpp's first use in this process
    assert fa_batch_invariant() and os.environ[FA_ENV] == "1"


@pytest.mark.parametrize("model", MODELS)
def test_f16_kv_is_exact_with_the_switch_and_not_without(request: pytest.FixtureRequest, model: str) -> None:
    path = request.getfixturevalue(model)
    on = _checks(path, "1")
    assert on["chunking"][0], on  # whole == 128, 64, 7 and one a tick: bit-identical logits and KV
    assert on["batched"][0], on
    assert on["next to 4"][0], on
    off = _checks(path, "0")
    # llama.cpp's own choice: 64-row tiles, one chunk below 64 rows, split-KV for one row.
    assert not off["chunking"][0] and off["chunking"][1] > 0, off
    assert set(off["chunking"][2]) & {"7", "1 a tick"}, off


LOGITS_CHILD = r"""
import sys
import numpy as np
from app.engine.backend import PrefillOp
from app.engine.llama.kv_checks import PROMPTS
from app.engine.llama.llama_backend import LlamaBackend
with LlamaBackend(sys.argv[1], n_ctx_per_seq=1024, n_seq_max=4, n_batch=512, n_threads=1,
                  type_k="f16", type_v="f16", flash_attn=True) as b:
    p = b.tokenize(" ".join(PROMPTS) * 12)[:600]
    b.step([PrefillOp(0, tuple(p[:500]), 0, False)])
    b.step([PrefillOp(0, tuple(p[500:560]), 500, False)])
    for pos in range(560, 600):  # one row a tick over 512+ cells: llama.cpp's split-KV path
        b.step([PrefillOp(0, (p[pos],), pos, True)])
    np.save(sys.argv[2], b.seq_logits(0))
"""


@pytest.mark.parametrize("model", MODELS)
def test_the_batch_invariant_path_computes_llama_cpps_attention(request: pytest.FixtureRequest, model: str,
                                                                tmp_path: Path) -> None:
    """The switch changes the order of the sums, not what is summed: the last logits of a
    600-token prompt whose last 40 tokens came one a tick (llama.cpp's own split-KV path for
    those rows without the switch; with it, the tiled path with query heads that share a K/V
    head packed together) agree to rounding, with the same top tokens. A wrong head, row or
    K transpose in the tiled path would move them by the logits' own size."""
    import numpy as np

    path = request.getfixturevalue(model)
    got = {}
    for switch in ("1", "0"):
        out = subprocess.run([sys.executable, "-c", LOGITS_CHILD, str(path), str(tmp_path / f"{switch}.npy")],
                             env={**os.environ, FA_ENV: switch}, capture_output=True, text=True, timeout=600,
                             cwd=Path(__file__).resolve().parents[3])
        assert out.returncode == 0, out.stderr[-2000:]
        got[switch] = np.load(tmp_path / f"{switch}.npy")
    on, off = got["1"], got["0"]
    scale = float(np.abs(off).max())
    assert scale > 0
    assert float(np.abs(on - off).max()) <= 0.05 * scale, (float(np.abs(on - off).max()), scale)
    assert list(np.argsort(on)[-5:][::-1]) == list(np.argsort(off)[-5:][::-1])
