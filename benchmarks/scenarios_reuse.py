"""B8: reuse of every token already computed, over a realistic trace (issue 13).

Six chats share one system prompt; the client re-sends the whole conversation every turn
and never sends a session id, as a chat client pointed at an API does. The trace has
follow-ups sent right after replies, regenerates, edits of the last user message, a branch
from turn 2, switches between chats (more chats than sequences, ``n_seq_max`` 4), and a
restart halfway. Every system sees the same token ids (prompts are rendered once, by
Hearth's template, and sent as ids).

Figures:

* **reused / reusable**: per turn, *reusable* is the longest prefix the prompt shares with
  anything computed earlier in the trace (any earlier prompt plus its reply, any chat,
  before or after the restart), less the last prompt token (always prefilled for fresh
  logits); *reused* is what Hearth restored (``Stats.reuse.tokens_reused``).
* **summed TTFT** against the floor (``benchmarks.floor``: the backend alone prefilling
  only each turn's new tokens), each turn's floor timed right after the turn, in a process
  of its own (these shared machines drift by tens of percent between minutes); against
  llama-server (``cache_prompt``, ``-np 4``, restarted with the trace) and
  llama-cpp-python's ``LlamaRAMCache`` (a new ``Llama`` after the restart).
* **bytes on disk** (disk tier) against unique tokens × bytes per token, where unique tokens
  are the distinct prefixes of everything saved.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.cache.blobs import seqstate
from app.cache.policy import DESKTOP_POLICY
from app.engine import Model
from app.engine.events import Done, Token, TokenId
from benchmarks.common import N_THREADS, Result, config, progress
from benchmarks.floor import FloorProcess, reusable_prefix
from benchmarks.scenarios_chat import SYSTEM

N_NEW = 32

QUESTIONS = {
    "A": ["How do I bake a simple loaf of bread?", "How long should it rise?", "Can I use whole wheat flour?",
          "What oven temperature?"],
    "B": ["What should I see in Lisbon?", "When is the best time to go?", "Is it expensive?",
          "What food should I try?"],
    "C": ["How do I reverse a list in Python?", "And a string?", "How do I sort a dict by value?",
          "How do I read a file line by line?"],
    "D": ["Why is the sky blue?", "Why are sunsets red?", "Is it the same on Mars?"],
    "E": ["What is a good first houseplant?", "How often should I water it?", "Does it need sun?"],
    "F": ["How do I start running?", "How far should I go in week one?", "What shoes do I need?"],
}

# (chat, action[, text]): "ask" the chat's next question; "regen" the last turn again; "edit"
# the last user message to ``text``; "branch" = a new chat ("B2") forked from B after turn 2
# with its own next question; "restart" the server.
TRACE: list[tuple[str, ...]] = [
    ("A", "ask"), ("A", "ask"),  # a follow-up right after the reply
    ("B", "ask"), ("B", "ask"), ("C", "ask"), ("C", "ask"),
    ("D", "ask"), ("E", "ask"), ("F", "ask"),  # six chats on four sequences
    ("A", "ask"), ("A", "regen"), ("A", "edit", "Can I use rye flour instead?"),
    ("B", "ask"), ("Bx", "branch", "Which neighbourhood should I stay in?"),
    ("C", "ask"), ("D", "ask"), ("E", "ask"),
    ("*", "restart"),
    ("A", "ask"), ("B", "ask"), ("Bx", "ask", "Is it walkable?"), ("F", "ask"),
    ("D", "ask"), ("D", "regen"), ("E", "ask"), ("E", "edit", "Does it need direct sunlight?"),
    ("C", "ask"), ("F", "ask"),
]


@dataclass
class _Chat:
    messages: list[dict[str, str]] = field(default_factory=list)
    asked: int = 0


@dataclass(frozen=True)
class TurnResult:
    ttft_ms: float
    generated: tuple[int, ...]
    text: str
    reused: int = 0


Server = Callable[[list[int]], TurnResult]


def replay(render: Callable[[list[dict[str, str]]], list[int]], start: Callable[[], Server],
           restart: Callable[[], Server]) -> list[tuple[list[int], TurnResult]]:
    """Run TRACE against one system; returns (prompt ids, result) per turn."""
    chats: dict[str, _Chat] = {name: _Chat() for name in QUESTIONS}
    serve = start()
    out: list[tuple[list[int], TurnResult]] = []
    for step in TRACE:
        name, action = step[0], step[1]
        if action == "restart":
            serve = restart()
            continue
        if action == "branch":
            base = chats["B"]
            chats[name] = _Chat(list(base.messages[:4]), 2)  # B after its turn 2
            messages = [*chats[name].messages, {"role": "user", "content": step[2]}]
        else:
            chat = chats[name]
            if action == "ask":
                question = step[2] if len(step) > 2 else QUESTIONS[name][chat.asked]
                chat.asked += 1
                messages = [*chat.messages, {"role": "user", "content": question}]
            else:  # regen / edit: the last user message (edited or not), its reply dropped
                last_user = {"role": "user", "content": step[2] if action == "edit" else chat.messages[-2]["content"]}
                messages = [*chat.messages[:-2], last_user]
        prompt = render(messages)
        result = serve(prompt)
        chats[name].messages = [*messages, {"role": "assistant", "content": result.text}]
        out.append((prompt, result))
    return out


# --------------------------------------------------------------------------- Hearth


def _hearth_turn(model: Model, prompt: list[int]) -> TurnResult:
    t0 = time.perf_counter()
    first = None
    generated: list[int] = []
    text: list[str] = []
    reused = 0
    for event in model.infer(prompt, response_tokens=N_NEW):
        if isinstance(event, TokenId):
            generated.append(event.id)
        elif isinstance(event, Token):
            if first is None:
                first = time.perf_counter() - t0
            text.append(event.text)
        elif isinstance(event, Done):
            reuse = event.stats.reuse
            reused = reuse.tokens_reused if reuse.source != "none" else event.stats.cache_delta.read
    return TurnResult(((first or time.perf_counter() - t0)) * 1000, tuple(generated), "".join(text), reused)


def hearth_b8(path: str, data_dir: Path, floor: FloorProcess | None = None) -> dict[str, Any]:
    """B8's trace on Hearth. With ``floor`` (a process of its own), each turn's floor is timed
    right after the turn (``floor_ms``), once the turn's saves are written
    (``CacheStore.flush``): the two share the minute's machine, and the floor's prefill shares
    the cores with no write. (Hearth's next turn then finds no save still queued, as it
    mostly does anyway: a turn's saves are held while the next one waits for its first
    token, ``CacheHooks``.)"""
    from app.engine import Engine

    cfg = config(path, n_ctx=2048, n_seq_max=4, policy=DESKTOP_POLICY, tier="disk")
    engines: list[Engine] = []
    computed: list[list[int]] = []
    floor_ms: list[float] = []

    def start() -> Server:
        engine = Engine(data_dir)
        engines.append(engine)
        model = engine.load_model("m", cfg)

        def serve(prompt: list[int]) -> TurnResult:
            result = _hearth_turn(model, prompt)
            if floor is not None:
                engine.cache.flush()
                floor_ms.append(floor.turn("trace", prompt, _reusable(prompt, computed)))
            computed.append([*prompt, *result.generated])
            return result

        return serve

    def restart() -> Server:
        engines[-1].close()
        return start()

    renderer = Engine(data_dir / "render")
    try:
        model = renderer.load_model("r", config(path, n_ctx=2048, n_seq_max=1, cache_enabled=False))

        def render(messages: list[dict[str, str]]) -> list[int]:
            return model.apply_chat_template({"messages": messages, "system": SYSTEM})

        turns = replay(render, start, restart)
    finally:
        renderer.close()
    engine = engines[-1]
    engine.cache.flush()
    disk_bytes = sum(f.stat().st_size for f in (data_dir / "cache").rglob("*") if f.is_file()
                     and f.suffix not in (".sqlite", ".sqlite-wal", ".sqlite-shm", ".json"))
    engine.close()
    return {"turns": turns, "disk_bytes": disk_bytes, "bytes_per_token": _bytes_per_token(path), "floor_ms": floor_ms}


def _bytes_per_token(path: str) -> float:
    """KV bytes one cell costs in a payload, with Hearth's default KV settings (0 for a
    state ``seqstate`` does not parse: recurrent, hybrid, sliding window — B8f)."""
    from app.engine.backend import PrefillOp
    from app.engine.llama.llama_backend import LlamaBackend

    with LlamaBackend(path, n_ctx_per_seq=256, n_seq_max=1, n_batch=64, n_threads=N_THREADS) as backend:
        tokens = tuple(backend.tokenize(SYSTEM)[:32])
        backend.step([PrefillOp(0, tokens, 0, False)])
        try:
            return float(seqstate.parse(backend.kv_pack(0)).bytes_per_cell)
        except seqstate.UnknownLayout:
            return 0.0


# --------------------------------------------------------------------------- peers


def llama_server_b8(binary: str, path: str, turns: Sequence[list[int]]) -> list[float]:
    """The same prompts (token ids) through llama-server's /completion with cache_prompt."""
    from benchmarks.llama_server import running_server

    ttfts: list[float] = []
    restart_at = _restart_index()
    halves = [turns[:restart_at], turns[restart_at:]]
    for half in halves:
        with running_server(binary, path, n_parallel=4, n_ctx_per_slot=2048) as base:
            for prompt in half:
                ttfts.append(_server_turn(base, prompt))
    return ttfts


