"""Chat-template markup turned into plain text, for previews of what a cache row remembers.

A row holds the tokens of a rendered conversation, so its text is full of the template's
control tokens (``<|im_start|>user``, ``<|start_header_id|>…``, ``<start_of_turn>``,
``[INST]``…). People should read who said what, never that markup: :func:`turns` splits the
text at the role markers of the common template families and drops every other control
token; :func:`readable` gives one line ("User: … Assistant: …"), :func:`transcript` a
paragraph per turn. No Qt: the cache's save-time previews (``app.cache.contents.preview``) and the
dashboard both use it.
"""

from __future__ import annotations

import re

ROLE_NAMES = {
    "system": "System",
    "developer": "System",
    "user": "User",
    "human": "User",
    "assistant": "Assistant",
    "model": "Assistant",
    "chatbot": "Assistant",
    "bot": "Assistant",
    "gpt": "Assistant",
    "tool": "Tool",
    "ipython": "Tool",
    "function": "Tool",
}

# Each alternative names the role in a group called r1…r7 (or implies it, see _IMPLIED).
_ROLE_MARKERS = re.compile(
    r"<\|im_start\|>\s*(?P<r1>\w+)[ \t]*\n?"  # ChatML (Qwen, SmolLM, …)
    r"|<\|start_header_id\|>\s*(?P<r2>\w+)\s*<\|end_header_id\|>\s*"  # Llama 3
    r"|<start_of_turn>\s*(?P<r3>\w+)[ \t]*\n?"  # Gemma
    r"|<\|start_of_role\|>\s*(?P<r4>\w+)\s*<\|end_of_role\|>\s*"  # Granite
    r"|<\|(?P<r5>system|user|assistant|tool)\|>\s*"  # Phi-3, Zephyr
    r"|<｜(?P<r6>User|Assistant|System)｜>\s*"  # DeepSeek (full-width bars)
    r"|<\|(?P<r7>USER|CHATBOT|SYSTEM)_TOKEN\|>\s*"  # Command-R
    r"|(?P<inst>\[INST\])\s*|\s*(?P<end_inst>\[/INST\])\s*"  # Llama 2, Mistral
    r"|(?P<sys><<SYS>>)\s*|\s*(?P<end_sys><</SYS>>)\s*",
    re.IGNORECASE,
)
_IMPLIED = {"inst": "user", "end_inst": "assistant", "sys": "system", "end_sys": "user"}
# Control tokens that carry no words: dropped wherever they appear.
_MARKUP = re.compile(
    r"<\|[^<>|\n]{1,48}\|>"  # <|im_end|>, <|eot_id|>, <|begin_of_text|>, <|endoftext|> …
    r"|<｜[^<>｜\n]{1,48}｜>"  # DeepSeek's <｜end▁of▁sentence｜> …
    r"|</?s>|<bos>|<eos>|<pad>|<unk>|<end_of_turn>|<start_of_turn>"
)


def turns(text: str) -> list[tuple[str | None, str]]:
    """``(role label or None, words)`` in order; text before the first marker has no role."""
    out: list[tuple[str | None, str]] = []
    role: str | None = None
    pos = 0
    for m in _ROLE_MARKERS.finditer(text):
        _add(out, role, text[pos : m.start()])
        name = next((v for k, v in m.groupdict().items() if v and k.startswith("r")), None)
        if name is None:
            name = _IMPLIED[next(k for k, v in m.groupdict().items() if v)]
        role = ROLE_NAMES.get(name.lower(), name.capitalize())
        pos = m.end()
    _add(out, role, text[pos:])
    return out


def last_role(text: str) -> str | None:
    """Who is speaking at the end of ``text`` (the last role marker in it), or None."""
    role = None
    for m in _ROLE_MARKERS.finditer(text):
        name = next((v for k, v in m.groupdict().items() if v and k.startswith("r")), None)
        if name is None:
            name = _IMPLIED[next(k for k, v in m.groupdict().items() if v)]
        role = ROLE_NAMES.get(name.lower(), name.capitalize())
    return role


def continued(before: str, text: str) -> list[tuple[str | None, str]]:
    """:func:`turns` of ``text``, which continues ``before`` (e.g. a tree line under its
    parent): words ahead of ``text``'s first marker belong to ``before``'s last speaker."""
    out = turns(text)
    role = last_role(before)
    if out and out[0][0] is None and role is not None and not _ROLE_MARKERS.match(text.lstrip()):
        out[0] = (role, out[0][1])
    return out


def readable(text: str, before: str = "") -> str:
    """One line of plain text: "User: … Assistant: …", whitespace collapsed. ``before``:
    the text ``text`` continues, which names the speaker of its first words."""
    parts = [f"{role}: {words}" if role else words for role, words in continued(before, text)]
    return " ".join(" ".join(parts).split())


def transcript(text: str, before: str = "") -> str:
    """A paragraph per turn, each headed by who said it (``before`` as in :func:`readable`)."""
    blocks = [f"{role}:\n{words}" if role else words for role, words in continued(before, text)]
    return "\n\n".join(blocks)


def _add(out: list[tuple[str | None, str]], role: str | None, raw: str) -> None:
    words = _MARKUP.sub(" ", raw).strip()
    words = re.sub(r"[ \t]+\n", "\n", words)
    if not words:
        return
    if out and out[-1][0] == role:  # e.g. markup split one turn in two
        out[-1] = (role, out[-1][1] + " " + words)
    else:
        out.append((role, words))
