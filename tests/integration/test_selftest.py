"""``hearth --self-test`` and ``hearth --version`` as a user runs them: real subprocesses,
the default SmolLM2 model, no Qt, no network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import __version__

ROOT = Path(__file__).resolve().parents[2]
HEARTH = Path(sys.executable).with_name("hearth")


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("QT_QPA_PLATFORM", None)  # the self-test needs no Qt at all
    return env


@pytest.mark.smollm2
@pytest.mark.timeout(60)
def test_self_test_passes(smollm2_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app", "--self-test"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("hearth self-test:")]
    assert len(lines) == 1, proc.stdout
    assert lines[0].startswith("hearth self-test: PASS (")
    assert "Paris" in lines[0] and "reopened from disk" in lines[0]


def test_self_test_names_the_failing_step(tmp_path: Path) -> None:
    from app.selftest import run_self_test

    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"GGUF but not really")
    out = tmp_path / "out.txt"
    with out.open("w") as fh:
        code = run_self_test(bogus, out=fh, data_dir=tmp_path / "data")
    assert code == 1
    assert out.read_text().startswith("hearth self-test: FAIL at load: ")


@pytest.mark.parametrize("command", ["console-script", "module"])
def test_version(command: str) -> None:
    if command == "console-script":
        if not HEARTH.exists():
            pytest.skip(f"no console script at {HEARTH}")
        argv = [str(HEARTH), "--version"]
    else:
        argv = [sys.executable, "-m", "app", "--version"]
    proc = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"hearth {__version__}"


def test_resources_are_found_and_match_the_code() -> None:
    from app.cache.policy import DESKTOP_POLICY, CachePolicy
    from app.resources import ICON_SIZES, app_icon_path, load_default_settings, resource_path

    assert resource_path("icons", "hearth.svg") == app_icon_path()
    assert all(app_icon_path(size).is_file() for size in (None, *ICON_SIZES))
    settings = load_default_settings()
    assert CachePolicy(**settings["cache_policy"]) == DESKTOP_POLICY
    raw = json.loads(resource_path("defaults", "settings.json").read_text("utf-8"))
    assert set(raw["cache_quotas_bytes"]) == {"ram", "ram_file", "disk"}


def test_bundle_lookup_of_the_default_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app import resources
    from app.models import default_model

    gguf = tmp_path / "models" / default_model.GGUF_NAME
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    (tmp_path / "resources" / "icons").mkdir(parents=True)
    (tmp_path / "resources" / "icons" / "hearth.svg").write_text("<svg/>")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    resources.resources_root.cache_clear()
    try:
        assert default_model.default_model_path() == gguf
        assert resources.resource_path("icons", "hearth.svg") == tmp_path / "resources" / "icons" / "hearth.svg"
    finally:
        resources.resources_root.cache_clear()
