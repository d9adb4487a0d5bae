"""Hearth's llama.cpp build makes f16 and bf16 weight matmuls batch-invariant
(packaging/llama-cpp/patches/05-float-mm-batch-invariant.patch, switched on by
``GGML_CPU_MM_BATCH_INVARIANT=1``, which Hearth sets): then the tiny f16 and bf16 models are
exact in every check that breaks them with llama.cpp's own choice — ``vec_dot`` for one-row
ubatches, llamafile's tinyBLAS for more, two summation orders — and so are the tiny gemma3,
lfm2 and mamba2 models written as f16 and bf16; without the switch the same checks fail
wherever that choice exists (tinyBLAS for f16 needs F16C, for bf16 AVX2 or AVX-512;
on older x86 CPUs every ubatch takes ``vec_dot`` and both runs are exact). Each run in a process
of its own (llama.cpp reads the switch once): one for every model with it, one without."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.engine.llama.libs import lib_dir
from app.engine.llama.native_log import init_llama
from app.engine.llama.weight_kernels import MM_ENV, mm_batch_invariant
from tests.helpers.tiny_families import FAMILIES, ensure_tiny_family
from tests.helpers.weight_types import FLOAT_TYPES, ensure_weight_type_model

CHILD = r"""
import json, sys
import llama_cpp
from app.engine.llama.kv_checks import PROMPTS, check_batched, check_chunking, check_neighbours
from app.engine.llama.llama_backend import LlamaBackend
for path in sys.argv[1:]:
    with LlamaBackend(path, n_ctx_per_seq=1024, n_seq_max=8, n_batch=512, n_threads=1,
                      type_k="q8_0", type_v="f16", flash_attn=True) as b:
        long = b.tokenize(" ".join(PROMPTS) * 12)
        ok, worst, _, differ = check_chunking(b, long[:300])
        batched = check_batched(b, [b.tokenize(p) for p in PROMPTS[:8]])
        next_to_4 = check_neighbours(b, 4)
        system = llama_cpp.llama_print_system_info().decode()
    print(json.dumps({"path": path, "chunking": [ok, worst, differ], "batched": list(batched),
                      "next to 4": list(next_to_4), "system": system}))
"""

MODELS = [(family, ftype) for family in ("llama", *FAMILIES) for ftype in FLOAT_TYPES]
"""The wide tiny llama and the tiny families (sliding-window attention, recurrent, short
convolutions), each written as f16 and as bf16."""


def _path(family: str, ftype: str) -> Path:
    return ensure_weight_type_model("tiny", ftype) if family == "llama" else ensure_tiny_family(family, None, ftype)


def _checks(switch: str) -> dict[str, dict[str, Any]]:
    """Every model's checks in one process with ``MM_ENV`` = ``switch``, by path."""
    paths = [str(_path(*model)) for model in MODELS]
    env = {**os.environ, MM_ENV: switch}
    out = subprocess.run([sys.executable, "-c", CHILD, *paths], env=env, capture_output=True, text=True,
                         timeout=600, cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr[-2000:]
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"path"')]
    return {r["path"]: r for r in results}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, dict[str, Any]]]:
    return {"on": _checks("1"), "off": _checks("0")}


def _tinyblas_takes(ftype: str, system: str) -> bool:
    """Whether llama.cpp's CPU backend (its ``llama_print_system_info``) has a tinyBLAS kernel
    for ``ftype`` weights, i.e. a choice by ubatch size to make."""
    flags = {part.split("=")[0].strip() for part in system.split("|") if part.strip().endswith("= 1")}
    if "LLAMAFILE" not in flags:
        return False
    if ftype == "F16":
        return "AVX512" in flags or {"AVX", "F16C"} <= flags
    return "AVX512" in flags or "AVX2" in flags


def test_the_llama_cpp_build_has_the_switch() -> None:
    """Every CPU variant of the installed llama.cpp reads ``MM_ENV`` (a wheel built before the
    patch ignores it, and the tests below then fail for that reason)."""
    variants = sorted(lib_dir().glob("libggml-cpu*.so"))
    assert variants, lib_dir()
    lacking = [p.name for p in variants if MM_ENV.encode() not in p.read_bytes()]
    assert not lacking, f"built without 05-float-mm-batch-invariant.patch (rebuild the wheel): {lacking}"


def test_hearth_asks_for_batch_invariant_float_matmuls() -> None:
    init_llama()  # set_process_kernels, before llama.cpp's first use in this process
    assert mm_batch_invariant() and os.environ[MM_ENV] == "1"


@pytest.mark.parametrize(("family", "ftype"), MODELS, ids=[f"{f}-{t}" for f, t in MODELS])
def test_float_weights_are_exact_with_the_switch_and_not_without(
    runs: dict[str, dict[str, dict[str, Any]]], family: str, ftype: str
) -> None:
    path = str(_path(family, ftype))
    on, off = runs["on"][path], runs["off"][path]
    assert on["chunking"][0], on  # whole == 128, 64, 7 and one a tick: bit-identical logits and KV
    assert on["batched"][0], on
    assert on["next to 4"][0], on
    if not _tinyblas_takes(ftype, off["system"]):
        # One kernel (vec_dot) for every ubatch: exact without the switch as well.
        assert off["chunking"][0] and off["batched"][0] and off["next to 4"][0], off
        return
    # llama.cpp's own choice: a batch of eight against each alone, and a sequence next to 4
    # others, give other logits; for the llama model a prompt ending one token a tick too.
    assert not off["batched"][0], off
    assert not off["next to 4"][0], off
    if family == "llama":
        assert not off["chunking"][0] and off["chunking"][1] > 0, off
        assert "1 a tick" in off["chunking"][2], off
