"""B13: documents, read once (issue 52).

The document: chapters I and II of Lewis Carroll's *Alice's Adventures in Wonderland*
(``data/alice-ch1-2.txt``: Project Gutenberg eBook #11, public domain in the United States;
curly quotes and dashes written in ASCII so a core PDF font holds them), ~6,000 tokens, made
into a PDF here (fpdf2, the dev extra) and read back by the app's own extraction
(``app.documents``). The prompt is the app's layout (``app.documents.layout``: the document
after the (empty) system prompt, before the conversation), rendered by the model's template
as the app's bridge renders a chat, and sent as token ids to every system.

On Hearth, through the engine API with the app's session ids (a data directory with the disk
tier, as the app runs):

* **cold**: the document attached and the first question sent, nothing held anywhere;
* **second question**, same chat: the chat's prompt so far, its reply, and the question
  (``continuation_suffix`` aligns the re-rendered reply with the sampled ids, as the app does);
* **new chat**, same document: another question in a chat of its own;
* **after a restart**: the engine closed and opened again on the same directory, a new chat;
* **attach, then type** a 20-word question at 16 characters a second: the document read on
  attach and the question read at each word's end, as the app's type-ahead does
  (``Model.read_ahead`` with ``app.conversation.type_ahead``'s readable prefix), then Enter;
  against **paste and send**: the document and the question sent at once, cold.

Every reply is compared token for token with a cold run of the same prompt on an engine with
the cache off (greedy). Peers, fed the same token ids: llama-cpp-python with its
``LlamaRAMCache`` (a new ``Llama`` at the restart), and llama-server with ``--cache-ram``
(``cache_prompt``; restarted) when ``--llama-server`` names a binary. Neither reads ahead:
their "attach, then type" is their paste-and-send.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cache.policy import DESKTOP_POLICY
from app.conversation.type_ahead import margin_of, probe_of, readable_prefix, with_draft
from app.conversation.window import Turn, view_messages
from app.engine import Engine, Model
from app.engine.chat import continuation_suffix
from app.engine.events import Done, Event, PrefillProgress, Token, TokenId
from benchmarks.common import N_THREADS, Result, config, progress, token_text

DATA = Path(__file__).resolve().parent / "data" / "alice-ch1-2.txt"
NAME = "alice.pdf"
N_CTX = 8192
N_NEW = 24
CPS = 16.0
"""Typing speed of "attach, then type" (characters a second)."""

FIRST = "Summarise what happens to Alice after she drinks from the little bottle."
SECOND = "And what does she find written on the cake under the table?"
NEW_CHAT = "Who does Alice meet in the hall, and what does he drop?"
RESTART = "Which animals swim to the shore with Alice at the end of chapter two?"
TYPED = "Tell me in one sentence why Alice cries in the long hall and how deep the pool of tears grows"
"""20 words."""


@dataclass(frozen=True)
class Run:
    ttft_ms: float
    ids: tuple[int, ...]
    reused: int = 0


def document_text(tmp: Path) -> tuple[str, float]:
    """The PDF's text as the app extracts it, and the seconds extraction took."""
    from fpdf import FPDF

    from app.documents import extract_file

    text = DATA.read_text(encoding="utf-8")
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for page in _pages(text, 3200):
        pdf.add_page()
        pdf.multi_cell(0, 5, page)
    path = tmp / NAME
    pdf.output(str(path))
    t0 = time.perf_counter()
    doc = extract_file(path)
    return doc.text, time.perf_counter() - t0


def _pages(text: str, size: int) -> Iterator[str]:
    paragraphs = text.split("\n\n")
    page: list[str] = []
    for p in paragraphs:
        page.append(p)
        if sum(len(x) for x in page) >= size:
            yield "\n\n".join(page)
            page = []
    if page:
        yield "\n\n".join(page)


def render(model: Model, system: str, turns: Sequence[Turn]) -> list[int]:
    """The prompt the app's bridge sends for ``turns`` (``PromptBuilder``: no summary)."""
    messages, _extra = view_messages(turns, 0, "")
    return list(model.apply_chat_template({"messages": messages, "system": system}))


def run(model: Model, prompt: Sequence[int], session: str | None = None) -> Run:
    t0 = time.perf_counter()
    first: float | None = None
    ids: list[int] = []
    reused = 0
    opts: dict[str, Any] = {"response_tokens": N_NEW}
    if session is not None:
        opts["session_id"] = session
    for event in model.infer(list(prompt), **opts):
        if isinstance(event, TokenId):
            ids.append(event.id)
        elif isinstance(event, Token) and first is None:
            first = time.perf_counter() - t0
        elif isinstance(event, Done):
            reused = event.stats.reuse.tokens_reused if event.stats.reuse.source != "none" else 0
    return Run((first or time.perf_counter() - t0) * 1000, tuple(ids), reused)


