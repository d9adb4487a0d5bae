"""`hearth bench` runs from anywhere (the console script, not the source tree) and writes JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path


def _hearth() -> list[str]:
    exe = Path(sys.executable).with_name("hearth")
    return [str(exe)] if exe.exists() else [shutil.which("hearth") or "hearth"]


def test_bench_b5_writes_json_and_markdown(tmp_path):
    out, md = tmp_path / "out.json", tmp_path / "out.md"
    proc = subprocess.run(
        [*_hearth(), "bench", "--only", "B5", "--json", str(out), "--markdown", str(md)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    (b5,) = doc["scenarios"]
    assert b5["id"] == "B5" and b5["met"] in (True, False)
    assert b5["figures"]["hit"]["median_ms"] > 0
    assert "### B5" in md.read_text()
    assert "B5 — longest-prefix lookup" in proc.stdout


def test_bench_rejects_unknown_scenarios(tmp_path):
    proc = subprocess.run([*_hearth(), "bench", "--only", "B99"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "unknown scenario" in proc.stderr
