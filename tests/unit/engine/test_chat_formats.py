"""Issue 50, item 1: a model whose GGUF has no chat template gets its own family's format,
chosen by architecture and vocabulary — never another family's. The built-in formats render
as llama.cpp's own built-in templates do (``llama_chat_apply_template`` with their names)."""

from __future__ import annotations

import ctypes

import llama_cpp
import pytest

from app.chat_formats import CHATML, FORMATS, GEMMA, LLAMA3, MARKERS, NO_FORMAT, choose_format
from app.engine.chat_template import NO_FORMAT_TEMPLATE, render_chat_template, resolve_chat_format
from app.engine.errors import InvalidRequest

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": " Hi there "},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "What is 2+2?"},
]


def llama_cpp_render(name: str, messages: list[dict[str, str]]) -> str:
    array = (llama_cpp.llama_chat_message * len(messages))(
        *(llama_cpp.llama_chat_message(m["role"].encode(), m["content"].encode()) for m in messages)
    )
    buf = ctypes.create_string_buffer(8192)
    n = llama_cpp.llama_chat_apply_template(name.encode(), array, len(messages), True, buf, len(buf))
    assert 0 < n < len(buf), (name, n)
    return buf.raw[:n].decode()


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_built_in_format_renders_as_llama_cpp_does(name):
    ours = render_chat_template(FORMATS[name].template, CHAT, bos_token="", eos_token="</s>")
    assert ours == llama_cpp_render(name, CHAT)


def test_the_format_follows_the_vocabulary_and_the_architecture():
    def vocab(*tokens: str):
        return set(tokens).__contains__

    gemma_vocab = vocab(*GEMMA.markers)
    assert choose_format("gemma3", gemma_vocab) == "gemma"
    assert choose_format("llama", gemma_vocab) == "gemma"  # the vocabulary decides
    assert choose_format("llama", vocab(*LLAMA3.markers, *CHATML.markers)) == "llama3"  # the architecture first
    assert choose_format("qwen2", vocab(*LLAMA3.markers, *CHATML.markers)) == "chatml"
    assert choose_format("gemma3", vocab("<start_of_turn>")) is None  # half a format is none
    assert choose_format("llama", vocab()) is None  # never a foreign format
    assert all(m in MARKERS for f in FORMATS.values() for m in f.markers)


def test_what_a_model_renders_with():
    gemma_vocab = set(GEMMA.markers).__contains__
    assert resolve_chat_format("{{ x }}", None, "gemma3", gemma_vocab) == ("{{ x }}", "file")
    assert resolve_chat_format(None, None, "gemma3", gemma_vocab) == (GEMMA.template, "gemma")
    assert resolve_chat_format(None, LLAMA3.template, "gemma3", gemma_vocab) == (LLAMA3.template, "llama3")
    assert resolve_chat_format("{{ x }}", "{{ y }}", "gemma3", gemma_vocab) == ("{{ y }}", "custom")
    assert resolve_chat_format(None, None, "llama", lambda _token: False) == (NO_FORMAT_TEMPLATE, None)
    with pytest.raises(InvalidRequest) as refused:
        render_chat_template(NO_FORMAT_TEMPLATE, CHAT)
    assert str(refused.value) == NO_FORMAT
