"""B14's machinery on the tiny model, fast: two forced tool steps through the app's engine path
and through ``hearth serve``, their floors and the llama-cpp-python peer. (The figures belong
to ``hearth bench --only B14`` on SmolLM2.)"""

from __future__ import annotations

import tempfile
from pathlib import Path

import benchmarks.scenarios_tools as tools_scenario


def test_a_short_b14_on_the_tiny_model(tiny_model_path: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(tools_scenario, "N_STEPS", 2)
    monkeypatch.setattr(tools_scenario, "N_CTX", 2048)
    monkeypatch.setattr(tools_scenario, "SIZES", (60, 90))
    monkeypatch.setattr(tools_scenario, "N_NEW", 96)
    # The random tiny model writes strings without end: a tool whose arguments are integers.
    add = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
    monkeypatch.setattr(tools_scenario.agent_trace, "tools", lambda kind: [add])
    result = tools_scenario.b14_tools(str(tiny_model_path))
    steps = result.figures["steps"]
    assert len(steps["app"]) == len(steps["server"]) == 2
    assert all(s["new"] > 0 for s in steps["app"] + steps["server"])
    # each later step read only what was new (the tool result and the turn markers)
    for path in ("app", "server"):
        later = steps[path][1]
        assert later["prefilled"] <= 1.05 * later["new"], (path, later)
        assert later["new"] < later["prompt"] / 2, (path, later)
    assert len(result.figures["floors_ms"]) == 2 and all(f > 0 for f in result.figures["floors_ms"])
    assert "llama-cpp-python (LlamaRAMCache)" in steps
    assert all("<tool_call>" in c for c in result.figures["calls"])