def _server_turn(base: str, prompt: list[int]) -> float:
    body = json.dumps({"prompt": prompt, "n_predict": N_NEW, "temperature": 0, "stream": True,
                       "cache_prompt": True}).encode()
    req = urllib.request.Request(base + "/completion", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data:") and first is None and json.loads(line[5:]).get("content"):
                first = time.perf_counter() - t0
    return (first if first is not None else time.perf_counter() - t0) * 1000


def llama_cpp_python_b8(path: str, turns: Sequence[list[int]]) -> list[float]:
    """The same prompts through llama-cpp-python with LlamaRAMCache; a new Llama at the restart."""
    from llama_cpp import Llama
    from llama_cpp.llama_cache import LlamaRAMCache

    ttfts: list[float] = []
    restart_at = _restart_index()
    for half in (turns[:restart_at], turns[restart_at:]):
        llm = Llama(model_path=path, n_ctx=2048, n_batch=512, n_threads=N_THREADS, verbose=False)
        llm.set_cache(LlamaRAMCache(capacity_bytes=2 << 30))
        for prompt in half:
            t0 = time.perf_counter()
            first = None
            stream: Iterator[Any] = llm.create_completion(prompt, max_tokens=N_NEW, temperature=0.0, stream=True)  # type: ignore[assignment]
            for chunk in stream:
                if first is None and chunk["choices"][0]["text"]:
                    first = time.perf_counter() - t0
            ttfts.append((first if first is not None else time.perf_counter() - t0) * 1000)
        del llm
    return ttfts


def _restart_index() -> int:
    """How many turns run before the restart."""
    return TRACE.index(("*", "restart"))


# --------------------------------------------------------------------------- accounting


def reusable_per_turn(turns: Sequence[tuple[list[int], TurnResult]]) -> list[int]:
    """Per turn: the longest prefix shared with anything computed before it, capped at
    len(prompt) - 1 (the last prompt token is always prefilled)."""
    computed: list[list[int]] = []
    out = []
    for prompt, result in turns:
        out.append(_reusable(prompt, computed))
        computed.append([*prompt, *result.generated])
    return out


def _reusable(prompt: Sequence[int], computed: Sequence[Sequence[int]]) -> int:
    """``prompt``'s longest prefix shared with one of ``computed``, less its last token."""
    return reusable_prefix(prompt, computed)[0]


def unique_tokens(seqs: Sequence[Sequence[int]]) -> int:
    """Distinct prefixes over all sequences (the nodes of their token trie)."""
    seen: set[tuple[int, ...]] = set()
    for s in seqs:
        for n in range(1, len(s) + 1):
            seen.add(tuple(s[:n]))
    return len(seen)


def b8_reuse(path: str, llama_server: str | None = None) -> Result:
    import tempfile

    res = Result(
        "B8",
        "reuse over a 6-chat trace (follow-ups, regenerates, edits, a branch, a restart), no session ids",
        "reused/reusable ≥ 0.98; summed TTFT ≤ 1.1 × the floor (ratio to llama-server and llama-cpp-python "
        "(RAM cache) reported); disk ≤ 1.3 × unique tokens × bytes/token",
        ["system", "summed TTFT s", "Hearth / this"],
    )
    with tempfile.TemporaryDirectory(prefix="hearth-b8-") as tmp, FloorProcess(path, 2048, ["trace"]) as floor:
        progress("B8: Hearth, each turn followed by its floor (the backend alone, the turn's new tokens)")
        ours = hearth_b8(path, Path(tmp), floor)
    turns = ours["turns"]
    prompts = [p for p, _ in turns]
    reusable = reusable_per_turn(turns)
    reused = [min(r.reused, cap) for (_, r), cap in zip(turns, reusable, strict=True)]
    ratio_reuse = sum(reused) / max(1, sum(reusable))
    hearth_ttft = sum(r.ttft_ms for _, r in turns) / 1000
    res.rows.append(["Hearth", hearth_ttft, ""])
    peers: dict[str, float] = {}
    progress("B8: llama-cpp-python, LlamaRAMCache")
    peers["llama-cpp-python (LlamaRAMCache)"] = sum(llama_cpp_python_b8(path, prompts)) / 1000
    if llama_server:
        progress("B8: llama-server -np 4, cache_prompt")
        peers["llama-server -np 4"] = sum(llama_server_b8(llama_server, path, prompts)) / 1000
    for name, total in peers.items():
        res.rows.append([name, total, hearth_ttft / total])
    floor_ms = ours["floor_ms"]
    floor_s = sum(floor_ms) / 1000
    res.rows.append(["floor: the backend alone, new tokens only", floor_s, hearth_ttft / floor_s])
    saved = [[*p, *r.generated] for p, r in turns]
    unique = unique_tokens(saved)
    disk_ratio = ours["disk_bytes"] / (unique * ours["bytes_per_token"])
    res.figures = {
        "reused": sum(reused), "reusable": sum(reusable), "reuse_ratio": ratio_reuse,
        "per_turn": [{"prompt": len(p), "reusable": c, "reused": r.reused, "ttft_ms": r.ttft_ms}
                     for (p, r), c in zip(turns, reusable, strict=True)],
        "hearth_ttft_s": hearth_ttft, "peers_ttft_s": peers, "floor_ttft_s": floor_s, "floor_per_turn_ms": floor_ms,
        "ttft_over_floor": hearth_ttft / floor_s,
        "disk_bytes": ours["disk_bytes"], "unique_tokens": unique,
        "bytes_per_token": ours["bytes_per_token"], "disk_ratio": disk_ratio,
    }  # fmt: skip
    ttft_ok = hearth_ttft <= 1.1 * floor_s
    res.met = ratio_reuse >= 0.98 and ttft_ok and disk_ratio <= 1.3
    res.note = (
        f"reused {sum(reused):,} of {sum(reusable):,} reusable tokens ({ratio_reuse:.3f}); disk "
        f"{ours['disk_bytes'] / 1e6:.1f} MB for {unique:,} unique tokens × {ours['bytes_per_token']:,.0f} B "
        f"= {disk_ratio:.2f}×; median TTFT {statistics.median(r.ttft_ms for _, r in turns):.0f} ms; floor "
        f"{floor_s:.2f} s when the backend alone prefills only what no earlier turn computed (benchmarks/floor.py), "
        f"each turn's right after it; summed TTFT {hearth_ttft / floor_s:.3f} × the floor (goal ≤ 1.1 ×)"
        + ("" if llama_server else "; no --llama-server binary given: llama-server was not measured")
    )
    return res
