"""Hostile-input trials for docs/reliability.md: names, templates, files, configs, API calls.

The hostile values are the ones the regression tests use (imported from ``tests/``), so the
table and the tests cannot drift apart; the API trial adds Hypothesis-drawn call sequences.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tools.reliability_trials import ROOT, Trial

log = logging.getLogger(__name__)


def hostile_hub_names(scratch: Path) -> Trial:
    from app.models.hub import HubClient, HubError
    from tests.helpers.hub_server import HubServer, make_gguf_bytes
    from tests.integration.models.test_hub_hostile import BAD_FILES, BAD_REPOS

    t = Trial("hostile Hub repo ids and file names; wrong files",
              "refused before any request; nothing written outside the models dir; "
              "only a file with the Hub's checksum is installed")
    good = make_gguf_bytes(seed=1)
    models, partial = scratch / "root" / "models", scratch / "root" / "partial"
    served_names = ["../escape.gguf", "sub/../../x.gguf", "/abs.gguf", "a\\b.gguf", "x.gguf\n", "./y.gguf"]
    with HubServer() as hub:
        hub.add_repo("acme/Tiny-GGUF", {"tiny-Q4_K_M.gguf": good, **{n: good for n in served_names}})
        hub.add_file("acme/Tiny-GGUF", "bad-Q4_K_M.gguf", good, corrupt=True)
        client = HubClient(hub.endpoint, models_dir=models, downloads_dir=partial, backoff_base_s=0.01,
                           backoff_max_s=0.02)
        for repo, name in [(r, "tiny-Q4_K_M.gguf") for r in BAD_REPOS] + [("acme/Tiny-GGUF", f) for f in BAD_FILES + served_names]:
            t.trials += 1
            try:
                client.download(repo, name)
                t.fail(f"download({repo!r}, {name!r}) was accepted")
            except HubError as exc:
                if exc.kind != "invalid":
                    t.fail(f"download({repo!r}, {name!r}): {exc.kind}, not invalid")
        t.trials += 1
        try:
            client.download("acme/Tiny-GGUF", "bad-Q4_K_M.gguf")
            t.fail("a download with the wrong checksum was installed")
        except HubError as exc:
            if exc.kind != "checksum_mismatch":
                t.fail(f"wrong checksum: {exc.kind}")
        dest = client.installed_path("acme/Tiny-GGUF", "tiny-Q4_K_M.gguf")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(bytes(reversed(good)))
        t.trials += 1
        if client.download("acme/Tiny-GGUF", "tiny-Q4_K_M.gguf").read_bytes() != good:
            t.fail("a wrong file of the right size was kept as installed")
    outside = [p for p in (scratch / "root").rglob("*") if p.is_file() and models not in p.parents
               and partial not in p.parents]
    outside += [p for p in scratch.iterdir() if p.name != "root"]
    for p in outside:
        t.fail(f"written outside the models dir: {p}")
    return t


def hostile_templates(scratch: Path) -> Trial:
    from tests.unit.engine.test_chat_template import _CHILD, HOSTILE, MESSAGES

    t = Trial("hostile chat templates (loops, repetition, widths, recursion, escapes, a GIL-holding "
              "C call, huge ints, ~ doubling)",
              "InvalidRequest within 5 s and 512 MiB (a worker process, killed past them); never a hang "
              "or a raw error")
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps([HOSTILE, MESSAGES]),
                          capture_output=True, text=True, cwd=ROOT, timeout=len(HOSTILE) * 61,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    results: dict[str, str] = json.loads(proc.stdout) if proc.returncode == 0 else {}
    if proc.returncode != 0:
        t.fail(f"the rendering child died: {proc.stderr[-300:]}")
    for name in HOSTILE:
        t.trials += 1
        if results.get(name) != "InvalidRequest":
            t.fail(f"{name}: {results.get(name)}")
    t.notes.append("run in a child with a 1 GiB address-space cap and a 60 s alarm per template; "
                   "each render in a worker process capped at 512 MiB and killed after 5.5 s")
    return t


_LOADER = """
import sys
from app.engine import Engine, ModelConfig
from app.engine.errors import EngineError
model_path, adapter, data = sys.argv[1], sys.argv[2], sys.argv[3]
with Engine(data) as engine:
    try:
        m = engine.load_model("m", ModelConfig(path=model_path, n_ctx=128, n_seq_max=1, n_batch=64,
                                               n_threads=1, cache_enabled=False))
        if adapter:
            m.load_adapter(adapter)
        print("loaded")
    except EngineError as exc:
        print(exc.code)
    except BaseException as exc:
        print("raw " + type(exc).__name__)
