"""Grammar → greedy chains are sampled argmax-first (``SamplerChain.sample_greedy``): the same
tokens as the chain over the whole vocabulary, on the real tiny model, with both the argmax
path and the whole-vocabulary fallback taken."""

from __future__ import annotations

import llama_cpp
import pytest

from app.engine.backend import DecodeOp, SamplingParams
from app.engine.llama import sampling
from app.server.grammar import TOOL_CLOSE, TOOL_OPEN, tool_call_grammar
from app.server.messages import ToolSpec
from tests.integration.backend.driver import prefill

TOOLS = [
    ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}},
                                           "required": ["path"]}),
    ToolSpec("run_tests", "Run tests.", {"type": "object", "properties": {"selector": {"type": "string"}}}),
]

GRAMMARS = {
    "tool call": tool_call_grammar(TOOLS, None, (TOOL_OPEN, TOOL_CLOSE)),
    # Almost anything: the argmax is allowed at most steps, refused at some (no digits, no "<").
    "loose text": 'root ::= [^0-9<]+',
    "yes or no": 'root ::= "yes" | "no"',
    # Counted: the grammar's state, not only the token, decides (after 24 characters a "." must come).
    "counted": 'root ::= [^0-9<.]{1,24} "." [^0-9<]+',
}

PROMPTS = ["Call a tool: ", "<|im_start|>user\nrun the tests<|im_end|>\n<|im_start|>assistant\n", "Once upon"]
N_TOKENS = 40


def run(backend, grammar: str, prompt: str, monkeypatch: pytest.MonkeyPatch, fast: bool) -> tuple[list[int], int, int]:
    """Greedy tokens under ``grammar`` through ``LlamaBackend.sample`` (to the end of the
    grammar or ``N_TOKENS``), and how many rows were sampled / went to the whole vocabulary."""
    monkeypatch.setattr(sampling, "FAST_GRAMMAR", fast)
    whole_calls = 0
    real = llama_cpp.llama_sampler_sample

    def counting(*args: object) -> int:
        nonlocal whole_calls
        whole_calls += 1
        return int(real(*args))

    monkeypatch.setattr(llama_cpp, "llama_sampler_sample", counting)
    chain = backend.new_sampler(SamplingParams(grammar=grammar))
    assert chain.is_grammar_greedy
    tokens: list[int] = []
    try:
        ids = backend.tokenize(prompt)
        backend.seq_rm(0)
        prefill(backend, 0, ids)
        for i in range(N_TOKENS):
            (res,) = backend.step([DecodeOp(0, chain, len(ids) + i)])
            tokens.append(res.token)
            if res.is_eog:
                break
    finally:
        backend.free_sampler(chain)
        monkeypatch.setattr(llama_cpp, "llama_sampler_sample", real)
    return tokens, len(tokens), whole_calls


def test_argmax_first_gives_the_whole_vocabulary_tokens(tiny, monkeypatch):
    sampled = whole_in_fast = 0
    for name, grammar in GRAMMARS.items():
        for prompt in PROMPTS:
            reference, n_ref, whole_ref = run(tiny, grammar, prompt, monkeypatch, fast=False)
            assert whole_ref == n_ref  # the reference: every row over the whole vocabulary
            tokens, n, whole = run(tiny, grammar, prompt, monkeypatch, fast=True)
            assert tokens == reference, (name, prompt)
            sampled += n
            whole_in_fast += whole
    # Both paths ran: most rows were the argmax, and some fell back to the whole vocabulary.
    assert 0 < whole_in_fast < sampled / 2, (whole_in_fast, sampled)


def test_only_grammar_then_greedy_chains_go_argmax_first(tiny):
    cases = {
        SamplingParams(grammar='root ::= "a"'): True,
        SamplingParams(): False,
        SamplingParams(grammar='root ::= "a"', temperature=0.7, seed=1): False,
        SamplingParams(grammar='root ::= "a"', repetition_penalty=1.1): False,
        SamplingParams(grammar='root ::= "a"', top_k=5): False,
        SamplingParams(grammar='root ::= "a"', min_p=0.1): False,
    }
    for params, expected in cases.items():
        chain = tiny.new_sampler(params)
        try:
            assert chain.is_grammar_greedy is expected, params
        finally:
            tiny.free_sampler(chain)


def test_argmax_first_verifies_draft_rows_as_the_whole_vocabulary_does(tmp_path, tiny_model_path, monkeypatch):
    """Speculation on (every row drafted, the reply itself as drafts once known): a forced
    call through the engine gives the whole-vocabulary tokens with drafts accepted and rejected."""
    from app.engine import Engine
    from app.engine.events import Done, TokenId
    from tests.helpers.forced_drafts import ReplyOracle, always_draft
    from tests.helpers.reuse_client import config

    always_draft(monkeypatch)
    oracle = ReplyOracle(monkeypatch)
    engine = Engine(tmp_path / "data")
    try:
        model = engine.load_model("m", config(tiny_model_path, cache_enabled=False, n_seq_max=1))
        prompt = model.tokenize(PROMPTS[1])

        def reply(grammar: str, fast: bool) -> tuple[list[int], int, int]:
            monkeypatch.setattr(sampling, "FAST_GRAMMAR", fast)
            ids: list[int] = []
            drafted = accepted = 0
            for event in model.infer(prompt, response_tokens=N_TOKENS, grammar=grammar, temperature=0.0):
                if isinstance(event, TokenId):
                    ids.append(event.id)
                elif isinstance(event, Done):
                    drafted, accepted = event.stats.drafted_tokens, event.stats.accepted_tokens
            return ids, drafted, accepted

        for grammar in (GRAMMARS["counted"], GRAMMARS["tool call"]):
            oracle.known, oracle.seen = False, []
            reference, drafted_ref, _ = reply(grammar, fast=False)
            assert drafted_ref > 0  # rejected drafts (the row's own last tokens)
            oracle.known = True
            for fast in (True, False, True):
                tokens, drafted, accepted = reply(grammar, fast)
                assert tokens == reference, (grammar[:20], fast)
                assert accepted > 0  # the oracle's drafts were verified and taken
    finally:
        engine.close()
