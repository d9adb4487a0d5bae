"""Run Hearth's hostile trials and write the table of docs/reliability.md (issue 15).

    .venv/bin/python -m tools.reliability                 # all trials, writes docs/reliability.md
    .venv/bin/python -m tools.reliability --only templates,hub --out /tmp/r.md

Each trial (``tools/reliability_trials.py``, ``tools/reliability_hostile.py``) drives real
parts — real files and SQLite, real llama.cpp on the tiny test model, processes killed with
SIGKILL, the real huggingface_hub client against the local Hub server — and counts the
attempts that broke what Hearth promises. The seeds are fixed: a re-run tries the same things.
Takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import logging
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from tools.reliability_hostile import HOSTILE_TRIALS
from tools.reliability_issue51 import ISSUE51_TRIALS
from tools.reliability_server import SERVER_TRIALS
from tools.reliability_trials import ROOT, TRIALS, Trial

NOT_TRIED = [
    ("a read-only cache directory", "root (which runs this here) ignores permission bits; "
     "tests/unit/cache/test_errors.py covers it with the errors the OS returns"),
    ("a backend that raises in each scheduler phase", "the scheduler's fault-injection tests on the stub "
     "backend (tests/unit/engine) cover it"),
    ("unload while a conversation streams or the GUI tokenizes", "tests/ui (the app's own flows)"),
]


def run(selected: list[Callable[[Path], Trial]]) -> list[Trial]:
    results = []
    for fn in selected:
        with tempfile.TemporaryDirectory(prefix=f"hearth-{fn.__name__}-") as scratch:
            t0 = time.perf_counter()
            try:
                trial = fn(Path(scratch))
            except Exception as exc:  # noqa: BLE001 — a trial that cannot run is a result too
                trial = Trial(fn.__name__, "(the trial itself failed to run)")
                trial.fail(f"{type(exc).__name__}: {exc}")
            trial.seconds = time.perf_counter() - t0
        print(f"{trial.name}: {trial.trials} trials, {len(trial.failures)} failures "
              f"({trial.seconds:.1f} s)", flush=True)
        results.append(trial)
    return results


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def render(results: list[Trial], argv: list[str]) -> str:
    total = sum(t.trials for t in results)
    failed = sum(len(t.failures) for t in results)
    lines = [
        "# Reliability: what was tried, what failed, what is promised",
        "",
        f"Written by `{' '.join(['python -m tools.reliability', *argv]).strip()}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit `{_commit()}` "
        f"({platform.machine()}, {platform.python_implementation()} {platform.python_version()}). "
        "Re-run it to check a change: the trials use fixed seeds, real files and SQLite, real "
        "llama.cpp on the tiny test model, SIGKILLed processes and the real huggingface_hub client "
        "against the local Hub server (`tests/helpers/hub_server.py`).",
        "",
        f"**{total} trials, {failed} failures.**",
        "",
        "| what was tried | trials | failures | what is promised | notes |",
        "|---|---:|---:|---|---|",
    ]
    for t in results:
        notes = "; ".join(t.notes) or ""
        lines.append(f"| {t.name} | {t.trials} | {len(t.failures)} | {t.promise} | {notes} ({t.seconds:.0f} s) |")
    failures = [(t.name, f) for t in results for f in t.failures]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- **{name}**: {what}" for name, what in failures]
    lines += ["", "## Not tried by this script", ""]
    lines += [f"- {what}: {why}." for what, why in NOT_TRIED]
    lines += [
        "",
        "## Each numbered failure of issue 15 and its regression test",
        "",
        "| issue 15 | test |",
        "|---|---|",
        "| 1, 2: bad token ids leak a seq / fail a batch | `tests/integration/engine/test_bad_input.py` |",
        "| 3: nan/inf adapter scale served from the cache | `tests/integration/engine/test_bad_input.py` |",
        "| 4: n_ctx × n_seq_max wraps | `tests/unit/engine/test_config.py` |",
        "| 5: raw exceptions, bad ModelConfigs | `tests/integration/engine/test_bad_input.py`, `tests/unit/engine/test_config.py`, `tests/unit/engine/test_validation.py` |",
        "| 7: hostile chat templates | `tests/unit/engine/test_chat_template.py` |",
        "| 8: Hub checksum of an installed file, names with a newline | `tests/integration/models/test_hub_hostile.py` |",
        "| 9: storage bytes / lone surrogates | `tests/unit/storage/test_storage_input.py` |",
        "| 13: timing assertions | none left in `tests/ui/test_app.py`; property suite `tests/property/` |",
        "",
        "## Each numbered failure of issue 26 and its regression test",
        "",
        "| issue 26 | test |",
        "|---|---|",
        "| 1: a grammar llama.cpp aborts on (`[b-a]`, a schema pattern) | `tests/property/test_grammars.py` "
        "(in a child process), `tests/unit/engine/test_grammar_check.py`, "
        "`tests/integration/server/test_hostile_requests.py` |",
        "| 2: a web page's text/plain or form POST runs | `tests/integration/server/test_hostile_requests.py` |",
        "| 3: one damaged byte in kvcache.sqlite blocks every start | `tests/unit/cache/test_db_damage.py`, "
        "`tests/integration/cache/test_damaged_db_commands.py` |",
        "| 4: templates that hold the GIL or allocate gigabytes | `tests/unit/engine/test_template_worker.py` "
        "(GUI heartbeat, in a child process), `tests/unit/engine/test_chat_template.py` |",
        "| 5: a Hub download that never ends | `tests/integration/models/test_hub_hostile.py` |",
        "| 6: half-sent headers lock clients out, the log grows | `tests/integration/server/test_hostile_requests.py`, "
        "`tests/unit/server/test_connections.py` |",
        "| 7: 500 instead of 400/413 | `tests/integration/server/test_hostile_requests.py` |",
        "| 8: raw exceptions from the Hub client, unverifiable files | `tests/integration/models/test_hub_hostile.py`, "
        "`tests/ui/models/test_download_unverified.py` |",
        "| 9: rows whose chunk files were deleted | `tests/unit/cache/test_db_damage.py` |",
        "",
        "## Each numbered failure of issue 51 and its regression test",
        "",
        "| issue 51 | test |",
        "|---|---|",
        "| 1: a schema's counts take all the memory (maxItems 10^9, minLength 10^12; through tools too) | "
        "`tests/integration/server/test_hostile_requests.py` (the server's peak RSS), "
        "`tests/property/test_schema_bounds.py` (1,000 drawn schemas in a memory-bounded child) |",
        "| 2: slow request bodies lock every client out | `tests/integration/server/test_hostile_requests.py`, "
        "`tests/unit/server/test_connections.py` |",
        "| 3: 500s for a lone surrogate in an unknown key, JSON nested 1,000 deep in a tool call's arguments | "
        "`tests/integration/server/test_hostile_requests.py` |",
        "| 4: a directory where a cache file should be stops every start | `tests/unit/cache/test_stray_files.py` |",
        "| 5: Host: LOCALHOST, schemas whose grammar did not parse, which template rendered the prompt, "
        "clients that never read their streams | `tests/integration/server/test_errors_security.py`, "
        "`tests/integration/server/test_hostile_requests.py`, `tests/property/test_schema_bounds.py`, "
        "`tests/unit/server/test_connections.py` |",
        "",
    ]
    return "\n".join(lines)


ALL = {fn.__name__: fn for fn in [*TRIALS, *HOSTILE_TRIALS, *SERVER_TRIALS, *ISSUE51_TRIALS]}
SHORT = {"saves": "kills_during_saves", "flips": "bit_flips", "db": "database_damage", "disk": "full_disk",
         "storage": "kills_during_conversation_writes", "hub": "hostile_hub_names",
         "templates": "hostile_templates", "files": "bad_model_files", "configs": "bad_configs",
         "text": "storage_text", "api": "hostile_api_arguments", "grammars": "hostile_grammars",
         "web": "web_page_requests", "bodies": "bad_bodies", "flood": "connection_flood",
         "dbbytes": "database_bytes", "chunks": "deleted_chunk_files", "hubfaults": "hub_faults",
         "schemasizes": "schema_sizes", "slowbodies": "slow_bodies", "strays": "stray_files",
         "issue51": "smaller_items"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument("--only", help=f"comma-separated: {', '.join(SHORT)}")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the trials provoke errors on purpose; the table says what happened
    names = [SHORT.get(n.strip(), n.strip()) for n in args.only.split(",")] if args.only else list(ALL)
    results = run([ALL[n] for n in names])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(results, argv))
    print(f"wrote {args.out}")
    return 1 if any(t.failures for t in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