"""


def bad_model_files(scratch: Path) -> Trial:
    from tests.helpers.tiny_model import (
        ASSETS_DIR,
        ensure_foreign_lora,
        ensure_tiny_lora,
        ensure_tiny_model,
    )

    t = Trial("corrupt, truncated and foreign model and adapter files",
              "model_load_failed / adapter_load_failed, in a process that keeps running")
    model, lora, foreign = ensure_tiny_model(ASSETS_DIR), ensure_tiny_lora(ASSETS_DIR), ensure_foreign_lora(ASSETS_DIR)
    data = model.read_bytes()
    cases: list[tuple[str, Path, str, str]] = []
    for frac in (0.0, 0.001, 0.01, 0.1, 0.5, 0.9, 0.999):
        p = scratch / f"cut{frac}.gguf"
        p.write_bytes(data[: int(len(data) * frac)])
        cases.append((f"model cut at {frac:.1%}", p, "", "model_load_failed"))
    for name, content in (("random bytes", os.urandom(4096)), ("GGUF magic, then garbage", b"GGUF" + os.urandom(4092))):
        p = scratch / f"{name.replace(' ', '_')}.gguf"
        p.write_bytes(content)
        cases.append((f"model: {name}", p, "", "model_load_failed"))
    cases.append(("model: a directory", scratch, "", "model_load_failed"))
    cases.append(("model: missing", scratch / "none.gguf", "", "model_load_failed"))
    lora_data = lora.read_bytes()
    for frac in (0.0, 0.1, 0.5, 0.99):
        p = scratch / f"lora{frac}.gguf"
        p.write_bytes(lora_data[: int(len(lora_data) * frac)])
        cases.append((f"adapter cut at {frac:.0%}", model, str(p), "adapter_load_failed"))
    cases.append(("adapter for another architecture", model, str(foreign), "adapter_load_failed"))
    cases.append(("adapter: a directory", model, str(scratch), "adapter_load_failed"))
    for name, path, adapter, want in cases:
        t.trials += 1
        proc = subprocess.run([sys.executable, "-c", _LOADER, str(path), adapter, str(scratch / "data")],
                              capture_output=True, text=True, cwd=ROOT, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        got = proc.stdout.strip().splitlines()[-1:] or [f"crashed (exit {proc.returncode})"]
        if got[0] != want:
            t.fail(f"{name}: {got[0]}")
    return t


def bad_configs(scratch: Path) -> Trial:
    from app.engine import ModelConfig
    from app.engine.errors import InvalidConfig
    from tests.unit.engine.test_config import BAD

    t = Trial("bad ModelConfig values (types, ranges, n_ctx × n_seq_max past llama.cpp's uint32)",
              "InvalidConfig (code invalid_request) naming the field, before anything loads")
    for kw in BAD:
        t.trials += 1
        try:
            ModelConfig(**{"path": "m.gguf", **kw})
            t.fail(f"{kw!r} accepted")
        except InvalidConfig:
            pass
        except Exception as exc:  # noqa: BLE001
            t.fail(f"{kw!r}: raw {type(exc).__name__}")
    return t


def storage_text(scratch: Path) -> Trial:
    from app.storage import InvalidTextError, SamplingSettings, Storage

    t = Trial("bytes and lone surrogates where conversations hold text",
              "InvalidTextError before any write; what was stored still reads and exports")
    store = Storage(scratch / "hearth.db")
    try:
        conv = store.create_conversation("Chat", system_prompt="be kind")
        first = store.add_message(conv.id, None, "user", "hello")
        before = store.export_json(conv.id), store.export_markdown(conv.id)
        lone = "bad \ud800 text"
        calls: list[Any] = [
            lambda: store.add_message(conv.id, first.id, "assistant", b"raw bytes"),
            lambda: store.add_message(conv.id, None, "user", lone),
            lambda: store.add_message(conv.id, None, "assistant", "ok", thinking=lone),
            lambda: store.rename_conversation(conv.id, lone),
            lambda: store.update_conversation(conv.id, system_prompt=lone),
            lambda: store.update_conversation(conv.id, sampling=SamplingSettings(stop_sequences=("\udfff",))),
            lambda: store.create_conversation(lone),
            lambda: store.set_setting("theme", lone),
            lambda: store.search(lone),
        ]
        for i, call in enumerate(calls):
            t.trials += 1
            try:
                call()
                t.fail(f"case {i} accepted")
            except InvalidTextError:
                pass
            except Exception as exc:  # noqa: BLE001
                t.fail(f"case {i}: raw {type(exc).__name__}")
        if (store.export_json(conv.id), store.export_markdown(conv.id)) != before:
            t.fail("the stored conversation changed")
    finally:
        store.close()
    return t


def hostile_api_arguments(scratch: Path, examples: int = 120) -> Trial:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from app.engine import Engine
    from app.engine.errors import EngineError
    from tests.helpers.tiny_model import ASSETS_DIR, ensure_tiny_lora, ensure_tiny_model
    from tests.integration.engine.test_bad_input import _bad_calls
    from tests.property.test_engine_api import (
        DOCUMENTED_CODES,
        World,
        actions,
        greedy_ids,
        run_bounded,
        tiny_config,
    )

    t = Trial("hostile engine API calls (named cases + Hypothesis call sequences)",
              "returns, or an EngineError with a documented code, within a hang guard; afterwards the "
              "same greedy reply and no sequence left taken")
    model_path, lora = ensure_tiny_model(ASSETS_DIR), ensure_tiny_lora(ASSETS_DIR)
    with Engine(scratch / "data") as engine:
        model = engine.load_model("m", tiny_config(model_path))
        prompt = model.tokenize("The reply before and after the hostile calls:")
        baseline = greedy_ids(model, prompt)

        def record(kind: str, detail: Any, what: str) -> None:
            t.trials += 1
            if kind in ("hang", "raw") or (kind == "error" and detail.code not in DOCUMENTED_CODES):
                t.fail(f"{what}: {kind} {detail!r}"[:200])

        for name, call, code in _bad_calls(model, scratch, prompt):
            kind, detail = run_bounded(call)
            record(kind, detail, name)
            if kind == "error" and isinstance(detail, EngineError) and detail.code != code:
                t.fail(f"{name}: {detail.code}, expected {code}")

        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(st.lists(actions, min_size=1, max_size=6))
        def sequences(steps: list[Any]) -> None:
            world = World(model, lora, prompt)
            for i, step in enumerate(steps):
                record(*run_bounded(lambda step=step: step(world)), f"sequence step {i}")
            for handle in world.handles:
                record(*run_bounded(lambda h=handle: model.unload_adapter(h)), "unload_adapter")
            for sid in world.sessions:
                record(*run_bounded(lambda s=sid: model.end_session(s)), "end_session")

        sequences()
        if greedy_ids(model, prompt) != baseline:
            t.fail("the greedy reply changed after the hostile calls")
        free = model.model_info().available_seqs
        if free != model.config.n_seq_max:
            t.fail(f"{model.config.n_seq_max - free} seqs left taken")
    t.notes.append(f"{examples} Hypothesis call sequences (derandomized)")
    return t


HOSTILE_TRIALS = [hostile_hub_names, hostile_templates, bad_model_files, bad_configs, storage_text,
                  hostile_api_arguments]
