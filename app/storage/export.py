"""A conversation as a Markdown document or as JSON text (``hearth-conversation/1``). No Qt.

Both take frozen records, so they never touch the database; the text they return always
encodes to UTF-8 (see :func:`app.storage.text.encodable`), so writing it cannot fail on
its content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from app.storage.documents import ChatDocument
from app.storage.records import Conversation, Message
from app.storage.text import encodable

FORMAT = "hearth-conversation/1"


def conversation_markdown(conv: Conversation, branch: Sequence[Message], documents: Sequence[ChatDocument] = ()) -> str:
    """``branch`` (root first) under the conversation's title, system prompt and the names of
    the documents it attached (their text is not repeated)."""
    lines = [f"# {conv.title}", ""]
    if conv.system_prompt:
        lines += ["> **System:** " + conv.system_prompt.replace("\n", "\n> "), ""]
    if documents:
        lines += ["**Documents:**", ""]
        lines += [f"- {d.name}" + (f" ({d.pages} pages)" if d.pages else "") + f" · sha256 {d.sha256[:12]}"
                  for d in documents]  # fmt: skip
        lines += [""]
    for msg in branch:
        lines += [f"## {msg.role.capitalize()}", ""]
        if msg.thinking:
            thinking = close_fences(msg.thinking)
            lines += ["<details><summary>Thinking</summary>", "", thinking, "", "</details>", ""]
        lines += [close_fences(msg.content), ""]
    return encodable("\n".join(lines).rstrip() + "\n")


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def close_fences(text: str) -> str:
    """``text`` with a code fence it leaves open closed at its end (CommonMark rules).

    A reply cut mid-code (Stop, the length limit, a full context) ends inside a fence; the
    file it is exported into would render every later message as code."""
    opened: str | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m is None:
            continue
        fence, rest = m.groups()
        if opened is None:
            if not (fence[0] == "`" and "`" in rest):  # a backtick fence's info has no backtick
                opened = fence
        elif fence[0] == opened[0] and len(fence) >= len(opened) and not rest.strip():
            opened = None
    if opened is None:
        return text
    return text.rstrip("\n") + "\n" + opened


def conversation_json(
    conv: Conversation, messages: Sequence[Message], active_path: Sequence[str],
    documents: Sequence[ChatDocument] = (),
) -> str:
    """Every message (all branches, oldest first), the active path and the documents the chat
    attached (name, kind, pages, the SHA-256 of the text), as indented JSON."""
    doc = {
        "format": FORMAT,
        "id": conv.id,
        "title": conv.title,
        "created": conv.created,
        "updated": conv.updated,
        "system_prompt": conv.system_prompt,
        "model_id": conv.model_id,
        "sampling": conv.sampling.to_dict(),
        "active_leaf_id": conv.active_leaf_id,
        "active_path": list(active_path),
        "messages": [_message_dict(m) for m in messages],
        "documents": [
            {"name": d.name, "kind": d.kind, "pages": d.pages, "sha256": d.sha256, "characters": len(d.text)}
            for d in documents
        ],
    }
    return encodable(json.dumps(doc, indent=2, ensure_ascii=False))


def _message_dict(msg: Message) -> dict[str, Any]:
    return {
        "id": msg.id,
        "parent_id": msg.parent_id,
        "role": msg.role,
        "content": msg.content,
        "thinking": msg.thinking,
        "stats": msg.stats.to_dict() if msg.stats else None,
        "created": msg.created,
    }
