"""llama.cpp's crash probe (``app.engine.llama.native_probe``): a native crash in the probe's child
gives words and a working fallback, never a dead process. Real children, real llama.cpp; the
crash is forced with ``HEARTH_PROBE_CRASH`` (the child raises the signal right before its
decode), since no CPU here has the broken kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine import Engine, ModelConfig
from app.engine.events import TokenId
from app.engine.llama import native_probe
from app.engine.llama.native_probe import NativeCrash, NativeSettings

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def probe_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A findings file of the test's own, and a process that has not probed yet (and will
    probe afresh, unforced, after the test)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    native_probe.reset_for_tests()
    yield tmp_path
    native_probe.reset_for_tests()


def _config(path: Path) -> ModelConfig:
    return ModelConfig(path=str(path), n_ctx=512, n_seq_max=1, n_batch=64, cache_enabled=False)


def _greedy(engine: Engine, model_id: str, n: int) -> list[int]:
    model = engine.get_model(model_id)
    ids: list[int] = []
    for event in model.infer(model.tokenize("A hearth is the floor of a fireplace."), response_tokens=n, temperature=0.0):
        if isinstance(event, TokenId):
            ids.append(event.id)
    return ids


def test_a_crash_with_extra_buffer_types_falls_back_and_says_so(
    probe_env: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Engine(probe_env / "data") as engine:
        engine.load_model("clean", _config(tiny_model_path))
        assert engine.native_notice is None
        clean = _greedy(engine, "clean", 8)
    native_probe.reset_for_tests()
    monkeypatch.setenv(native_probe.CRASH_ENV, "SIGILL:extra_bufts")
    with Engine(probe_env / "data") as engine:
        engine.load_model("m", _config(tiny_model_path))
        assert native_probe.active() == NativeSettings(use_extra_bufts=False)
        notice = engine.native_notice or ""
        assert "SIGILL (illegal instruction)" in notice
        assert "without extra buffer types" in notice and "which runs here" in notice
        assert "libggml-cpu" in notice  # which library was running
        # The model loaded the safer way decodes (the tiny Q8_0 model: the same tokens).
        assert _greedy(engine, "m", 8) == clean
    # The finding is kept for this build + CPU: the next process does not probe again.
    findings = json.loads(native_probe.findings_path().read_text())
    assert findings["settings"] == {"use_extra_bufts": False, "max_threads": None}
    assert findings["key"] == native_probe.probe_key()


def test_the_fallback_changes_the_cache_identity() -> None:
    from app.engine.llama.llama_info import ctx_params_hash

    default = ctx_params_hash("q8_0", "f16", True)
    assert ctx_params_hash("q8_0", "f16", True, extra_bufts=True) == default
    assert ctx_params_hash("q8_0", "f16", True, extra_bufts=False) != default


def test_a_crash_everywhere_refuses_the_load_in_words(
    probe_env: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(native_probe.CRASH_ENV, "SIGILL")
    with Engine(probe_env / "data") as engine, pytest.raises(NativeCrash) as caught:
        engine.load_model("m", _config(tiny_model_path))
    text = str(caught.value)
    assert "crashes on this CPU" in text and "loads no model here" in text
    assert text.count("SIGILL") == len(native_probe.CANDIDATES)  # every candidate was tried
    assert "docs/llama-cpp-build.md" in text
    assert engine.list_models() == []


def test_hearth_chat_says_it_rather_than_dying(tmp_path: Path, tiny_model_path: Path) -> None:
    """The command line as a user meets it: exit 1 with the words, not a signal."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT))
    env[native_probe.CRASH_ENV] = "SIGILL"
    proc = subprocess.run(
        [sys.executable, "-m", "app", "--data-dir", str(tmp_path / "d"), "chat", "hi",
         "--model", str(tiny_model_path), "--max-tokens", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "(native_crash)" in proc.stderr and "SIGILL (illegal instruction)" in proc.stderr


def test_findings_are_redone_when_the_cpu_or_build_changes(
    probe_env: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []
    real = native_probe._run_child

    def counting(model: str, settings: NativeSettings) -> tuple[int, str, str]:
        runs.append(model)
        return real(model, settings)

    monkeypatch.setattr(native_probe, "_run_child", counting)
    native_probe.ensure(str(tiny_model_path))
    assert len(runs) == 1
    native_probe.reset_for_tests()
    native_probe.ensure(str(tiny_model_path))  # a new process, same build and CPU: kept
    assert len(runs) == 1
    native_probe.reset_for_tests()
    cpu = native_probe.cpu_identity()
    monkeypatch.setattr(native_probe, "cpu_identity", lambda: cpu + " amx_tile")
    native_probe.ensure(str(tiny_model_path))
    assert len(runs) == 2
    native_probe.reset_for_tests()
    build = native_probe.build_identity()
    monkeypatch.setattr(native_probe, "build_identity", lambda: build + "\nlibggml-cpu-new.so:1:1")
    native_probe.ensure(str(tiny_model_path))
    assert len(runs) == 3


def test_signal_names() -> None:
    assert native_probe.signal_name(-4) == "SIGILL (illegal instruction)"
    assert native_probe.signal_name(-11).startswith("SIGSEGV")
    assert native_probe.signal_name(3) == "exit status 3"


def test_a_child_that_fails_without_a_crash_is_no_finding(
    probe_env: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    """The probe's model cannot be read (an ordinary error, exit 2): loads go on with
    llama.cpp's defaults, nothing is kept, and the next process probes again."""
    bogus = tmp_path / "broken.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)
    result = native_probe.ensure(str(bogus))
    assert result.settings == NativeSettings() and result.notice is None
    assert "cannot load" in result.inconclusive
    assert not native_probe.findings_path().exists()
    native_probe.reset_for_tests()
    assert native_probe.ensure(str(tiny_model_path)).inconclusive == ""
    assert native_probe.findings_path().exists()
