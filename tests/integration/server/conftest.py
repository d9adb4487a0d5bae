"""``hearth serve`` in a subprocess, and clients for it (the official ``openai`` package)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.helpers import waiting
from tests.helpers.llama_threads import LLAMA_THREADS

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Served:
    proc: subprocess.Popen[str]
    base_url: str
    model_id: str
    api_key: str | None = None
    log_path: Path | None = None

    def client(self, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=kw.pop("api_key", self.api_key or "unused"),
                             max_retries=0, timeout=kw.pop("timeout", 300), **kw)

    def get(self, path: str) -> Any:
        """A Hearth-specific endpoint (``/hearth/status``), with the key if there is one."""
        req = urllib.request.Request(self.base_url.removesuffix("/v1") + path)
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def start_server(model: Path, data_dir: Path, *extra: str, api_key: str | None = None) -> Served:
    args = [sys.executable, "-m", "app", "--data-dir", str(data_dir), "serve", "--port", "0",
            "--model", str(model), "--threads", str(LLAMA_THREADS), *extra]
    if api_key:
        args += ["--api-key", api_key]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("HEARTH_API_KEY", None)
    # The server's log goes to a file: a pipe nobody reads would block it once full.
    log_path = data_dir / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("hearth serve: model"):
            model_id = line.split("'")[1]
            return Served(proc, line.rsplit(" at ", 1)[1].strip(), model_id, api_key, log_path)
    proc.kill()
    raise RuntimeError(f"hearth serve did not start: {log_path.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def served(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The tiny model behind ``hearth serve``; small limits so the 413 paths are cheap to hit."""
    server = start_server(tiny_model_path, tmp_path_factory.mktemp("serve"), "--ctx", "1024",
                          "--max-body-bytes", "65536")
    try:
        yield server
    finally:
        server.stop()


def wait_until(check: Any, timeout: float = 60.0, every: float = 0.05) -> Any:
    """Poll ``check()`` until it returns something truthy (a deadline, not a timing assertion);
    ``tests.helpers.waiting.wait_until`` with a deadline long enough for a server round trip."""
    return waiting.wait_until(check, timeout, every)
