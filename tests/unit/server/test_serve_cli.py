"""``hearth serve``'s model settings: the exact attention by default, the faster one on request."""

from __future__ import annotations

import argparse

from app.server.cli import add_parser, model_config


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


def test_serve_is_exact_unless_asked_for_the_faster_prefill():
    assert model_config("m.gguf", _args()).flash_attn is True
    fast = model_config("m.gguf", _args("--fast-prefill", "--ctx", "1024"))
    assert fast.flash_attn is False and fast.n_ctx == 1024
