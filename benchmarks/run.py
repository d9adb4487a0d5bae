"""``hearth bench``: run the scenarios with their peers side by side, print tables, write JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import Result, default_model


def _scenarios(path: str, args: argparse.Namespace) -> dict[str, Callable[[], Result]]:
    from benchmarks.scenarios_cache import b3_restart, b4_saves, b5_prefix
    from benchmarks.scenarios_chat import b2_chats
    from benchmarks.scenarios_decode import b1_decode, b1e_end_to_end
    from benchmarks.scenarios_disk import b8d_disk
    from benchmarks.scenarios_documents import b13_documents
    from benchmarks.scenarios_families import b8_families, checkpoint_interval_sweep
    from benchmarks.scenarios_gui import b6_gui
    from benchmarks.scenarios_kv import kv_settings
    from benchmarks.scenarios_memory import b7_memory, b15_budget
    from benchmarks.scenarios_reuse import b8_reuse
    from benchmarks.scenarios_server import b9_agent_trace
    from benchmarks.scenarios_spec import b12_speculation
    from benchmarks.scenarios_tools import b14_tools
    from benchmarks.scenarios_typeahead import b11_fresh

    return {
        "B1": lambda: b1_decode(path),
        "B1e": lambda: b1e_end_to_end(path),
        "B2": lambda: b2_chats(path, args.llama_server),
        "B3": lambda: b3_restart(path),
        "B4": lambda: b4_saves(path),
        "B5": lambda: b5_prefix(),
        "B6": lambda: _in_fresh_process(b6_gui, path),
        "B7": lambda: _in_fresh_process(b7_memory, path),
        "B8": lambda: b8_reuse(path, args.llama_server),
        "B8d": lambda: b8d_disk(path),
        "B8f": lambda: b8_families(),
        "CKPT": lambda: checkpoint_interval_sweep(),
        "B9": lambda: b9_agent_trace(path, args.llama_server),
        "B11": lambda: _in_fresh_process(b11_fresh, path),
        "B12": lambda: b12_speculation(path),
        "B14": lambda: b14_tools(path, args.llama_server),
        "B13": lambda: b13_documents(path, args.llama_server),
        "B15": lambda: _in_fresh_process(b15_budget, path),
        "KV": lambda: kv_settings(path),
    }


def _in_fresh_process(fn: Callable[[str], Result], path: str) -> Result:
    """B7 and B15 measure RSS and B6 the GUI thread: run them in a new interpreter, so the baseline is
    the model alone (not whatever the scenarios before it left in this process's heap) and the
    Qt application is set up offscreen before Qt is imported."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # (not multiprocessing.Pool: its worker is daemonic, and B11 starts a process of its own
    # for its floors, benchmarks.floor.FloorProcess)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        result: Result = pool.submit(fn, path).result()
    return result


LLAMA_SERVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "llama-server",
                            "llama-server")  # fmt: skip
"""Where ``make llama-server`` (packaging/llama-cpp/build-llama-server.sh) puts its binary."""


def default_llama_server() -> str | None:
    return LLAMA_SERVER if os.access(LLAMA_SERVER, os.X_OK) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hearth bench")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--only", help="comma-separated scenario ids (default: all)")
    parser.add_argument("--llama-server", default=default_llama_server(),
                        help="path of a llama-server binary, the peer in B2, B8, B9, B13 and B14 (default: "
                             "build/llama-server/llama-server when `make llama-server` has built it; 'none': "
                             "no llama-server)")  # fmt: skip
    parser.add_argument("--model", help="GGUF to benchmark (default: SmolLM2-135M-Instruct Q4_1)")
    parser.add_argument("--markdown", help="also write the tables as Markdown to this file")
    args = parser.parse_args(argv)
    if args.llama_server in ("", "none"):
        args.llama_server = None
    print(f"llama-server peer: {args.llama_server or 'none'}", file=sys.stderr)
    # The KV cells "auto" gives: a calibration made before (`hearth calibrate`), never one
    # started in the background while this run times the machine (app.engine.llama.kv_calibration).
    os.environ.setdefault("HEARTH_KV_CALIBRATION", "cached")
    path = args.model or default_model()
    scenarios = _scenarios(path, args)
    by_upper = {sid.upper(): sid for sid in scenarios}
    asked = [s.strip() for s in args.only.split(",")] if args.only else list(scenarios)
    wanted = [by_upper.get(s.upper(), s) for s in asked]
    unknown = [s for s in wanted if s not in scenarios]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(scenarios)}")
    results: list[Result] = []
    started = time.time()
    for i, sid in enumerate(wanted, 1):
        print(f"[{i}/{len(wanted)}] {sid} …", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        result = scenarios[sid]()
        result.figures["seconds"] = round(time.perf_counter() - t0, 1)
        results.append(result)
        print(result.table() + "\n", flush=True)
    if args.json:
        doc: dict[str, Any] = {
            "command": "hearth bench " + " ".join(argv or sys.argv[1:]),
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpus": __import__("os").cpu_count(), **machine_facts(path)},
            "model": path,
            "llama_server": args.llama_server,
            "scenarios": [r.to_json() for r in results],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.markdown:
        command = "hearth bench " + " ".join(argv if argv is not None else sys.argv[1:])
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write(markdown(results, command, path, started))
        print(f"wrote {args.markdown}", file=sys.stderr)
    return 0


def machine_facts(model: str) -> dict[str, str]:
    """What a figure depends on beyond the code: the CPU, the llama.cpp build (its CPU backends
    and the one loaded here), the KV setting Hearth's "auto" gives ``model`` here (calibrated by
    ``hearth calibrate``, else the default pair) and the weight kernels Hearth uses."""
    from app.engine.llama.kv_calibration import resolve
    from app.engine.llama.native_log import init_llama
    from app.engine.llama.native_probe import cpu_report
    from app.engine.llama.weight_kernels import tiled_setting

    init_llama()
    return {
        "cpu": cpu_report(),
        "kv": f"{resolve(model, background=False).why}; flash attention on, one KV stream per sequence",
        "k-quant tiled matmul": tiled_setting(),
    }


def markdown(results: list[Result], command: str, model: str, started: float) -> str:
    """The tables as a Markdown section (docs/benchmarks.md embeds it)."""
    lines = [
        f"Command: `{command}`  ",
        f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} on {platform.platform()}, "
        f"{__import__('os').cpu_count()} CPUs, Python {platform.python_version()}  ",
        f"Model: `{model.rsplit('/', 1)[-1]}`  ",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine_facts(model).items()),
        "",
    ]
    for r in results:
        verdict = {True: "met", False: "**not met**", None: "n/a"}[r.met]
        lines += [f"### {r.id} — {r.title}", "", f"Goal: {r.goal} — {verdict}", ""]
        lines.append("| " + " | ".join(r.columns) + " |")
        lines.append("|" + "|".join("---" for _ in r.columns) + "|")
        for row in r.rows:
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        if r.note:
            lines += ["", r.note]
        lines.append("")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