def typed(model: Model, system: str, question: str, session: str) -> tuple[Run, list[int], float, int]:
    """Attach, then type ``question`` at ``CPS``: the document read on attach, the draft read at
    each word's end (the app's type-ahead), then Enter. Returns the reply, the prompt, the
    seconds from the attach to Enter, and how many tokens the reads had put in the session's
    seq by Enter (each newer read continues the older one: its first ``PrefillProgress``)."""
    t0 = time.perf_counter()
    read_so_far = [0]

    def on_event(event: Event) -> None:
        if isinstance(event, PrefillProgress):
            read_so_far[0] = max(read_so_far[0], event.done)

    def read(draft: str) -> None:
        turns = with_draft((), draft)
        prompt = render(model, system, turns)
        probed = render(model, system, with_draft((), probe_of(draft)))
        tokens = readable_prefix(prompt, probed, margin_of(draft))
        if tokens:
            model.read_ahead(tokens, session_id=session, on_event=on_event)

    read("")  # on attach: the document, up to where the question goes
    for i in range(1, len(question) + 1):
        _sleep_until(t0 + i / CPS)
        if question[i - 1] == " ":  # a word ended: read at once (``WORD_END_MS``)
            read(question[:i])
    prompt = render(model, system, with_draft((), question))
    typing_s = time.perf_counter() - t0
    read_by_enter = read_so_far[0]
    return run(model, prompt, session), prompt, typing_s, read_by_enter


def _sleep_until(t: float) -> None:
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


# --------------------------------------------------------------------------- Hearth


def hearth(path: str, data_dir: Path, system: str) -> dict[str, Any]:
    cfg = config(path, n_ctx=N_CTX, n_seq_max=4, policy=DESKTOP_POLICY, tier="disk")
    out: dict[str, Any] = {}
    engine = Engine(data_dir)
    try:
        model = engine.load_model("m", cfg)
        piece = token_text(model)
        p1 = render(model, system, [Turn("1", "user", FIRST)])
        progress(f"B13: Hearth, cold: the document and the first question ({len(p1):,} tokens)")
        r1 = run(model, p1, "chat-1")
        progress(f"B13:   TTFT {r1.ttft_ms:.0f} ms")
        full2 = render(model, system, [Turn("1", "user", FIRST), Turn("2", "assistant", model.detokenize(list(r1.ids))),
                                       Turn("3", "user", SECOND)])  # fmt: skip
        held = [*p1, *r1.ids]
        suffix = continuation_suffix(full2, held, piece, ended_with_eog=False)
        p2 = held + suffix if suffix else full2
        progress("B13: Hearth, the second question in the same chat")
        r2 = run(model, p2, "chat-1")
        progress(f"B13:   TTFT {r2.ttft_ms:.0f} ms, {r2.reused:,} tokens reused")
        p3 = render(model, system, [Turn("1", "user", NEW_CHAT)])
        progress("B13: Hearth, a new chat with the same document")
        r3 = run(model, p3, "chat-2")
        progress(f"B13:   TTFT {r3.ttft_ms:.0f} ms, {r3.reused:,} tokens reused")
        engine.cache.flush()
    finally:
        engine.close()
    progress("B13: Hearth, restarted on the same data directory: a new chat")
    engine = Engine(data_dir)
    try:
        model = engine.load_model("m", cfg)
        p4 = render(model, system, [Turn("1", "user", RESTART)])
        r4 = run(model, p4, "chat-3")
        progress(f"B13:   TTFT {r4.ttft_ms:.0f} ms, {r4.reused:,} tokens reused")
    finally:
        engine.close()
    out["prompts"] = {"cold": p1, "second": p2, "new_chat": p3, "restart": p4}
    out["runs"] = {"cold": r1, "second": r2, "new_chat": r3, "restart": r4}
    return out


def hearth_typed(path: str, data_dir: Path, system: str) -> dict[str, Any]:
    """Attach, then type, on a fresh data directory (nothing held)."""
    cfg = config(path, n_ctx=N_CTX, n_seq_max=4, policy=DESKTOP_POLICY, tier="disk")
    engine = Engine(data_dir)
    try:
        model = engine.load_model("m", cfg)
        progress(f"B13: Hearth, attach, then type {len(TYPED.split())} words at {CPS:g} characters a second")
        r, prompt, typing_s, read = typed(model, system, TYPED, "typed")
        progress(f"B13:   {read:,} of {len(prompt):,} tokens read while typing ({typing_s:.1f} s); "
                 f"Enter → first token {r.ttft_ms:.0f} ms, {r.reused:,} tokens reused")
    finally:
        engine.close()
    return {"run": r, "prompt": prompt, "typing_s": typing_s, "read_while_typing": read}


