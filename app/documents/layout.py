"""Where attached documents go in a prompt, so that their tokens can be read once.

KV is reused only for an identical token prefix. So documents go at one stable place: after
the system prompt, inside the system message, before the conversation, in the order they
were attached, each in the same wrapper naming the file::

    <system prompt>

    <document name="contract.pdf">
    …the text…
    </document>

Every chat that has the same system prompt and attaches the same files in the same order
starts with the same tokens, whatever it asks; the cache serves them to all of them. The
server puts the ``file`` parts of a request at the same place (``app.server.prompt``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Attached:
    """A document as the prompt sees it: its file name and its text."""

    name: str
    text: str


class Document(Protocol):
    """Anything with a file name and a text (``Attached``, a stored ``ChatDocument``)."""

    @property
    def name(self) -> str: ...

    @property
    def text(self) -> str: ...


def document_block(name: str, text: str) -> str:
    """One document in its wrapper. A quote in the name is dropped (it would end the
    attribute); the text is as extracted."""
    safe = " ".join(name.replace('"', "").split()) or "document"
    return f'<document name="{safe}">\n{text}\n</document>'


def system_with_documents(system: str, documents: Sequence[Document]) -> str:
    """The system message of a chat with ``documents``: its system prompt, then each
    document's block, separated by blank lines ("" when there is neither)."""
    parts = [system] if system else []
    parts += [document_block(d.name, d.text) for d in documents]
    return "\n\n".join(parts)


_OPENING = re.compile(r'<document name="([^"\n]{1,255})">\n')


def document_names(text: str) -> list[str]:
    """The names of the documents whose wrappers open in ``text`` (a prompt's start), in order
    (the Cache dashboard names a row by them)."""
    return _OPENING.findall(text)
