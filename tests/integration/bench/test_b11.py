"""B11's machinery on the tiny model, fast: the window is typed into with key events with
type-ahead on and off, each turn's TTFT is measured, the replies are the same, the on turns
were read ahead, and the streaming chat's rates are measured. (The figures themselves belong
to ``hearth bench --only B11`` on SmolLM2.)"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from benchmarks.scenarios_typeahead import b11_type_ahead
from tests.ui.conftest import ASCII_GRAMMAR


def test_a_short_b11_on_the_tiny_model(qapp, tiny_model_path: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the run's data dir is made
    result = b11_type_ahead(
        str(tiny_model_path),
        turns=("Hello there, how are you today?", "Tell me about the river and its bridges.",
               "And which of them is the oldest one?"),
        paste=" ".join(f"Line {i}: barges of coal and wine pass the quays." for i in range(30)),
        question="What do the barges carry?",
        cps=25.0,
        word_pause_s=0.35,  # past type-ahead's pause: each word is read
        reply_tokens=8,
        stream_tokens=400,
        stream_turn=1,
        model_options={"n_ctx": 2048, "n_seq_max": 4, "n_batch": 64},
        grammar=ASCII_GRAMMAR,
        timeout_s=120.0,
    )  # fmt: skip
    assert not list(tmp_path.glob("hearth-b11-*"))  # its data dir is gone once the window is closed
    f = result.figures
    assert f["same_replies"], result.note
    assert len(f["ttft_on_ms"]) == len(f["ttft_off_ms"]) == len(f["ttft_floor_ms"]) == 4
    assert all(t > 0 and math.isfinite(t) for t in f["ttft_on_ms"] + f["ttft_off_ms"] + f["ttft_floor_ms"])
    assert all(n > 0 for n in f["tokens_read_ahead"]), f["tokens_read_ahead"]
    assert f["tokens_read_ahead"][-1] > 200  # the paste was read while the question was typed
    assert f["read_aheads_sent"] >= 4
    # the Enter floors: the backend alone reading what each turn read after Enter
    assert len(f["enter_floor_on_ms"]) == len(f["enter_floor_off_ms"]) == 4
    assert all(t > 0 and math.isfinite(t) for t in f["enter_floor_on_ms"] + f["enter_floor_off_ms"])
    on_after, off_after = f["read_after_enter_on"], f["read_after_enter_off"]
    assert all(0 < a < b for a, b in zip(on_after, off_after, strict=True)), (on_after, off_after)
    assert all(v > 0 for v in f["stream_tok_s"].values()), f["stream_tok_s"]
    # the GUI loop's turns while typing (the paste being read, other messages, next to a stream)
    loops = f["gui_loop_ms"]
    assert len(loops) == 4 and all(v["n"] > 0 and 0 < v["p99"] <= v["max"] for v in loops.values()), loops
    assert result.met in (True, False)
    assert "paste + question" in result.table()
