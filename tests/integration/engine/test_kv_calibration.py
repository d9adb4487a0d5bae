"""The KV calibration (app.engine.llama.kv_calibration) on real llama.cpp: it picks an exact pair of
cell types over a faster inexact one, keeps its choice per CPU, llama.cpp build and kind of
model (and calibrates again when one of them changes), runs in a child process at a model's
first load, and the pair it picks keys the cache: KV saved under one pair is never served
to a context of another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig
from app.engine.events import TokenId
from app.engine.llama import kv_calibration, native_probe, weight_kernels
from app.engine.llama.kv_calibration import DEFAULT, Candidate, Measured, decide
from app.engine.llama.weight_kernels import FA_ENV

F16 = Candidate("f16", "f16")
Q8 = Candidate("q8_0", "q8_0")
BF16_V = Candidate("q8_0", "bf16")


@pytest.fixture
def calibrating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Calibration on (the suite turns it off), its results in a fresh cache dir."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(kv_calibration.ENV, "on")
    return tmp_path / "xdg" / "hearth" / "kv-calibration.json"


def _m(cand: Candidate, exact: bool, prefill_ms: float, tick_ms: float = 1.0) -> Measured:
    return Measured(cand, exact, [] if exact else ["chunking"], 0.0 if exact else 0.5, prefill_ms, tick_ms)


def test_decide_takes_the_fastest_exact_pair_and_keeps_the_default_within_the_margin() -> None:
    # The inexact pair is the fastest by far: never chosen, and named.
    chosen, why = decide([_m(F16, False, 100), _m(DEFAULT, True, 900), _m(Q8, True, 500)])
    assert chosen == Q8
    assert "faster than q8_0 K / f16 V" in why and "not exact here: f16 K+V" in why
    # Another exact pair only 2 % faster: the default stays (that is this machine's noise).
    chosen, why = decide([_m(DEFAULT, True, 500), _m(Q8, True, 490)])
    assert chosen == DEFAULT and "fastest" in why
    # Nothing exact: the default, said so.
    chosen, why = decide([_m(DEFAULT, False, 500), _m(Q8, False, 400)])
    assert chosen == DEFAULT and why.startswith("no candidate was exact")


def test_decide_takes_a_pair_that_reads_prompts_faster_at_no_cost_to_decode() -> None:
    # A turn is mostly decode ticks: a pair 30 % faster at reading a prompt and as fast per
    # tick is within MARGIN by turn, and still chosen: the reading is the wait before a reply.
    default, f16 = _m(DEFAULT, True, 1280, 21.8), _m(F16, True, 900, 22.3)
    assert f16.turn_ms > default.turn_ms * (1 - kv_calibration.MARGIN)
    chosen, why = decide([default, f16, _m(Q8, True, 1480, 22.9)])
    assert chosen == F16 and why.startswith("exact, reads prompts 1.42 × faster than q8_0 K / f16 V"), why
    # Faster reading but a tick 20 % slower: not a free gain, the default stays.
    chosen, _ = decide([default, _m(F16, True, 900, 26.2)])
    assert chosen == DEFAULT
    # Reading only 5 % faster (noise): the default stays.
    chosen, _ = decide([default, _m(F16, True, 1220, 21.0)])
    assert chosen == DEFAULT


def test_calibration_picks_an_exact_pair_over_a_faster_inexact_one(tiny_model_path: Path, calibrating: Path) -> None:
    """f16 K and V made inexact on purpose: without Hearth's batch-invariant flash attention
    (``GGML_CPU_FA_BATCH_INVARIANT=0``, in a process of its own: llama.cpp reads it once) they
    take the tiled path for ubatches of 64 rows or more and the one-chunk path for fewer, so a
    prompt read in other chunks ends on other logits. The calibration's checks find that on
    the real model and leave the pair out, whatever its speed."""
    env = {**os.environ, FA_ENV: "0", kv_calibration.ENV: "on"}
    out = subprocess.run(
        [sys.executable, "-m", "app.engine.llama.calibrate_cmd", str(tiny_model_path), "--threads", "1",
         "--rounds", "1", "--candidates", "f16/f16,q8_0/f16,q8_0/q8_0"],
        env=env, capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[3],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (entry,) = json.loads(calibrating.read_text()).values()
    by = {m["candidate"]: m for m in entry["measured"]}
    assert not by[F16.name]["exact"] and "chunking" in by[F16.name]["failed"] and by[F16.name]["worst"] > 0
    assert by[DEFAULT.name]["exact"] and by[Q8.name]["exact"]
    assert by[DEFAULT.name]["prefill_ms"] > 0 and by[Q8.name]["tick_ms"] > 0
    assert (entry["type_k"], entry["type_v"]) in {(DEFAULT.type_k, DEFAULT.type_v), (Q8.type_k, Q8.type_v)}
    assert "not exact here: f16 K+V" in entry["why"]
    assert "f16 K+V" in out.stdout and "chosen:" in out.stdout  # hearth calibrate's table


def test_with_batch_invariant_flash_attention_f16_kv_is_a_calibrated_candidate(
        tiny_model_path: Path, calibrating: Path) -> None:
    choice, measured = kv_calibration.calibrate(str(tiny_model_path), [F16, DEFAULT], n_threads=1, rounds=1)
    by = {m.candidate: m for m in measured}
    assert by[F16].exact and by[F16].prefill_ms > 0, by[F16]
    assert by[DEFAULT].exact
    assert choice.calibrated and kv_calibration.lookup(str(tiny_model_path)) == choice


def test_a_new_cpu_or_build_calibrates_again(tiny_model_path: Path, calibrating: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tiny_model_path)
    kv_calibration.calibrate(path, [DEFAULT, Q8], n_threads=1, rounds=1)
    assert kv_calibration.lookup(path) is not None
    started: list[str] = []
    monkeypatch.setattr(kv_calibration, "start_background", started.append)
    monkeypatch.setattr(kv_calibration, "_background", threading.Event())
    kv_calibration.allow_background()
    assert kv_calibration.resolve(path).calibrated and not started

    real_build = native_probe.build_identity
    monkeypatch.setattr(native_probe, "build_identity", lambda: real_build() + "\nanother llama.cpp build")
    assert kv_calibration.lookup(path) is None
    choice = kv_calibration.resolve(path)
    assert not choice.calibrated and (choice.type_k, choice.type_v) == (DEFAULT.type_k, DEFAULT.type_v)
    assert started == [path]

    monkeypatch.setenv(kv_calibration.ENV, "cached")  # hearth bench: never start one
    assert not kv_calibration.resolve(path).calibrated and started == [path]
    monkeypatch.setenv(kv_calibration.ENV, "on")

    monkeypatch.setattr(native_probe, "build_identity", real_build)
    real_cpu = native_probe.cpu_identity
    monkeypatch.setattr(native_probe, "cpu_identity", lambda: "Another CPU | sse2 avx2")
    assert kv_calibration.lookup(path) is None
    kv_calibration.resolve(path)
    assert started == [path, path]
    monkeypatch.setattr(native_probe, "cpu_identity", real_cpu)
    assert kv_calibration.lookup(path) is not None  # the first machine's result is still there

    # Other kernel switches (what is exact depends on them): another calibration too.
    for env in (weight_kernels.FA_ENV, weight_kernels.MM_ENV, weight_kernels.TILED_ENV):
        with monkeypatch.context() as m:
            m.setenv(env, "1" if env == weight_kernels.TILED_ENV else "0")
            assert kv_calibration.lookup(path) is None, env
    assert kv_calibration.lookup(path) is not None


def test_a_first_load_calibrates_in_a_child_and_the_next_load_uses_its_choice(
        tiny_model_path: Path, calibrating: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two candidates, one round, at normal priority: the suite's own workers keep both cores busy.
    monkeypatch.setattr(kv_calibration, "CHILD_OPTIONS", ["--rounds", "1", "--candidates", "q8_0/f16,q8_0/q8_0"])
    monkeypatch.setattr(kv_calibration, "BACKGROUND_NICE", 0)
    monkeypatch.setattr(kv_calibration, "_background", threading.Event())
    kv_calibration.allow_background()  # as the desktop app and `hearth serve` do
    config = ModelConfig(path=str(tiny_model_path), n_ctx=512, n_seq_max=2, n_batch=128, n_threads=1)
    with Engine(tmp_path / "data") as engine:
        first = engine.load_model("m", config)
        assert "the default while this CPU is calibrated" in first.model_info().kv_cells
        # One calibration child at a time: another kind's first load meanwhile starts none.
        assert kv_calibration.start_background(str(tiny_model_path)) is None
        kv_calibration.wait_for_background(timeout=300)
    assert calibrating.exists()
    found = kv_calibration.lookup(str(tiny_model_path))
    assert found is not None and found.calibrated
    with Engine(tmp_path / "data2") as engine:
        model = engine.load_model("m", config)
        assert model.model_info().kv_cells == found.why
        assert model.model_info().kv_cells.startswith(Candidate(found.type_k, found.type_v).name)


def test_kv_saved_under_one_pair_is_never_served_to_another(tiny_model_path: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    prompt_text = "Hearth keeps every conversation warm and never reads a prompt twice. " * 6

    def turn(type_k: str, type_v: str) -> tuple[list[int], str, int]:
        config = ModelConfig(path=str(tiny_model_path), n_ctx=512, n_seq_max=2, n_batch=128, n_threads=1,
                             type_k=type_k, type_v=type_v, tier="disk",
                             policy=CachePolicy(min_tokens=8, cold_min_tokens=16, boundary_align_tokens=16))
        with Engine(data) as engine:
            model = engine.load_model("m", config)
            prompt = model.tokenize(prompt_text)
            assert len(prompt) >= 64
            events = list(model.infer(prompt, response_tokens=8))
            stats = events[-1].stats
            return [e.id for e in events if isinstance(e, TokenId)], stats.cache_hit_kind, stats.cache_delta.read

    _, kind, _ = turn("q8_0", "f16")
    assert kind == "cold"
    _, kind, read = turn("q8_0", "f16")
    assert kind != "cold" and read > 0  # the same pair is served its saved prefix
    _, kind, read = turn("q8_0", "q8_0")
    assert (kind, read) == ("cold", 0)  # another pair is not
