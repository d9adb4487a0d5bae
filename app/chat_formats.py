"""Chat formats for a model whose GGUF carries no chat template.

Some GGUF files (Gemma 3 270M among them) have no ``tokenizer.chat_template``. Feeding such a
model another family's markup (``<|im_start|>…`` to Gemma) makes it answer with that markup as
plain text and never stop, since none of its end-of-turn tokens comes. llama.cpp knows the
common families' formats by name (``llama_chat_apply_template`` with ``gemma``, ``llama3``,
``chatml``, ``phi3``, ``mistral-v7``); this module holds the same formats as Jinja templates,
rendered through the same bounded sandbox as a GGUF's own (``app.engine.chat_template``), and
picks one by the model's **architecture** and **vocabulary**: a format is only chosen when every
one of its control tokens is a token of the model (so the model knows where a turn ends), the
architecture's own family first. A model that has none of them gets no format: it is refused
for chat with words (``NO_FORMAT``), never fed a foreign one. The user can also choose a format
or paste a template per model (Models › Library › Chat format).

No Qt and no llama.cpp: the Library reads the vocabulary from the GGUF header
(``app.models.library``), the engine from the loaded model (``app.engine.chat_template``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChatFormat:
    name: str  # llama.cpp's name for it
    label: str  # what people read
    markers: tuple[str, ...]  # control tokens the vocabulary must have
    template: str  # Jinja, Hugging Face conventions (messages, bos_token, add_generation_prompt)


CHATML = ChatFormat(
    "chatml", "ChatML", ("<|im_start|>", "<|im_end|>"),
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
)  # fmt: skip

GEMMA = ChatFormat(
    "gemma", "Gemma", ("<start_of_turn>", "<end_of_turn>"),
    # As llama.cpp's "gemma": the system message goes at the top of the first user turn,
    # "assistant" is "model", every message is trimmed.
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = ns.system + (message['content'] | trim) %}"
    "{% else %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{% if ns.system and role != 'model' %}{{ ns.system + '\n\n' }}{% set ns.system = '' %}{% endif %}"
    "{{ (message['content'] | trim) + '<end_of_turn>\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}",
)  # fmt: skip

LLAMA3 = ChatFormat(
    "llama3", "Llama 3", ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + "
    "(message['content'] | trim) + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
)  # fmt: skip

PHI3 = ChatFormat(
    "phi3", "Phi-3", ("<|user|>", "<|assistant|>", "<|end|>"),
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + "
    "'<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}",
)  # fmt: skip

MISTRAL_V7 = ChatFormat(
    "mistral-v7", "Mistral", ("[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"),
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}",
)  # fmt: skip

FORMATS: dict[str, ChatFormat] = {f.name: f for f in (GEMMA, LLAMA3, PHI3, MISTRAL_V7, CHATML)}
"""Every built-in format, in the order they are tried when the architecture names none."""

ARCHITECTURE_FORMATS = {
    "gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma", "gemma-embedding": "gemma",
    "llama": "llama3", "llama4": "llama3",
    "phi3": "phi3", "phimoe": "phi3",
    "mistral3": "mistral-v7",
    "qwen2": "chatml", "qwen2moe": "chatml", "qwen3": "chatml", "qwen3moe": "chatml", "smollm3": "chatml",
}  # fmt: skip
"""The format an architecture's chat models usually use: tried first (its markers must still be
in the vocabulary)."""

MARKERS: frozenset[str] = frozenset(m for f in FORMATS.values() for m in f.markers)
"""Every control token a format needs: what the Library looks for in a GGUF's vocabulary."""

FROM_FILE = "file"
"""A choice: the GGUF's own template (else the automatic choice)."""
CUSTOM = "custom"
"""A choice: a template the user pasted."""

NO_FORMAT = (
    "This model cannot chat yet: its file has no chat template, and its vocabulary has the "
    "control tokens of none of the chat formats Hearth knows (Gemma, Llama 3, Phi-3, Mistral, "
    "ChatML), so it would not know where a turn ends. Choose a format or paste a template for "
    "it in Models › Library › Chat format."
)


def choose_format(architecture: str | None, has_token: Callable[[str], bool]) -> str | None:
    """The built-in format for a model without a template: its architecture's family when the
    vocabulary has that format's control tokens, else the first format whose tokens it all has;
    None when none fits (the model must not be fed a foreign format)."""
    hinted = ARCHITECTURE_FORMATS.get(architecture or "")
    order = ([hinted] if hinted else []) + [name for name in FORMATS if name != hinted]
    for name in order:
        if all(has_token(m) for m in FORMATS[name].markers):
            return name
    return None


def format_label(name: str | None) -> str:
    """"Gemma", "Llama 3"…; "a pasted template" for ``CUSTOM``; "none" for None."""
    if name is None:
        return "none"
    if name == CUSTOM:
        return "a pasted template"
    fmt = FORMATS.get(name)
    return fmt.label if fmt else name
