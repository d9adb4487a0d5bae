"""A chat request's ``file`` parts → the same prompt layout as the app's documents.

Each file is extracted as the app extracts an attached file (``app.documents.extract``) and
goes where the app puts a chat's documents (``app.documents.layout``): after the system prompt,
inside the system message, before the conversation, in the order the parts come — wherever
in the conversation a client sent them. So a client that sends the same file with another
question, or in another conversation, sends the same prompt head and reuses its KV; and a
request gets the reply the app gives for the same file and question. A file that cannot be
read is a 400 naming its part, with the app's words for why.

Extraction runs on the request's worker thread (``build_chat_prompt`` is called off the event
loop); the text of the last few files is kept (``ExtractedTexts``), so a client re-sending a
PDF with every turn does not have it parsed every turn.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import replace

from app.documents import Attached, DocumentError, extract_bytes, system_with_documents
from app.server.errors import ApiError
from app.server.messages import FilePart, Message
from app.server.protocol import ChatRequest

KEEP = 16
"""Extracted texts kept (by the file's bytes and name)."""


class ExtractedTexts:
    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._texts: OrderedDict[tuple[bytes, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def text(self, part: FilePart) -> str:
        key = (hashlib.sha256(part.data).digest(), part.filename)
        with self._lock:
            if key in self._texts:
                self._texts.move_to_end(key)
                return self._texts[key]
        try:
            text = extract_bytes(part.filename, part.data).text
        except DocumentError as exc:
            raise ApiError(400, f"Invalid value for '{part.param}': {exc}", param=part.param,
                           code="invalid_file") from None  # fmt: skip
        with self._lock:
            self._texts[key] = text
            while len(self._texts) > self._keep:
                self._texts.popitem(last=False)
        return text


TEXTS = ExtractedTexts()


def with_documents(request: ChatRequest, texts: ExtractedTexts = TEXTS) -> ChatRequest:
    """``request`` with its ``file`` parts moved into the system message (unchanged when it
    has none)."""
    parts = [f for m in request.messages for f in m.files]
    if not parts:
        return request
    documents = [Attached(p.filename, texts.text(p)) for p in parts]
    messages = [replace(m, files=()) for m in request.messages]
    if messages and messages[0].role == "system":
        messages[0] = replace(messages[0], content=system_with_documents(messages[0].content or "", documents))
    else:
        messages.insert(0, Message("system", system_with_documents("", documents)))
    return replace(request, messages=tuple(messages))
