"""Documents in the chat (docs/user-guide.md, Documents), on the GUI thread: attaching files
(the composer's button, a drop on the chat, a paste), the chat's list of its documents under
the header, and "New chat with these documents".

A file's text is extracted on a worker thread (``app.documents.extract``: a refusal comes back
as a message, and nothing is attached); then it is stored with the chat (``Storage.
attach_document``) and read at once into the chat's sequence by type-ahead (``TypeAhead.
read_now``, at the engine's lowest priority), so by the time the question is typed only the
question is left. Where a document goes in the prompt is ``app.documents.layout``'s: after the
system prompt, before the conversation, which is what lets every chat attaching the same files
reuse their tokens. Attaching to a chat that already has messages therefore reads the
conversation again after the document: the app says how much first, and asks.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, Signal, SignalInstance
from PySide6.QtWidgets import QWidget

from app.documents import (
    DocumentError,
    Extracted,
    document_block,
    extract_file,
    system_with_documents,
)
from app.storage import ChatDocument, StorageError
from app.ui.chat.composer import Composer
from app.ui.chat.controller import ChatController
from app.ui.chat.documents_bar import DocumentsBar, DropFiles, document_line
from app.ui.chat.type_ahead import TypeAhead
from app.ui.confirm import confirm_stop

log = logging.getLogger(__name__)

REPLY_ROOM = 512
"""Tokens a chat's documents leave for the conversation and the reply, at the least, before
the app says they do not fit."""


@dataclass(slots=True)
class _Job:
    job_id: str
    cid: str
    path: str
    name: str
    done: int = 0
    total: int = 0
    pages: tuple[int, int] | None = None
    """Keep only these pages (first, last) of a PDF."""
    replaces: ChatDocument | None = None
    """The chat's document this job's result takes the place of (a page range of it)."""


__all__ = ["ChatDocuments", "DocumentAttacher", "DocumentsBar", "parse_pages"]


class DocumentAttacher(QObject):
    """Extraction off the GUI thread, then the chat's documents (stored, counted, read)."""

    changed = Signal(str)  # conversation id: its documents (or their counts, or a job) changed
    refused = Signal(str, str)  # conversation id, why a file was not attached
    attached = Signal(str, str)  # conversation id, file name
    counted = Signal(str)  # conversation id: its system message and documents were counted
    _progress = Signal(str, int, int)  # job id, pages done, pages (worker thread → GUI)
    _finished = Signal(str, object)  # job id, Extracted | str (worker thread → GUI)

    def __init__(self, controller: ChatController, parent_widget: QWidget) -> None:
        super().__init__(parent_widget)
        self.controller = controller
        self.parent_widget = parent_widget
        self.jobs: dict[str, _Job] = {}
        self._queue: dict[str, list[str]] = {}
        """Chat id → its jobs, in the order they were asked: a job's result is attached only
        after those before it (files dropped together are attached in their order, whichever
        is read first; the order is the prompt's, so it decides what the cache can reuse)."""
        self._results: dict[str, object] = {}
        self.tokens: dict[tuple[str, str], int] = {}
        """(model id, a document's SHA-256 or a chat's id) → tokens of its block, or of the
        chat's whole system message (its system prompt and documents)."""
        self.watched: set[str] = set()
        """Chats whose documents were counted (told when a count arrives)."""
        self.sources: dict[tuple[str, str], str] = {}
        """(chat id, a document's SHA-256) → the file it was read from (this session: a page
        range is read from it again)."""
        self._progress.connect(self._on_progress)
        self._finished.connect(self._on_finished)
        controller.models.count_received.connect(self._on_count)

    # -- attaching ---------------------------------------------------------------------------

    def attach(self, cid: str, paths: list[str]) -> None:
        """Read each file on a worker thread; each is attached, or refused with a message."""
        for path in paths:
            job = _Job(uuid.uuid4().hex, cid, path, Path(path).name)
            self.jobs[job.job_id] = job
            self._queue.setdefault(cid, []).append(job.job_id)
            threading.Thread(target=self._extract, args=(job,), name="hearth-document", daemon=True).start()
        self.changed.emit(cid)

    def attach_pages(self, cid: str, doc: ChatDocument, first: int, last: int) -> None:
        """Read pages ``first``..``last`` of ``doc``'s file again, and attach them in its place."""
        path = self.sources.get((cid, doc.sha256))
        if path is None:
            self.refused.emit(cid, f"{doc.name}'s file is not known any more: attach it again.")
            return
        job = _Job(uuid.uuid4().hex, cid, path, Path(path).name, pages=(first, last), replaces=doc)
        self.jobs[job.job_id] = job
        self._queue.setdefault(cid, []).append(job.job_id)
        threading.Thread(target=self._extract, args=(job,), name="hearth-document", daemon=True).start()
        self.changed.emit(cid)

    def _extract(self, job: _Job) -> None:  # worker thread: emit only
        try:
            doc = extract_file(job.path, lambda d, t: self._progress.emit(job.job_id, d, t))
            result: Extracted | str = doc.page_range(*job.pages) if job.pages is not None else doc
        except DocumentError as exc:
            result = str(exc)
        except Exception as exc:  # a bug must not leave the job hanging
            log.exception("extracting %s failed", job.path)
            result = f"{job.name} could not be read ({type(exc).__name__}: {exc})."
        self._finished.emit(job.job_id, result)

    def _on_progress(self, job_id: str, done: int, total: int) -> None:
        job = self.jobs.get(job_id)
        if job is not None:
            job.done, job.total = done, total
            self.changed.emit(job.cid)

    def _on_finished(self, job_id: str, result: object) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        self._results[job_id] = result
        queue = self._queue.get(job.cid, [])
        while queue and queue[0] in self._results:  # in the order asked
            done, result = self.jobs.pop(queue[0]), self._results.pop(queue.pop(0))
            if isinstance(result, Extracted):
                if done.replaces is not None:
                    self.remove(done.cid, done.replaces)
                self._store(done.cid, result, done.path)
            else:
                self.refused.emit(done.cid, str(result))
        if not queue:
            self._queue.pop(job.cid, None)
        self.changed.emit(job.cid)

    def _store(self, cid: str, doc: Extracted, path: str) -> None:
        if self.controller.conversation(cid) is None:
            self.refused.emit(cid, f"{doc.name} was not attached: its chat is gone.")
            return
        history = self.controller.branch(cid)
        if history and not self._confirm_reread(cid, doc, len(history)):
            return
        try:
            stored = self.controller.storage.attach_document(cid, doc.name, doc.text, kind=doc.kind, pages=doc.pages)
        except StorageError as exc:
            self.refused.emit(cid, f"{doc.name} was not attached: {exc}")
            return
        self.sources[(cid, stored.sha256)] = path
        self.attached.emit(cid, doc.name)
        self.count(cid)

    def _confirm_reread(self, cid: str, doc: Extracted, num_messages: int) -> bool:
        """Documents go before the conversation: attaching one to a chat that has messages reads
        them again after it. Say how much, and ask."""
        held = self.controller.last_context_tokens(cid)
        size = f"its {held:,} tokens" if held else f"its {num_messages} messages"
        return confirm_stop(
            self.parent_widget, "Attach to this chat?",
            f"Documents go before the conversation, so that every chat with the same documents "
            f"reads them once. Attaching {doc.name} here reads this chat's conversation again after "
            f"it ({size}), once. To keep this chat as it is, attach it in a new chat instead.",
            "Attach and read again",
        )  # fmt: skip

    def remove(self, cid: str, doc: ChatDocument) -> None:
        try:
            self.controller.storage.remove_document(cid, doc.sha256)
        except StorageError as exc:
            self.refused.emit(cid, f"{doc.name} was not removed: {exc}")
            return
        self.changed.emit(cid)
        self.count(cid)

    def new_chat_with(self, cid: str) -> str | None:
        """A new chat with ``cid``'s documents in their order, and its system prompt and model:
        the same prompt head, so the new chat starts from the documents' KV."""
        source = self.controller.conversation(cid)
        conv = self.controller.new_conversation()
        if conv is None:
            return None
        if source is not None:
            if source.system_prompt != conv.system_prompt:
                self.controller.update_settings(conv.id, system_prompt=source.system_prompt)
            if source.model_id and source.model_id != conv.model_id and self.controller.models.get(source.model_id):
                self.controller.set_model(conv.id, source.model_id)
        try:
            self.controller.storage.copy_documents(cid, conv.id)
        except StorageError as exc:
            self.refused.emit(conv.id, f"The documents were not attached: {exc}")
        return conv.id

    # -- what the chat shows -----------------------------------------------------------------

    def documents(self, cid: str | None) -> list[ChatDocument]:
        if not cid:
            return []
        try:
            return self.controller.storage.documents(cid)
        except StorageError as exc:
            log.info("documents of %s unreadable: %s", cid, exc)
            return []

    def pending(self, cid: str | None) -> list[tuple[str, int, int]]:
        """Files being read for ``cid``: (name, pages done, pages)."""
        return [(j.name, j.done, j.total) for j in self.jobs.values() if j.cid == cid]

    def count(self, cid: str) -> None:
        """Ask the chat's model to count each document's tokens and the system message's."""
        model_id = self.controller.model_of(cid)
        bridge = self.controller.models.get(model_id)
        if bridge is None:
            return
        self.watched.add(cid)
        docs = self.documents(cid)
        for d in docs:
            if (model_id, d.sha256) not in self.tokens:
                bridge.count_tokens(f"doc|{d.sha256}|{model_id}", document_block(d.name, d.text))
        conv = self.controller.conversation(cid)
        if conv is not None and docs:
            bridge.count_tokens(f"docs|{cid}|{model_id}", system_with_documents(conv.system_prompt, docs))

    def _on_count(self, key: str, n: int) -> None:
        kind, ident, model_id = (key.split("|", 2) + ["", ""])[:3]
        if kind not in ("doc", "docs"):
            return
        self.tokens[(model_id, ident)] = n
        for cid in {ident} if kind == "docs" else {j for j in self.watched}:
            self.changed.emit(cid)
        if kind == "docs":
            self.counted.emit(ident)

    def doc_tokens(self, cid: str, doc: ChatDocument) -> int | None:
        return self.tokens.get((self.controller.model_of(cid), doc.sha256))

    def too_big(self, cid: str | None) -> str:
        """Why the chat's documents cannot be sent with its model ("" when they fit, or are
        not counted yet): the numbers, and what works."""
        if not cid or not self.documents(cid):
            return ""
        model_id = self.controller.model_of(cid)
        need = self.tokens.get((model_id, cid))
        bridge = self.controller.models.get(model_id)
        if need is None or bridge is None or not bridge.n_ctx:
            return ""
        limit = bridge.n_ctx - REPLY_ROOM
        if need <= limit:
            return ""
        return (f"Too big for the context: with its documents this chat starts at about {need:,} tokens, "
                f"and {self.controller.models.label(model_id)} holds {bridge.n_ctx:,} (at least {REPLY_ROOM:,} "
                "must stay for the conversation and the reply). Load the model with a larger context in "
                "Models › Library (it estimates the memory it takes), attach only the pages you need, or "
                "remove a document. Nothing is sent until it fits: no part of a document is cut.")

    def pages_to_keep(self, cid: str | None) -> ChatDocument | None:
        """The chat's last PDF that a page range could shrink, while its documents are too big."""
        if not cid or not self.too_big(cid):
            return None
        pdfs = [d for d in self.documents(cid) if d.pages > 1 and (cid, d.sha256) in self.sources]
        return pdfs[-1] if pdfs else None

    def reading_words(self, cid: str, held: int, target: int) -> str:
        """"Reading contract.pdf… 2,314 / 5,120 tokens" while the chat's documents are read."""
        docs = self.documents(cid)
        if not docs:
            return ""
        return f"Reading {docs[-1].name}… {held:,} / {target:,} tokens"