def cold_runs(path: str, prompts: dict[str, Sequence[int]]) -> dict[str, Run]:
    """Each prompt on an engine with the cache off, one sequence, nothing held: the reference
    replies, and paste-and-send's TTFT."""
    out: dict[str, Run] = {}
    with tempfile.TemporaryDirectory(prefix="hearth-b13-cold-") as tmp:
        engine = Engine(Path(tmp))
        try:
            for name, prompt in prompts.items():  # a fresh load each: nothing held, no cache
                model = engine.load_model("cold", config(path, n_ctx=N_CTX, n_seq_max=1, cache_enabled=False))
                out[name] = run(model, prompt)
                engine.unload("cold")
                progress(f"B13:   cold {name}: TTFT {out[name].ttft_ms:.0f} ms ({out[name].reused} reused)")
        finally:
            engine.close()
    return out




# --------------------------------------------------------------------------- peers


def llama_cpp_python(path: str, prompts: dict[str, Sequence[int]]) -> dict[str, float]:
    """The same token ids through llama-cpp-python with ``LlamaRAMCache``: cold, the second
    question, a new chat (one ``Llama``), then a new ``Llama`` for the restart."""
    from llama_cpp import Llama
    from llama_cpp.llama_cache import LlamaRAMCache

    def make() -> Any:
        llm = Llama(model_path=path, n_ctx=N_CTX, n_batch=512, n_threads=N_THREADS, verbose=False)
        llm.set_cache(LlamaRAMCache(capacity_bytes=2 << 30))
        return llm

    def ttft(llm: Any, prompt: Sequence[int]) -> float:
        t0 = time.perf_counter()
        for chunk in llm.create_completion(list(prompt), max_tokens=N_NEW, temperature=0.0, stream=True):
            if chunk["choices"][0]["text"]:
                return (time.perf_counter() - t0) * 1000
        return (time.perf_counter() - t0) * 1000

    out: dict[str, float] = {}
    llm = make()
    for name in ("cold", "second", "new_chat"):
        out[name] = ttft(llm, prompts[name])
    del llm
    llm = make()  # the restart: a new process would hold nothing either
    out["restart"] = ttft(llm, prompts["restart"])
    out["typed"] = ttft(make(), prompts["typed"])  # no read-ahead: paste and send
    return out


def llama_server(binary: str, path: str, prompts: dict[str, Sequence[int]]) -> dict[str, float]:
    """The same token ids through llama-server's ``/completion`` with ``cache_prompt`` and its
    host-memory prompt cache (``--cache-ram``), one slot; restarted for the restart."""
    import json
    import urllib.request

    from benchmarks.llama_server import running_server

    def _server_turn(base: str, prompt: list[int], n_new: int) -> float:
        body = json.dumps({"prompt": prompt, "n_predict": n_new, "temperature": 0, "stream": True,
                           "cache_prompt": True}).encode()
        req = urllib.request.Request(base + "/completion", body, {"Content-Type": "application/json"})
        t0 = time.perf_counter()
        first: float | None = None
        with urllib.request.urlopen(req, timeout=600) as resp:
            # Read to the end: a client gone after the first token leaves its slot generating the
            # rest of the reply, and the next prompt's TTFT waited for that (one slot).
            for raw in resp:
                line = raw.decode().strip()
                if first is None and line.startswith("data:") and json.loads(line[5:]).get("content"):
                    first = time.perf_counter() - t0
        return (first if first is not None else time.perf_counter() - t0) * 1000

    out: dict[str, float] = {}
    extra = ["--cache-ram", "2048"]
    with running_server(binary, path, n_parallel=1, n_ctx_per_slot=N_CTX, extra=extra) as base:
        for name in ("cold", "second", "new_chat"):
            out[name] = _server_turn(base, list(prompts[name]), N_NEW)
    with running_server(binary, path, n_parallel=1, n_ctx_per_slot=N_CTX, extra=extra) as base:
        out["restart"] = _server_turn(base, list(prompts["restart"]), N_NEW)
    with running_server(binary, path, n_parallel=1, n_ctx_per_slot=N_CTX, extra=extra) as base:
        out["typed"] = _server_turn(base, list(prompts["typed"]), N_NEW)
    return out


# --------------------------------------------------------------------------- the scenario


