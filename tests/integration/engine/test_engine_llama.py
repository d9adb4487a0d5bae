"""The engine on real llama.cpp: greedy determinism under batching and chunking, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.engine import Engine, ModelConfig
from app.engine.errors import ContextOverflow, EngineError, InvalidGrammar, ModelLoadFailed
from app.engine.events import Done, TokenId
from tests.helpers.llama_threads import LLAMA_THREADS


def _config(path: Path, **kw) -> ModelConfig:
    kw.setdefault("n_ctx", 512)
    kw.setdefault("n_seq_max", 8)
    kw.setdefault("n_batch", 256)
    kw.setdefault("n_threads", 2)
    kw.setdefault("cache_enabled", False)
    return ModelConfig(path=str(path), **kw)


@pytest.fixture
def engine(tmp_path):
    e = Engine(tmp_path / "data")
    yield e
    e.close()


PROMPTS = [
    "The quick brown fox",
    "Once upon a time, in a land far away,",
    "def fibonacci(n):",
    "The capital of France is",
    "1, 2, 3, 4,",
    "Dear Sir or Madam, I am writing to",
    "In the beginning",
    "SELECT * FROM users WHERE",
]


def _ids(stream) -> list[int]:
    return [e.id for e in stream if isinstance(e, TokenId)]


SOLO_TOKENS = 25  # the longest reply any test below asks of a prompt


def _solo(model) -> list[list[int]]:
    """Each prompt's greedy continuation, run alone (one request at a time)."""
    solo = [_ids(model.infer(model.tokenize(p), response_tokens=SOLO_TOKENS)) for p in PROMPTS]
    assert all(len(t) >= 1 for t in solo)
    assert len({tuple(t) for t in solo}) > 1  # different prompts, different continuations
    return solo


def _batched_equals_solo(model, solo: list[list[int]], n_tokens: int) -> None:
    # A greedy reply of n tokens is the first n of a longer one: one solo run serves every length.
    streams = [model.infer(model.tokenize(p), response_tokens=n_tokens) for p in PROMPTS]
    assert [_ids(s) for s in streams] == [t[:n_tokens] for t in solo]


@pytest.fixture(scope="module")
def smol(smollm2_path, tmp_path_factory):
    """SmolLM2 loaded once for this module's read-only checks (no cache: nothing is kept
    between requests but the seqs' cells, which the scheduler clears before reuse)."""
    with Engine(tmp_path_factory.mktemp("smol")) as e:
        yield e.load_model("smol", _config(smollm2_path))


@pytest.fixture(scope="module")
def smol_solo(smol) -> list[list[int]]:
    return _solo(smol)


def test_eight_streams_equal_solo_tiny(engine, tiny_model_path):
    model = engine.load_model("tiny", _config(tiny_model_path))
    _batched_equals_solo(model, _solo(model), 24)


@pytest.mark.smollm2
def test_eight_streams_equal_solo_smollm2(smol, smol_solo):
    _batched_equals_solo(smol, smol_solo, 16)


@pytest.mark.smollm2
def test_streams_ending_at_different_times_equal_solo_smollm2(smol, smol_solo):
    """Requests that finish while others still decode free their seqs mid-run: the survivors'
    next cells must not land ahead of their earlier ones (that changes the logits)."""
    prompts = [smol.tokenize(p) for p in PROMPTS]
    lengths = [4 + 3 * i for i in range(len(prompts))]
    solo = [t[:n] for t, n in zip(smol_solo, lengths, strict=True)]
    streams = [smol.infer(p, response_tokens=n) for p, n in zip(prompts, lengths, strict=True)]
    assert [_ids(s) for s in streams] == solo
    # and again, now that every seq holds a finished request's cells
    streams = [smol.infer(p, response_tokens=n) for p, n in zip(reversed(prompts), reversed(lengths), strict=True)]
    assert [_ids(s) for s in streams] == list(reversed(solo))


