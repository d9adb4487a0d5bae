"""The process the grammar property test drives: it loads the tiny model and runs each grammar.

One JSON request per stdin line — ``{"gbnf": text}`` or ``{"schema": {...}}``, with a ``seed``
and a ``temperature`` — and one JSON answer per stdout line: ``{"outcome": "refused"}`` with
the engine's message, or ``{"outcome": "ran", ...}`` with how the reply ended. A grammar that
llama.cpp aborts on kills this process, not the test suite: the test sees the exit status.

    python -m tests.property.grammar_worker MODEL.gguf DATA_DIR
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from app.engine import Engine, ModelConfig
from app.engine.errors import EngineError
from app.engine.events import Done, Error
from app.server.errors import ApiError
from app.server.grammar import json_schema_grammar


def run_one(model: Any, prompt: list[int], request: dict[str, Any]) -> dict[str, Any]:
    try:
        grammar = request["gbnf"] if "gbnf" in request else json_schema_grammar(request["schema"])
    except ApiError as exc:  # the schema converter refused it (server: a 400 before the engine)
        return {"outcome": "refused", "by": "converter", "message": exc.message}
    try:
        stream = model.infer(prompt, grammar=grammar, response_tokens=request.get("tokens", 12),
                             temperature=request.get("temperature", 0.0), seed=request.get("seed", 0))
    except EngineError as exc:
        return {"outcome": "refused", "by": "engine", "code": exc.code, "message": exc.message}
    events = list(stream)
    last = events[-1]
    if isinstance(last, Error):
        return {"outcome": "failed", "code": last.code, "message": last.reason}
    assert isinstance(last, Done)
    return {"outcome": "ran", "tokens": last.stats.completion_tokens, "finish": last.stats.finish_reason,
            "grammar": grammar}


def main(model_path: str, data_dir: str) -> int:
    # Answers go to the original stdout; whatever native code prints (a crash's backtrace) to stderr.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    engine = Engine(data_dir)
    model = engine.load_model("tiny", ModelConfig(path=model_path, n_ctx=256, n_seq_max=1, n_threads=1,
                                                  cache_enabled=False))
    prompt = model.tokenize("Answer:")
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        print(json.dumps(run_one(model, prompt, json.loads(line))), file=answers, flush=True)
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
