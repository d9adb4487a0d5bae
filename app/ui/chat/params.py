"""Conversation settings → engine request options (docs/design.md §1 names). No Qt here."""

from __future__ import annotations

from collections.abc import Collection

from app.storage import SamplingSettings

# llama.cpp's json.gbnf, trimmed: any JSON value, used for "JSON mode".
JSON_GRAMMAR = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
""".strip()


def infer_params(s: SamplingSettings, draft_models: Collection[str] = ()) -> tuple[tuple[str, object], ...]:
    """The keyword options for ``Model.infer`` / ``continue_session``, as a frozen tuple.
    The chat's draft model goes with them when it is among ``draft_models`` (the local models
    loaded now); otherwise the reply drafts from the conversation."""
    params: dict[str, object] = {
        "response_tokens": int(s.max_tokens),
        "temperature": float(s.temperature),
        "top_k": int(s.top_k),
        "top_p": float(s.top_p),
        "min_p": float(s.min_p),
        "repetition_penalty": float(s.repetition_penalty),
        "thinking": "enabled" if s.thinking else "disabled",
        "speculative": bool(s.speculative),
        "draft_max": int(s.draft_max),
    }
    if s.speculative and s.draft_model and s.draft_model in draft_models:
        params["draft_model"] = s.draft_model
    if s.seed is not None:
        params["seed"] = int(s.seed)
    if s.stop_sequences:
        params["stop_sequences"] = [x for x in s.stop_sequences if x]
    grammar = s.grammar.strip() or (JSON_GRAMMAR if s.json_mode else "")
    if grammar:
        params["grammar"] = grammar
    if s.thinking and s.thinking_budget_tokens > 0:
        params["thinking_budget_tokens"] = int(s.thinking_budget_tokens)
    return tuple(params.items())
