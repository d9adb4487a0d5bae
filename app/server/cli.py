"""``hearth serve``: the OpenAI-compatible server, headless, on one model."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from app.server.config import (
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT,
    ServerConfig,
    ServerConfigError,
)

log = logging.getLogger(__name__)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    serve: argparse.ArgumentParser = sub.add_parser("serve", help="serve the OpenAI-compatible API on one model (headless)")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}; "
                       "any non-loopback address needs --api-key)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 = any free port")
    serve.add_argument("--model", help="a GGUF path, or the name of a model in the library "
                       "(default: the bundled SmolLM2-135M-Instruct)")
    serve.add_argument("--model-id", help="the id clients send as 'model' (default: the file name without .gguf)")
    serve.add_argument("--api-key", default=os.environ.get("HEARTH_API_KEY"),
                       help="require 'Authorization: Bearer KEY' (default: HEARTH_API_KEY)")
    serve.add_argument("--ctx", type=int, default=4096, help="context per conversation (tokens)")
    serve.add_argument("--parallel", type=int, default=4, help="sequences decoded together (n_seq_max)")
    serve.add_argument("--fit", choices=("check", "choose", "force"), default="check",
                       help="check: refuse a --ctx × --parallel that does not fit this machine's memory "
                       "(default); choose: the largest that fits, up to them; force: load anyway")
    serve.add_argument("--memory-cap", type=_bytes, default=None,
                       help="the most memory Hearth may take, e.g. 1.5G (default: what the machine has, "
                       "less a fifth left to the desktop)")
    serve.add_argument("--threads", type=int, default=None)
    serve.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    serve.add_argument("--max-prompt-tokens", type=int, default=None, help="default: the context")
    serve.add_argument("--cors-origin", action="append", default=[], help="allow this browser origin (repeatable)")
    serve.add_argument("--no-cache", action="store_true", help="do not use the KV cache (for comparisons)")
    serve.add_argument("--fast-prefill", action="store_true",
                       help="flash attention off: prompts read faster on a CPU, but replies are not bit-identical "
                       "across batch shapes (one after a cache restore can differ from the same one computed cold)")
    serve.set_defaults(func=cmd_serve)
    return serve


def _bytes(text: str) -> int:
    """"1.5G", "800M", "1073741824" → bytes (binary units)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1.5G, 800M)") from None


def resolve_model(value: str | None, data_dir: Path) -> Path:
    """A path, or a library model's name; never a path taken from a request."""
    from app.models.default_model import default_model_path
    from app.models.library import ModelLibrary

    if value is None:
        return default_model_path()
    path = Path(value).expanduser()
    if path.is_file():
        return path
    entries = ModelLibrary(data_dir / "models").scan()
    for entry in entries:
        if entry.name.lower() == value.lower() and not entry.is_broken and not entry.is_adapter:
            return entry.path
    names = ", ".join(e.name for e in entries if not e.is_adapter) or "none"
    raise SystemExit(f"hearth serve: no file or library model named {value!r} (library: {names})")


def model_config(path: str, args: argparse.Namespace) -> Any:
    """The app's model settings (``app.ui.app.default_model_config``: desktop cache policy,
    disk tier), without importing Qt."""
    from app.cache.policy import DESKTOP_POLICY
    from app.engine import ModelConfig

    return ModelConfig(path=path, n_ctx=args.ctx, n_seq_max=args.parallel, n_batch=512, n_threads=args.threads,
                       policy=DESKTOP_POLICY, tier="disk", cache_enabled=not args.no_cache,
                       flash_attn=not args.fast_prefill)


def cmd_serve(args: argparse.Namespace) -> int:
    from app.engine import Engine, EngineError
    from app.server.app import create_app
    from app.server.thread import ServerThread
    from app.storage.paths import data_dir

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ServerConfig(host=args.host, port=args.port, api_key=args.api_key,
                              max_body_bytes=args.max_body_bytes, max_prompt_tokens=args.max_prompt_tokens,
                              cors_origins=tuple(args.cors_origin))
    except ServerConfigError as exc:
        print(f"hearth serve: {exc}", file=sys.stderr)
        return 2
    base = data_dir(args.data_dir)
    path = resolve_model(args.model, base)
    model_id = args.model_id or path.stem
    from app.engine.llama.kv_calibration import allow_background

    allow_background()  # a model's first load on this CPU calibrates its KV cell types in a child
    engine = Engine(base, memory_cap=args.memory_cap)
    try:
        engine.load_model(model_id, model_config(str(path), args), fit=args.fit)
        if model_id in engine.fit_words:
            print(f"hearth serve: {engine.fit_words[model_id]}", file=sys.stderr, flush=True)
        if engine.native_notice:  # llama.cpp crashed in the probe; a safer setting runs
            print(f"hearth serve: {engine.native_notice}", file=sys.stderr, flush=True)
        server = ServerThread(create_app(engine, config), config, log_level="warning")
        try:
            server.start()
        except OSError as exc:
            print(f"hearth serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        # One line a script can wait for (tests read the port from it when --port 0).
        print(f"hearth serve: model {model_id!r} at {server.base_url}", flush=True)
        _wait_for_signal()
        server.stop()
        return 0
    except EngineError as exc:
        hint = " (--fit choose takes what fits; --fit force loads anyway)" if exc.code == "does_not_fit" else ""
        print(f"hearth serve: ({exc.code}) {exc}{hint}", file=sys.stderr)
        return 1
    finally:
        engine.close()


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
