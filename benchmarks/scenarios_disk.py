"""B8d: disk bytes of the ~20-chat session of issue 13, KVC v2 against whole-row storage.

Issue 13 measured ~600 MiB on disk after ~20 short chats on SmolLM2 with whole-row (KVC v1)
blobs: every turn's row stored the whole conversation again. This replays such a session
through the engine — 20 chats on one system prompt, 3 to 5 turns each, greedy replies,
disk tier, ``n_seq_max`` 4 with four chats running at once, no session ids (a client that
re-sends the conversation) — then compares:

* **KVC v2**: the bytes of every chunk and manifest file under ``<data>/cache``;
* **whole rows (v1)**: what storing each of the same rows whole takes — the sum over the
  rows of ``tokens × bytes per token`` (payload only: a v1 blob also has a header and its
  token list, so this is a lower bound for v1 and the ratio an upper bound);
* **unique**: the distinct prefixes of everything saved × bytes per token (B8's yardstick).

Goal (issue 13): v2 ≤ ⅓ of whole rows.

NOTE: measured 2026-12-01 on this 2-core machine under load (SmolLM2-135M Q4_1, q8_0 K/V,
12,252 B a token; ~15 min): 80 rows of 43,374 tokens in all — whole rows 507 MiB, KVC v2
75.3 MiB = 0.149 × (1.004 × the unique tokens: 59 chunks, 80 manifests).
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from app.cache.policy import DESKTOP_POLICY
from app.engine import Model
from app.engine.events import Done, Token, TokenId
from benchmarks.common import Result, config, progress
from benchmarks.scenarios_chat import SYSTEM
from benchmarks.scenarios_reuse import _bytes_per_token, unique_tokens

N_CHATS = 20
N_NEW = 64
TOPICS = [
    "baking sourdough bread", "visiting Lisbon", "reversing a list in Python", "why the sky is blue",
    "a first houseplant", "starting to run", "learning the guitar", "saving for a holiday",
    "brewing green tea", "repairing a bike puncture", "writing a cover letter", "growing tomatoes",
    "choosing a laptop", "sleeping better", "making a budget", "learning Spanish",
    "taking better photos", "cleaning a cast iron pan", "planning a picnic", "reading more books",
]
FOLLOW_UPS = ["Can you say more about that?", "What is the most common mistake?",
              "How long does it take?", "What would you do first?"]  # fmt: skip


def _turns(chat: int) -> list[str]:
    first = f"I would like some advice about {TOPICS[chat % len(TOPICS)]}."
    return [first, *FOLLOW_UPS[: 2 + chat % 3]]  # 3, 4 or 5 turns


def _chat(model: Model, chat: int) -> list[list[int]]:
    """One chat, turn after turn; returns each turn's prompt + reply ids."""
    messages: list[dict[str, str]] = []
    held: list[list[int]] = []
    for question in _turns(chat):
        messages.append({"role": "user", "content": question})
        prompt = model.apply_chat_template({"messages": messages, "system": SYSTEM})
        ids: list[int] = []
        text: list[str] = []
        for event in model.infer(prompt, response_tokens=N_NEW):
            if isinstance(event, TokenId):
                ids.append(event.id)
            elif isinstance(event, Token):
                text.append(event.text)
            elif isinstance(event, Done):
                break
        messages.append({"role": "assistant", "content": "".join(text)})
        held.append([*prompt, *ids])
    return held


def twenty_chats(path: str, data_dir: Path) -> dict[str, Any]:
    from app.engine import Engine

    cfg = config(path, n_ctx=2048, n_seq_max=4, policy=DESKTOP_POLICY, tier="disk")
    engine = Engine(data_dir)
    try:
        model = engine.load_model("m", cfg)
        with ThreadPoolExecutor(4) as pool:
            held = [seq for chat in pool.map(lambda c: _chat(model, c), range(N_CHATS)) for seq in chat]
        engine.cache.flush()
        rows = [r for r in engine.cache.rows() if r.status == "available"]
        files = [f for f in (data_dir / "cache").rglob("*") if f.is_file()]
        v2 = sum(f.stat().st_size for f in files if f.suffix in (".kvch", ".kvr", ".kvc"))
        by_kind = {s: sum(1 for f in files if f.suffix == s) for s in (".kvch", ".kvr", ".kvc")}
    finally:
        engine.close()
    return {"held": held, "rows": [r.n_tokens for r in rows], "v2_bytes": v2, "files": by_kind}


def b8d_disk(path: str) -> Result:
    res = Result(
        "B8d",
        f"disk after {N_CHATS} short chats on one system prompt (3-5 turns, greedy, disk tier)",
        "KVC v2 ≤ ⅓ × whole rows (issue 13)",
        ["storage", "MB on disk", "ratio to whole rows"],
    )
    with tempfile.TemporaryDirectory(prefix="hearth-b8d-") as tmp:
        progress(f"B8d: {N_CHATS} chats through the engine")
        out = twenty_chats(path, Path(tmp))
    per_token = _bytes_per_token(path)
    whole = sum(out["rows"]) * per_token
    unique = unique_tokens(out["held"]) * per_token
    v2 = out["v2_bytes"]
    res.rows = [["KVC v2 (chunks + manifests)", v2 / 1e6, v2 / whole],
                ["whole rows (v1 payloads)", whole / 1e6, 1.0],
                ["unique tokens × bytes/token", unique / 1e6, unique / whole]]  # fmt: skip
    res.figures = {
        "v2_bytes": v2, "whole_row_bytes": whole, "unique_bytes": unique, "ratio": v2 / whole,
        "ratio_to_unique": v2 / unique, "rows": len(out["rows"]), "row_tokens": sum(out["rows"]),
        "bytes_per_token": per_token, "files": out["files"],
    }  # fmt: skip
    res.met = v2 <= whole / 3
    res.note = (
        f"{len(out['rows'])} rows of {sum(out['rows']):,} tokens in all: whole rows {whole / 2**20:.0f} MiB, "
        f"KVC v2 {v2 / 2**20:.1f} MiB ({v2 / whole:.3f}×; {v2 / unique:.2f}× the unique tokens)"
    )
    return res
