"""``hearth`` / ``python -m app``: the GUI by default, or ``chat``, ``serve``, ``bench``, ``calibrate``, ``cache``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app import __version__


def _data_dir(value: str | None) -> Path:
    from app.storage.paths import data_dir

    return data_dir(value)


def cmd_chat(args: argparse.Namespace) -> int:
    """One chat turn, headless: the model's own chat template, the reply streamed to stdout."""
    from app.engine import Engine, EngineError, ModelConfig
    from app.engine.events import Done, Error, Token
    from app.models.default_model import default_model_path

    path = args.model or str(default_model_path())
    engine = Engine(_data_dir(args.data_dir))
    try:
        model = engine.load_model(
            "chat",
            ModelConfig(path=path, n_ctx=args.ctx, n_seq_max=1, n_threads=args.threads, tier="disk"),
        )
        messages = [{"role": "user", "content": args.prompt}]
        tokens = model.apply_chat_template({"messages": messages, "system": args.system})
        stream = model.infer(tokens, response_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
        for event in stream:
            if isinstance(event, Token):
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Error):
                print(f"\nerror: {event.reason}", file=sys.stderr)
                return 1
            elif isinstance(event, Done) and args.verbose:
                s = event.stats
                print(
                    f"\n[{s.completion_tokens} tokens, ttft {s.ttft_ms:.0f} ms, "
                    f"cache {s.cache_hit_kind}, read {s.cache_delta.read}]",
                    file=sys.stderr,
                )
        sys.stdout.write("\n")
        return 0
    except EngineError as exc:
        print(f"error ({exc.code}): {exc}", file=sys.stderr)
        return 1
    finally:
        engine.close()


def cmd_cache(args: argparse.Namespace) -> int:
    from app.cache import cli

    handler = getattr(cli, f"cmd_{args.action}")
    result: int = handler(_data_dir(args.data_dir) / "cache", sys.stdout)
    return result


def cmd_bench(args: argparse.Namespace) -> int:
    from benchmarks.run import main as bench_main

    result: int = bench_main(args.extra)
    return result


def cmd_gui(args: argparse.Namespace) -> int:
    from app.ui.app import main as gui_main

    if args.data_dir:
        os.environ["HEARTH_DATA_DIR"] = args.data_dir
    result: int = gui_main()
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hearth", description="Local language models that never make you wait twice.")
    parser.add_argument("--version", action="version", version=f"hearth {__version__}")
    parser.add_argument("--self-test", action="store_true", help="check this installation headless (default model, one turn, cache save+restore) and exit")
    parser.add_argument("--data-dir", help="where conversations and the KV cache live (default: HEARTH_DATA_DIR or the user data dir)")
    sub = parser.add_subparsers(dest="command")

    chat = sub.add_parser("chat", help="run one chat turn headless")
    chat.add_argument("prompt")
    chat.add_argument("--model", help="a GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    chat.add_argument("--max-tokens", type=int, default=256)
    chat.add_argument("--temperature", type=float, default=0.0)
    chat.add_argument("--seed", type=int, default=0xFFFFFFFF)
    chat.add_argument("--system", default=None)
    chat.add_argument("--ctx", type=int, default=4096)
    chat.add_argument("--threads", type=int, default=None)
    chat.add_argument("-v", "--verbose", action="store_true", help="print timing and cache stats")
    chat.set_defaults(func=cmd_chat)

    from app.server.cli import add_parser as add_serve_parser

    add_serve_parser(sub)

    bench = sub.add_parser(
        "bench", add_help=False,
        help="run the benchmark suite with its peers side by side (--json FILE, --only B1,B3, "
        "--llama-server PATH, --markdown FILE; see `hearth bench --help`)",
    )
    bench.set_defaults(func=cmd_bench)

    sub.add_parser(  # dispatched in main() before this parser: its options are its own
        "calibrate", add_help=False,
        help="time the exact KV cell types on this CPU for a model and keep the fastest "
        "(MODEL [--threads N] [--rounds N] [--candidates q8_0/f16,q8_0/q8_0]; see `hearth calibrate --help`)",
    )

    cache = sub.add_parser("cache", help="inspect and repair the KV cache")
    cache.add_argument("action", choices=["ls", "stats", "gc", "verify"])
    cache.set_defaults(func=cmd_cache)

    gui = sub.add_parser("gui", help="start the desktop app (the default)")
    gui.set_defaults(func=cmd_gui)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--template-worker"]:  # the bundle's chat-template worker (app.engine.chat_template)
        from app.jinja_sandbox import main as template_worker

        return template_worker(argv[1:])
    if argv[:1] == ["--mcp-guard"]:  # the bundle's guard of a stdio MCP server's output (app.tools.guard)
        from app.tools.guard import main as mcp_guard

        return mcp_guard(argv[1:])
    if argv[:1] == ["--native-probe"]:  # the bundle's crash probe child (app.engine.llama.native_probe)
        from app.engine.llama.native_probe import main as probe_child

        return probe_child(argv[1:])
    if argv[:1] in (["--kv-calibrate"], ["calibrate"]):  # `hearth calibrate`, and the bundle's background child
        from app.engine.llama.calibrate_cmd import main as calibrate

        return calibrate(argv[1:])
    parser = build_parser()
    # `hearth bench` hands its own options to benchmarks.run; every other command is strict.
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "func", None) is not cmd_bench:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    if args.self_test:
        from app.selftest import run_self_test

        return run_self_test()
    func = getattr(args, "func", cmd_gui)
    return int(func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