class DocumentsPage(Protocol):
    """What the documents use of the chat page they belong to (``app.ui.chat.chat_page.ChatPage``)."""

    controller: ChatController
    composer: Composer
    documents_bar: DocumentsBar
    type_ahead: TypeAhead
    current_id: str | None

    @property
    def current_changed(self) -> SignalInstance: ...
    def new_conversation(self) -> str | None: ...
    def open_conversation(self, cid: str | None) -> None: ...
    def update_meter(self) -> None: ...


class ChatDocuments(QObject):
    """The chat page's documents: its attach button, drops and pastes of files, the bar under
    the header, reading on attach (type-ahead) and the too-big check before sending.
    ``widget``: the page as a widget (the dialogs' parent and the drops' target)."""

    def __init__(self, page: DocumentsPage, widget: QWidget) -> None:
        super().__init__(widget)
        self.page = page
        self._widget = widget
        self.attacher = DocumentAttacher(page.controller, widget)
        self.bar = page.documents_bar
        self._notes: dict[str, str] = {}
        """Chat id → why its last file was refused (shown until the next attach)."""
        self._reading: dict[str, tuple[int, int, bool]] = {}
        """Chat id → (held, target, reading) of its documents' read (type-ahead's view)."""
        self.drops = DropFiles(widget)
        self.drops.dropped.connect(self.attach_files)
        page.composer.attach_requested.connect(self.choose_files)
        page.composer.input.files_given.connect(self.attach_files)
        page.type_ahead.reads_documents = self._wants_read
        page.type_ahead.changed.connect(self._on_read_ahead_changed)
        page.current_changed.connect(lambda _cid: self.refresh())
        page.controller.models_changed.connect(self._recount)
        page.controller.conversation_updated.connect(self._on_conversation_updated)
        page.controller.busy_changed.connect(self._on_busy_changed)
        self.attacher.changed.connect(self._on_changed)
        self.attacher.refused.connect(self._on_refused)
        self.attacher.attached.connect(self._on_attached)
        self.attacher.counted.connect(self._on_counted)
        self.bar.remove_requested.connect(self._remove)
        self.bar.new_chat_requested.connect(self.new_chat_with_documents)
        self.bar.pages_requested.connect(self.choose_pages)

    def choose_files(self) -> None:
        from PySide6.QtWidgets import QFileDialog

        paths, _ = QFileDialog.getOpenFileNames(
            self._widget, "Attach files", "",
            "Documents (*.txt *.md *.markdown *.pdf *.html *.htm *.docx *.csv *.json *.log *.py *.js *.ts "
            "*.c *.h *.cpp *.rs *.go *.java *.rb *.sh *.toml *.yaml *.yml *.xml);;All files (*)",
        )  # fmt: skip
        if paths:
            self.attach_files(paths)

    def attach_files(self, paths: list[str]) -> None:
        cid = self.page.current_id or self.page.new_conversation()
        if cid is None:
            return
        self._notes.pop(cid, None)
        self.attacher.attach(cid, list(paths))

    def choose_pages(self) -> None:
        """Ask which pages of the too-big PDF to keep, and attach those in its place."""
        from PySide6.QtWidgets import QInputDialog

        cid = self.page.current_id
        doc = self.attacher.pages_to_keep(cid)
        if cid is None or doc is None:
            return
        text, ok = QInputDialog.getText(self._widget, "Keep pages",
                                        f"{doc.name} has {doc.pages} pages. Pages to keep (for example 1-5):")  # fmt: skip
        if not ok:
            return
        span = parse_pages(text, doc.pages)
        if span is None:
            self._on_refused(cid, f"“{text}” is not a page range of {doc.name} (pages 1 to {doc.pages}).")
            return
        self.attacher.attach_pages(cid, doc, *span)

    def new_chat_with_documents(self) -> str | None:
        cid = self.page.current_id
        if not cid:
            return None
        new = self.attacher.new_chat_with(cid)
        if new is not None:
            self.page.open_conversation(new)
            self.attacher.count(new)
            self.page.type_ahead.documents_changed(new)
        return new

    def too_big(self, cid: str) -> str:
        return self.attacher.too_big(cid)

    def head_tokens(self, cid: str) -> int:
        """Tokens of the chat's system message with its documents, as last counted (0 without
        documents): what the context meter shows before the chat's first reply."""
        if not self.attacher.documents(cid):
            return 0
        return self.attacher.tokens.get((self.page.controller.model_of(cid), cid), 0)

    def _wants_read(self, cid: str) -> bool:
        return bool(self.attacher.documents(cid)) and not self.attacher.too_big(cid)

    def _remove(self, doc: ChatDocument) -> None:
        cid = self.page.current_id
        if cid:
            self.attacher.remove(cid, doc)
            self.page.type_ahead.documents_changed(cid)

    def _on_attached(self, cid: str, _name: str) -> None:
        self.page.type_ahead.documents_changed(cid)

    def _on_counted(self, cid: str) -> None:
        """Whether the documents fit is known now: read them if they do (a read asked before
        the count, while an earlier count said "too big", was not sent)."""
        if self._wants_read(cid):
            self.page.type_ahead.documents_changed(cid)
        if cid == self.page.current_id:
            self.page.update_meter()  # the documents' tokens count before the first reply

    def _on_refused(self, cid: str, text: str) -> None:
        self._notes[cid] = text
        self._on_changed(cid)

    def _on_changed(self, cid: str) -> None:
        if cid == self.page.current_id:
            self.refresh()

    def _on_busy_changed(self, cid: str, busy: bool) -> None:
        if not busy:  # a reply ended: what holds the documents may have changed
            self._on_changed(cid)

    def _on_conversation_updated(self, cid: str) -> None:
        if cid == self.page.current_id and self.attacher.documents(cid):
            self.attacher.count(cid)  # its system prompt or model changed

    def _recount(self) -> None:
        if self.page.current_id:
            self.attacher.count(self.page.current_id)

    def _on_read_ahead_changed(self, cid: str) -> None:
        if cid != self.page.current_id or not self.attacher.documents(cid):
            return
        view = self.page.type_ahead.view(cid)
        if view is None:
            return
        self._reading[cid] = (view.held, view.target, view.reading)
        if view.reading and not self.page.composer.input.toPlainText().strip():
            self.page.composer.show_reading(self.attacher.reading_words(cid, view.held, view.target))
        elif not view.long:
            self.page.composer.show_reading("")
        self.refresh()

    def held_words(self, cid: str) -> str:
        """What holds the chat's documents, as far as this session saw: read ahead into the
        chat's sequence, or reused by its last reply (from the cache, or the chat's memory)."""
        held, target, reading = self._reading.get(cid, (0, 0, False))
        if reading:
            return "reading…"
        stats = next((m.stats for m in reversed(self.page.controller.branch(cid)) if m.stats), None)
        if stats is not None and stats.tokens_reused:
            where = "the cache" if stats.reuse_source == "cache" else "this chat's memory"
            return f"kept: the last reply reused {stats.tokens_reused:,} tokens from {where}"
        if target and held >= target:
            return "read: in this chat's memory"
        return "kept in the cache" if stats is not None else "not read yet"

    def refresh(self) -> None:
        cid = self.page.current_id
        docs = self.attacher.documents(cid)
        if cid and docs and not any((self.page.controller.model_of(cid), d.sha256) in self.attacher.tokens for d in docs):
            self.attacher.count(cid)
        held = self.held_words(cid) if cid else ""
        rows = [(d, document_line(d, self.attacher.doc_tokens(cid or "", d), held)) for d in docs]
        reading = [f"Reading {name}… page {done:,} of {total:,}" if total else f"Reading {name}…"
                   for name, done, total in self.attacher.pending(cid)]  # fmt: skip
        note = (self._notes.get(cid or "") or self.attacher.too_big(cid)) if cid else ""
        self.bar.show_documents(rows, reading, note, self.attacher.pages_to_keep(cid) is not None)



def parse_pages(text: str, pages: int) -> tuple[int, int] | None:
    """"3-10" / "3–10" / "4" → (first, last) within 1..``pages``; None for anything else."""
    parts = text.replace("–", "-").replace(" ", "").split("-")
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
        return None
    first, last = int(parts[0]), int(parts[-1])
    return (first, last) if 1 <= first <= last <= pages else None