def _chunked_equals_unchunked(tmp_path, path: Path) -> None:
    prompt_text = " ".join(PROMPTS) * 3
    results = []
    for i, chunk in enumerate((None, 16)):
        with Engine(tmp_path / f"d{i}") as e:
            model = e.load_model("m", _config(path, n_seq_max=2, prefill_chunk_size=chunk))
            tokens = model.tokenize(prompt_text)
            assert len(tokens) > 48  # several chunks of 16
            results.append(_ids(model.infer(tokens, response_tokens=16)))
    assert results[0] == results[1]


def test_chunked_prefill_equals_unchunked_tiny(tmp_path, tiny_model_path):
    _chunked_equals_unchunked(tmp_path, tiny_model_path)


@pytest.mark.smollm2
def test_chunked_prefill_equals_unchunked_smollm2(tmp_path, smollm2_path):
    _chunked_equals_unchunked(tmp_path, smollm2_path)


def test_bad_model_files(engine, tmp_path, tiny_model_path):
    missing = tmp_path / "missing.gguf"
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("this is not a model\n" * 100)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_model_path.read_bytes()[:4096])
    for bad in (missing, not_gguf, truncated):
        with pytest.raises(ModelLoadFailed) as err:
            engine.load_model(bad.stem, _config(bad))
        assert err.value.code == "model_load_failed"
        assert str(bad.name) in str(err.value) or "GGUF" in str(err.value)
    # The engine keeps serving: a good model loads and generates after the failures.
    model = engine.load_model("tiny", _config(tiny_model_path, n_seq_max=1))
    assert len(model.complete("hello", response_tokens=3).generated) >= 1


def test_prompt_longer_than_context_and_bad_grammar(engine, tiny_model_path):
    model = engine.load_model("tiny", _config(tiny_model_path, n_ctx=64, n_seq_max=2))
    busy = model.infer(model.tokenize("keep generating"), response_tokens=40)
    with pytest.raises(ContextOverflow) as err:
        model.infer(model.tokenize("word " * 100))
    assert err.value.code == "context_overflow"
    with pytest.raises(InvalidGrammar, match="does not parse") as gerr:
        model.infer(model.tokenize("x"), grammar='root ::= "unterminated')
    assert gerr.value.code == "invalid_request"
    # Other requests were never disturbed.
    assert busy.result(timeout=60).completion_tokens >= 1
    assert model.complete("ok", response_tokens=2).finish_reason in ("length", "stop")


@pytest.mark.smollm2
def test_grammar_constrains_output(smol):
    tokens = smol.apply_chat_template({"messages": [{"role": "user", "content": "Is the sky blue?"}]})
    events = list(smol.infer(tokens, response_tokens=8, grammar='root ::= "yes" | "no"'))
    text = "".join(getattr(e, "text", "") for e in events)
    assert text in ("yes", "no")
    assert isinstance(events[-1], Done)


@pytest.mark.smollm2
def test_cli_chat_answers_paris(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "app", "--data-dir", str(tmp_path), "chat", "--temperature", "0",
         "--threads", str(LLAMA_THREADS), "What is the capital of France? Answer in one sentence."],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout


def test_engine_error_codes_are_the_seed_atoms():
    from app.engine import errors

    codes = {
        cls.code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, EngineError) and cls is not EngineError
    }
    assert {
        "no_session", "sticky_busy", "busy", "not_supported", "not_found", "invalid_request",
        "context_overflow", "n_batch_too_small", "model_load_failed", "adapter_load_failed",
        "grammar_failed",
    } <= codes


