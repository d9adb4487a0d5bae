"""Every scenario of the exactness suite, with speculative decoding off and then forced on
(issue 29): the logits behind every generated token are bit-identical both ways.

Each scenario of ``test_exactness`` runs twice into ONE recording — first with speculation
off, then with every decode row carrying draft rows (``tests/helpers/forced_drafts``:
prompt-lookup drafts, else junk the model rejects) — and the scenario's own check,
``logits_for``, refuses any two recorded runs of one step that differ. So a verify row of the
second run is compared bit for bit with the decode row of the first, on top of what each
scenario compares (batched vs alone, restored vs cold, ...).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.engine import ModelConfig
from app.engine.llama import llama_backend
from app.engine.speculation.speculator import Speculator
from tests.helpers.forced_drafts import always_draft
from tests.helpers.logit_recorder import RecordingBackend
from tests.integration.engine import test_exactness as suite

# (the model, the drafts each decode row carries): the tiny model verifies drafts of the
# default length, every position of a 16-token draft; SmolLM2 (real weights, 49k-token logits
# recorded for every row) verifies 4-token drafts: with 16, eight seqs read 136 rows a tick
# and its scenarios took 101 s of CPU together (28 s the eight-seq one), with 4 they take 72 s.
MODELS = [pytest.param(("tiny_model_path", 16), id="tiny"),
          pytest.param(("smollm2_path", 4), id="smollm2", marks=pytest.mark.smollm2)]  # fmt: skip


def _scenarios() -> list[Any]:
    out = []
    for name, fn in vars(suite).items():
        if name.startswith("test_") and callable(fn):
            if "n_seq_max" in inspect.signature(fn).parameters:
                out += [pytest.param(name, {"n_seq_max": n}, id=f"{name}[{n}]") for n in (1, 8)]
            else:
                out.append(pytest.param(name, {}, id=name))
    return out


@pytest.fixture(params=MODELS)
def model(request: pytest.FixtureRequest) -> tuple[Path, int]:
    """The model's path and the length of the drafts forced on it."""
    fixture, draft_max = request.param
    path: Path = request.getfixturevalue(fixture)
    return path, draft_max


def _call(fn: Callable[..., None], tmp: Path, path: Path, params: dict[str, Any]) -> None:
    args: dict[str, Any] = {}
    for name in inspect.signature(fn).parameters:
        if name == "tmp_path":
            args[name] = tmp
        elif name in ("smollm2_path", "model_path"):
            args[name] = path
        else:
            args[name] = params[name]
    tmp.mkdir()
    fn(**args)


@pytest.mark.parametrize(("scenario", "params"), _scenarios())
def test_a_scenario_is_bit_identical_with_speculation_on_and_off(
    scenario: str, params: dict[str, Any], model: tuple[Path, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_path, draft_max = model
    monkeypatch.setattr(llama_backend, "LlamaBackend", RecordingBackend)
    RecordingBackend.reset()
    config = suite._config
    fn = getattr(suite, scenario)
    try:
        monkeypatch.setattr(suite, "_config", lambda *a, **kw: config(*a, **kw, speculative=False))
        _call(fn, tmp_path / "off", model_path, params)
        drafted: list[int] = []
        observe = Speculator.observe

        def counting(self: Speculator, *args: Any) -> int:
            n = observe(self, *args)
            drafted.append(n)
            return n

        always_draft(monkeypatch)
        monkeypatch.setattr(Speculator, "observe", counting)
        count_runs = suite._count_runs  # the "off" run recorded each first step as often as this one
        monkeypatch.setattr(suite, "_count_runs", lambda *a: count_runs(*a) // 2)
        monkeypatch.setattr(suite, "_config", lambda *a, **kw: config(*a, **kw, speculative=True, draft_max=draft_max))
        _call(fn, tmp_path / "on", model_path, params)  # its checks see the "off" records too
        assert sum(drafted) > 0, "the second run never drafted"
    finally:
        RecordingBackend.reset()


def test_the_suite_runs_with_the_models_default_speculation_setting() -> None:
    assert ModelConfig(path="x").speculative  # so the suite's own runs verify drafts as well
