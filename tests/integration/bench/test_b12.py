"""B12's machinery on the tiny model: a round runs each request with speculation on and off
and the raw loop on the same prompts, finds the replies identical, and reports rates. (The
figures themselves belong to ``hearth bench --only B12`` on SmolLM2.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import Engine, ModelConfig
from benchmarks import scenarios_spec
from benchmarks.scenarios_spec import CHAT, REWRITE, Part, Run, _decode_rate


def test_the_decode_rate_counts_tokens_after_every_first_token():
    a = Run(ids=[1, 2, 3, 4], stamps=[0.0, 1.0, 2.0, 3.0])
    b = Run(ids=[5, 6], stamps=[1.0, 1.5])
    assert _decode_rate([a]) == pytest.approx(3 / 3.0)
    # From 1.0 (b's first token) to 3.0 (the last): a's tokens at 2.0 and 3.0, b's at 1.5.
    assert _decode_rate([a, b]) == pytest.approx(3 / 2.0)


def test_a_round_compares_on_off_and_raw(tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(scenarios_spec, "MAX_TOKENS", 12)
    with Engine(tmp_path) as engine:
        model = engine.load_model("m", ModelConfig(path=str(tiny_model_path), n_ctx=1024, n_seq_max=4,
                                                   n_threads=2, cache_enabled=False))  # fmt: skip
        alone = Part("a", "one at a time", [REWRITE[2]], together=False)
        together = Part("c", "together", [REWRITE[2], CHAT[0]], together=True)
        for part in (alone, together):
            part.round(model, str(tiny_model_path))
            assert part.identical
            assert part.on[0] > 0 and part.off[0] > 0 and part.raw[0] > 0
            assert part.ratios == [part.on[0] / part.off[0]]
            assert part.accepted <= part.drafted