def b13_documents(path: str, llama_server_binary: str | None = None) -> Result:
    res = Result(
        "B13",
        "documents, read once: a ~6,000-token public-domain text as a PDF (SmolLM2)",
        "second question / new chat / after a restart: TTFT ≤ 0.05 × cold; attach, then type 20 words at "
        "16 characters/s: TTFT from Enter ≤ 0.2 × paste-and-send; every reply identical to a cold run",
        ["system", "cold ms", "2nd question ms", "new chat ms", "after restart ms", "typed: Enter → token ms",
         "× cold (2nd / new / restart)", "typed × paste"],
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="hearth-b13-") as tmp_name:
        tmp = Path(tmp_name)
        text, extract_s = document_text(tmp)
        from app.documents import Attached, system_with_documents

        system = system_with_documents("", [Attached(NAME, text)])
        ours = hearth(path, tmp / "hearth", system)
        typed_run = hearth_typed(path, tmp / "typed", system)
    prompts: dict[str, Sequence[int]] = {**ours["prompts"], "typed": typed_run["prompt"]}
    progress("B13: the cold references (cache off), one prompt at a time")
    cold = cold_runs(path, prompts)
    runs: dict[str, Run] = {**ours["runs"], "typed": typed_run["run"]}
    identical = {name: runs[name].ids == cold[name].ids for name in runs}
    c = runs["cold"].ttft_ms
    ratios = {k: runs[k].ttft_ms / c for k in ("second", "new_chat", "restart")}
    paste = cold["typed"].ttft_ms
    typed_ratio = runs["typed"].ttft_ms / paste
    # The best "typed" can do: reads at full prefill speed from the attach on leave Enter the
    # cold read less the typing time (time is additive along the prompt, cheap early tokens
    # or not). NOTE (AMD EPYC, 2 cores, 2026-12-06): the 5,947-token prompt took 35.5 s of
    # 1-thread CPU to read in 128-token chunks (4.1 ms a token at its start, 8.0 at its end;
    # timed at load ~7, thread CPU time), about 17 s on 2 quiet threads (the first 2,000 tokens:
    # 9.8 s of 1-thread CPU, 4.8 s quiet on 2), so 5.8 s of typing bound the ratio near 0.67 and
    # the goal's 0.2 needs ~14 s of reading before Enter.
    typed_bound = max(0.0, paste - typed_run["typing_s"] * 1000) / paste
    res.rows.append(["Hearth", c, runs["second"].ttft_ms, runs["new_chat"].ttft_ms, runs["restart"].ttft_ms,
                     runs["typed"].ttft_ms, " / ".join(f"{ratios[k]:.3f}" for k in ratios), typed_ratio])  # fmt: skip
    res.rows.append(["paste and send (cold, cache off)", "", "", "", "", paste, "", 1.0])
    peers: dict[str, dict[str, float]] = {}
    progress("B13: llama-cpp-python, LlamaRAMCache")
    peers["llama-cpp-python (LlamaRAMCache)"] = llama_cpp_python(path, prompts)
    if llama_server_binary:
        progress("B13: llama-server --cache-ram, cache_prompt")
        peers["llama-server (--cache-ram)"] = llama_server(llama_server_binary, path, prompts)
    for name, p in peers.items():
        pr = [p[k] / p["cold"] for k in ("second", "new_chat", "restart")]
        res.rows.append([name, p["cold"], p["second"], p["new_chat"], p["restart"], p["typed"],
                         " / ".join(f"{r:.3f}" for r in pr), p["typed"] / p["cold"]])  # fmt: skip
    res.figures = {
        "document_tokens": len(ours["prompts"]["cold"]), "extract_s": extract_s,
        "hearth_ttft_ms": {k: r.ttft_ms for k, r in runs.items()},
        "hearth_reused": {k: r.reused for k, r in runs.items()},
        "cold_ttft_ms": {k: r.ttft_ms for k, r in cold.items()},
        "ratios": ratios, "typed_over_paste": typed_ratio, "typing_s": typed_run["typing_s"],
        "typed_read_while_typing": typed_run["read_while_typing"], "typed_bound": typed_bound,
        "identical_to_cold": identical, "peers_ttft_ms": peers,
        "prompt_tokens": {k: len(p) for k, p in prompts.items()},
    }  # fmt: skip
    res.met = all(r <= 0.05 for r in ratios.values()) and typed_ratio <= 0.2 and all(identical.values())
    res.note = (
        f"the PDF read back in {extract_s:.2f} s; the first prompt {len(prompts['cold']):,} tokens; reused "
        + ", ".join(f"{k} {r.reused:,}" for k, r in runs.items())
        + f"; replies identical to cold: {sum(identical.values())} of {len(identical)}"
        + (f" (differ: {', '.join(k for k, v in identical.items() if not v)})" if not all(identical.values()) else "")
        + f"; typing took {typed_run['typing_s']:.1f} s and read {typed_run['read_while_typing']:,} tokens ahead "
        + f"(at full prefill speed typed could reach {typed_bound:.2f} × paste); median Hearth TTFT {statistics.median(r.ttft_ms for r in runs.values()):.0f} ms"
        + ("" if llama_server_binary else "; no --llama-server binary given: llama-server was not measured")
    )
    return res