def test_model_file_is_hashed_once_per_data_dir(tmp_path, tiny_model_path):
    from app.cache.keys import file_sha256

    with Engine(tmp_path / "fp") as e:
        first = e.load_model("a", _config(tiny_model_path, n_seq_max=1)).model_info().fingerprint
        e.unload("a")
        e.load_model("b", _config(tiny_model_path, n_seq_max=1))
        assert e._fingerprints.num_hashed == 1
    with Engine(tmp_path / "fp") as e:
        again = e.load_model("c", _config(tiny_model_path, n_seq_max=1)).model_info().fingerprint
        assert e._fingerprints.num_hashed == 0  # remembered across restarts
    assert first == again == file_sha256(tiny_model_path).hex()


SYSTEM = (
    "You are Hearth, a friendly assistant running on this computer. You answer questions "
    "about cooking, baking and bread clearly and briefly, in plain English, without lists."
)


def _shared_head_equals_solo(tmp_path, path: Path) -> None:
    """Four chats with one system prompt start together: three share the first one's KV
    for the head (llama_memory_seq_cp) and still produce exactly the solo greedy tokens."""
    questions = ["How long should dough rise?", "Which flour for rye bread?",
                 "What oven temperature?", "Why did my loaf collapse?"]
    with Engine(tmp_path / "solo") as e:
        m = e.load_model("m", _config(path, n_seq_max=1))
        chats = [m.apply_chat_template({"messages": [{"role": "user", "content": q}], "system": SYSTEM})
                 for q in questions]
        solo = [_ids(m.infer(c, response_tokens=12)) for c in chats]
    with Engine(tmp_path / "together") as e:
        m = e.load_model("m", _config(path, n_seq_max=4))
        streams = [m.infer(c, response_tokens=12) for c in chats]
        events = [list(s) for s in streams]
    stats = [ev[-1].stats for ev in events]
    assert sorted(s.cache_hit_kind for s in stats) == ["cold", "partial", "partial", "partial"]
    assert all(s.cache_delta.read >= 30 for s in stats if s.cache_hit_kind == "partial")
    assert [[x.id for x in ev if isinstance(x, TokenId)] for ev in events] == solo


def test_shared_prompt_head_equals_solo_tiny(tmp_path, tiny_model_path):
    _shared_head_equals_solo(tmp_path, tiny_model_path)


@pytest.mark.smollm2
def test_shared_prompt_head_equals_solo_smollm2(tmp_path, smollm2_path):
    _shared_head_equals_solo(tmp_path, smollm2_path)


def test_on_reading_comes_once_as_the_prompt_starts_being_read(engine, tiny_model_path):
    """``infer``/``continue_session``'s ``on_reading`` (what the GUI waits for after a send):
    once per request, on the scheduler thread, after its admission and before its first
    prefill slice is done, even when the prompt takes several slices."""
    import threading

    from app.engine.events import PrefillProgress

    model = engine.load_model("m", _config(tiny_model_path, prefill_chunk_size=16))
    log: list[object] = []
    threads: set[str] = set()
    held: list[int] = []

    def reading() -> None:
        threads.add(threading.current_thread().name)
        held.append(max(model.backend.seq_pos_max(seq) for seq in range(8)))  # nothing in the KV yet
        log.append("reading")

    prompt = model.tokenize(" ".join(PROMPTS))
    assert len(prompt) > 40  # several 16-token slices
    model.infer(prompt, session_id="s", response_tokens=3, on_event=log.append, on_reading=reading).result()
    progress = [i for i, e in enumerate(log) if isinstance(e, PrefillProgress)]
    assert log.count("reading") == 1 and len(progress) > 2
    assert progress[0] < log.index("reading") < progress[1]  # admitted, then read
    assert log[progress[1]].done < len(prompt)  # ... before the first slice's end
    assert threads and threading.current_thread().name not in threads
    assert held == [-1]

    log.clear()
    model.continue_session(model.tokenize(" and then"), session_id="s", response_tokens=2,
                           on_event=log.append, on_reading=reading).result()
    assert log.count("reading") == 1
    assert log.index("reading") < next(i for i, e in enumerate(log) if isinstance(e, TokenId))
