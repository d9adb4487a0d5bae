"""Documents attached to conversations (``DocumentStore``, a part of :class:`~app.storage.Storage`).

A document's text is stored once, keyed by its SHA-256 (``documents``); a chat lists the
documents it attached, in attach order, under the names they were attached with
(``chat_documents``). Two chats attaching the same file share one text. A document no chat
lists any more is deleted with the last chat that listed it (``purge_documents``). No Qt.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from sqlalchemy import delete, func, select

from app.storage.db import Database
from app.storage.schema import ChatDocumentRow, DocumentRow
from app.storage.text import check_text


@dataclass(frozen=True, slots=True)
class ChatDocument:
    """A document as a chat holds it."""

    sha256: str
    name: str
    kind: str
    pages: int
    text: str
    added: float


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class DocumentStore(Database):
    def documents(self, conversation_id: str) -> list[ChatDocument]:
        """The chat's documents, in attach order."""

        def load() -> list[ChatDocument]:
            with self._session() as s:
                rows = s.execute(
                    select(ChatDocumentRow, DocumentRow.text)
                    .join(DocumentRow, DocumentRow.sha256 == ChatDocumentRow.sha256)
                    .where(ChatDocumentRow.conversation_id == conversation_id)
                    .order_by(ChatDocumentRow.position)
                ).all()
                return [ChatDocument(r.sha256, r.name, r.kind, r.pages, text, r.added) for r, text in rows]

        return list(self._cache.read(("documents", conversation_id), load))

    def attach_document(self, conversation_id: str, name: str, text: str, *, kind: str = "text",
                        pages: int = 0) -> ChatDocument:  # fmt: skip
        """Attach ``text`` (the file ``name``) after the chat's other documents; its text is
        stored unless another chat stored it already."""
        check_text("the document's name", name)
        check_text("the document's text", text)
        sha = text_sha256(text)
        now = time.time()
        with self._session() as s:
            self._row(s, conversation_id)  # a missing chat raises
            if s.get(DocumentRow, sha) is None:
                s.add(DocumentRow(sha256=sha, text=text, created=now))
            last = s.scalar(
                select(func.max(ChatDocumentRow.position)).where(ChatDocumentRow.conversation_id == conversation_id)
            )
            s.add(ChatDocumentRow(conversation_id=conversation_id, position=(last or 0) + 1, sha256=sha,
                                  name=name, kind=kind, pages=pages, added=now))  # fmt: skip
        return ChatDocument(sha, name, kind, pages, text, now)

    def copy_documents(self, source_id: str, target_id: str) -> None:
        """Attach ``source_id``'s documents to ``target_id`` (after its own), in their order."""
        for doc in self.documents(source_id):
            self.attach_document(target_id, doc.name, doc.text, kind=doc.kind, pages=doc.pages)

    def remove_document(self, conversation_id: str, sha256: str) -> None:
        """Take the document off the chat (its text stays while another chat lists it)."""
        with self._session() as s:
            s.execute(
                delete(ChatDocumentRow)
                .where(ChatDocumentRow.conversation_id == conversation_id)
                .where(ChatDocumentRow.sha256 == sha256)
            )
        self.purge_documents()

    def purge_documents(self) -> int:
        """Delete the texts no chat lists any more; how many."""
        with self._session() as s:
            listed = select(ChatDocumentRow.sha256)
            result = s.execute(delete(DocumentRow).where(DocumentRow.sha256.not_in(listed)))
            return int(getattr(result, "rowcount", 0) or 0)
