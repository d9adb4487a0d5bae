"""The llama-server peer code of B13 and B14 against a stand-in server (tests/helpers/
fake_llama_server.py, llama-server's command line and stream format): what they send, how they
read the stream, and what they make of it. That the real binary takes the same requests is
checked by hand (docs/benchmarks.md, "llama-server")."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from benchmarks import scenarios_documents, scenarios_tools
from benchmarks.run import LLAMA_SERVER, default_llama_server, main
from tests.helpers import fake_llama_server


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    log = tmp_path / "server.log"
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\nexec {sys.executable} {fake_llama_server.__file__} \"$@\"\n", encoding="utf-8")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_LLAMA_SERVER_LOG", str(log))
    return str(binary), log


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_b13_peer_reads_each_reply_to_its_end_with_cache_ram(fake: tuple[str, Path]) -> None:
    binary, log = fake
    doc = list(range(100, 400))
    prompts = {"cold": [*doc, 1, 2], "second": [*doc, 1, 2, *[7] * scenarios_documents.N_NEW, 3],
               "new_chat": [*doc, 4], "restart": [*doc, 5], "typed": [*doc, 6]}  # fmt: skip
    out = scenarios_documents.llama_server(binary, "model.gguf", prompts)
    assert set(out) == set(prompts) and all(ms > 0 for ms in out.values())
    entries = _log(log)
    starts = [e["argv"] for e in entries if "argv" in e]
    assert len(starts) == 3  # the first server, the restart's and the paste-and-send one's
    assert all("--cache-ram" in argv and argv[argv.index("-np") + 1] == "1" for argv in starts)
    served = [e for e in entries if "prompt_n" in e]
    # read to the end: a reply left behind keeps the one slot busy and delays the next prompt
    assert [e["abandoned"] for e in served] == [False] * 5
    assert [e["prompt_n"] for e in served] == [302, 1, 1, 301, 301]


def test_b14_peer_counts_new_and_prefilled_tokens_per_step(fake: tuple[str, Path]) -> None:
    binary, _ = fake
    first = list(range(100, 400))
    second = [*first, *[7] * scenarios_tools.N_NEW, *range(500, 540)]  # held + tool result
    third = [*second, *[7] * scenarios_tools.N_NEW, *range(600, 610)]
    steps = scenarios_tools.llama_server(binary, "model.gguf", [first, second, third], "root ::= \"x\"")
    assert [(s.prompt, s.new, s.prefilled) for s in steps] == [(300, 300, 300), (468, 40, 40), (606, 10, 10)]
    assert all(s.ttft_ms > 0 and s.call_ms >= s.ttft_ms for s in steps)


def test_hearth_bench_uses_the_built_llama_server_unless_told(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.run as run

    assert LLAMA_SERVER.endswith("build/llama-server/llama-server")
    built = tmp_path / "llama-server"
    monkeypatch.setattr(run, "LLAMA_SERVER", str(built))
    assert default_llama_server() is None
    built.write_text("#!/bin/sh\n", encoding="utf-8")
    built.chmod(0o755)
    assert default_llama_server() == str(built)
    seen: list[str | None] = []
    monkeypatch.setattr(run, "_scenarios", lambda path, args: seen.append(args.llama_server) or {})
    with pytest.raises(SystemExit):  # (no scenario by that name: it stops after reading the arguments)
        main(["--only", "nothing", "--model", "m.gguf", "--llama-server", "none"])
    assert seen == [None]
