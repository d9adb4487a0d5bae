"""The one memory budget over HTTP and on ``hearth serve``'s command line (issue 54):
``/hearth/status`` reports its parts and cap; ``--ctx`` × ``--parallel`` that does not fit this
machine (a fake ``MemAvailable``, ``HEARTH_MEMINFO``) is refused with the numbers, ``--fit
choose`` picks what fits and says so, ``--fit force`` loads anyway."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.memory.memory_fit import MEMINFO_ENV, read_shape
from tests.integration.server.conftest import ROOT, start_server

MiB = 1 << 20


def test_status_reports_the_budgets_parts_and_cap(tiny_model_path: Path, tmp_path: Path):
    served = start_server(tiny_model_path, tmp_path, "--ctx", "1024", "--parallel", "2")
    try:
        with served.client() as client:
            client.completions.create(model=served.model_id, prompt="Hello there", max_tokens=4)
        memory = served.get("/hearth/status")["memory"]
    finally:
        served.stop()
    shape = read_shape(tiny_model_path)
    assert shape is not None
    need = shape.need(1024, 2, n_batch=512)
    assert memory["kv"] == need.kv and memory["buffers"] == need.buffers
    assert 0 < memory["weights"] <= need.weights + 4096  # the resident pages of the mapped file
    assert memory["fixed"] > 20 * MiB  # Python, llama.cpp, SQLite: measured, never zero
    parts = sum(memory[k] for k in ("weights", "kv", "recurrent", "buffers", "pool", "ram_tier", "fixed"))
    assert parts >= memory["rss"] * 0.5 and memory["cap"] > parts
    assert memory["cap_set"] is False and memory["available"] > 0


def _serve(model: Path, data_dir: Path, *extra: str, available: int) -> subprocess.CompletedProcess[str]:
    """``hearth serve`` with a fake MemAvailable that stops once loaded (its port is taken
    here), or fails to load."""
    meminfo = data_dir / "meminfo"
    meminfo.write_text(f"MemTotal: {16 << 20} kB\nMemAvailable: {available // 1024} kB\n")
    env = {**os.environ, MEMINFO_ENV: str(meminfo)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        args = [sys.executable, "-m", "app", "--data-dir", str(data_dir), "serve", "--host", "127.0.0.1",
                "--port", str(taken.getsockname()[1]), "--model", str(model), "--threads", "2", "--no-cache", *extra]
        return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("fit", ["check", "choose", "force"])
def test_serve_refuses_chooses_or_forces(tiny_model_path: Path, tmp_path: Path, fit: str):
    shape = read_shape(tiny_model_path)
    assert shape is not None
    # Room (after the desktop's 256 MiB) for 2 chats of 2,048 tokens, not for 4.
    available = shape.need(2048, 2).total + 256 * MiB + 64 * 1024
    done = _serve(tiny_model_path, tmp_path, "--ctx", "2048", "--parallel", "4", "--fit", fit, available=available)
    if fit == "check":
        assert done.returncode == 1
        assert "(does_not_fit) does not fit: 2,048 tokens × 4 chats needs" in done.stderr
        assert "; this machine has" in done.stderr
    elif fit == "choose":
        assert "hearth serve: 2,048 tokens × 2 chats; 2,048 × 4 would need" in done.stderr, done.stderr
        assert "cannot listen on 127.0.0.1:" in done.stderr  # loaded, then port 1 is refused
    else:
        assert "hearth serve: loaded against the estimate: 2,048 tokens × 4 chats needs" in done.stderr, done.stderr
        assert "cannot listen on 127.0.0.1:" in done.stderr
