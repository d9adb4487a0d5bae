"""Type-ahead in the composer (docs/user-guide.md), on the GUI thread: when a chat's draft is read ahead.

When a word ends (a space or a newline typed), when typing pauses (``DEBOUNCE_MS``; only
``IDLE_PAUSE_MS`` when the engine has nothing else to do, and then the word being typed is
read too), or at once on a paste, the chat's view with the draft as its last user message is read into the chat's sticky sequence by its model's bridge
(``EngineBridge.read_ahead``: rendered through the chat's overflow policy and sent off the GUI
thread, at the engine's lowest priority; ``app.conversation.type_ahead`` says what of it is
read). On Enter the message goes as the ordinary request and finds almost all of its prompt
held already; its reply is the one it would be without.

A chat's attached documents are read the same way the moment they are attached, with an
empty draft (``reads_documents``): the system prompt and the documents, up to where the
message will go (``app.ui.chat.documents``).

It never reads for a remote model, while the chat's own reply is being written (the draft is
read once it ends), or when it is turned off (Settings › New chats, or the chat's settings).
It stops when the draft is cleared, the chat is left, the model is unloaded or changed; what
it read stays as the chat's sticky state. A change of the chat's system prompt or model
reads the draft again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from app.conversation.requests import ReadAheadRequest
from app.conversation.type_ahead import TypeAheadSetting
from app.storage import StorageError
from app.ui.bridge_records import ReadAheadUpdate
from app.ui.chat.controller import ChatController
from app.ui.engine_bridge import EngineBridge

log = logging.getLogger(__name__)

DEBOUNCE_MS = 200
"""Typing pauses this long inside a word before the draft is read. NOTE: a typist at 8
characters a second pauses ~125 ms between keys: 200 ms reads at pauses, not at every key
(each read renders the chat twice on the bridge thread)."""

WORD_END_MS = 0
"""A space or newline just typed (a word ended) reads at once: a read then leaves nothing
out (``app.conversation.type_ahead.margin_of``). NOTE: with reads only at 300 ms pauses
(B11 before), each message's last stretch and a 2-token margin were still to read on Enter:
10 tokens left where 8 are now (the last word, the end of turn, the assistant header)."""

IDLE_PAUSE_MS = 50
"""While the chat's model runs no request and the draft's last read is done, typing that
pauses this long is read at once, the word being typed included (a whole read,
``app.conversation.type_ahead``). NOTE: B11 types at 8 characters a second (125 ms a key),
so reads waited for a 200 ms pause at word ends only: each message's last word, typed after
the last read, was still to read on Enter with the end of turn and the assistant header (8
tokens at Enter where 5 remain with it, ~5 ms a token on one thread). While another reply
streams, or a long read (a paste) goes on, reads keep to word ends and ``DEBOUNCE_MS``."""

LONG_READ = 256
"""A draft with at least this many tokens still to read shows "Reading the prompt…"."""


@dataclass(frozen=True, slots=True)
class ReadAheadView:
    """What the composer shows of a chat's read-ahead."""

    read: int
    """Tokens of the draft read into the chat's sequence."""
    held: int
    target: int
    reading: bool
    long: bool
    """A long read (a paste): its progress is shown in the composer."""
    rate: float | None
    """Tokens read per second so far (for the time-left estimate)."""


class TypeAhead(QObject):
    changed = Signal(str)  # conversation id: what is read ahead of its draft changed

    def __init__(self, controller: ChatController) -> None:
        super().__init__()
        self.controller = controller
        self.models = controller.models
        self.setting = TypeAheadSetting(controller.storage)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.read_now)
        self._cid: str | None = None
        self._draft = ""
        self._generation = 0
        self._reading: dict[str, tuple[str, int]] = {}  # cid → (model id, generation) it reads on
        self._updates: dict[str, ReadAheadUpdate] = {}
        self._first: dict[str, tuple[float, int]] = {}  # cid → (time, held) of the first update
        self.reads_documents: Callable[[str], bool] = lambda _cid: False
        """Whether a chat has documents to read with an empty draft (the chat page sets it)."""
        self.sent_reads = 0
        """Read-aheads asked of a bridge (tests and B11 count them)."""
        self.models.read_ahead_received.connect(self._on_update)
        self.models.released.connect(self._on_released)
        controller.busy_changed.connect(self._on_busy_changed)
        controller.conversation_updated.connect(self._on_conversation_updated)
        controller.models_changed.connect(self._on_models_changed)

    # -- the setting -------------------------------------------------------------------------

    def enabled(self, cid: str) -> bool:
        try:
            return self.setting.enabled(cid)
        except StorageError as exc:
            log.info("type-ahead setting unreadable (%s): off", exc)
            return False

    def set_enabled(self, cid: str, on: bool | None) -> None:
        """This chat's own choice (None: follow Settings)."""
        self._store(lambda: self.setting.set_own(cid, on))
        self.follow_setting()

    def set_default(self, on: bool) -> None:
        """The app-wide choice (Settings › New chats)."""
        self._store(lambda: self.setting.set_default(on))
        self.follow_setting()

    def _store(self, call: Callable[[], None]) -> None:
        try:
            call()
        except StorageError as exc:
            self.controller.error_raised.emit(f"Could not save the type-ahead setting: {exc}")

    def follow_setting(self) -> None:
        """The setting changed: the open chat reads, or stops reading, accordingly."""
        cid = self._cid
        if cid is None:
            return
        if self.enabled(cid):
            self._schedule()
        else:
            self.stop(cid)

    # -- what the composer says --------------------------------------------------------------

    def edited(self, cid: str | None, text: str) -> None:
        """The composer's text changed: read it once typing pauses; a cleared draft stops."""
        if cid != self._cid:
            self.switched(cid)
        self._draft = text
        if not text.strip():
            self._timer.stop()
            if cid:
                self.stop(cid)
                if self.reads_documents(cid):  # the documents stay read, and are read on
                    self._schedule()
            return
        self._timer.start(WORD_END_MS if text[-1].isspace() else self._pause(cid))

    def pasted(self, cid: str | None, text: str) -> None:
        """Text was pasted: read at once, without waiting for a pause."""
        if cid != self._cid:
            self.switched(cid)
        self._draft = text
        self._timer.stop()
        self.read_now()

    def switched(self, cid: str | None) -> None:
        """Another chat is open: the one left stops reading (what it read stays its state)."""
        old, self._cid = self._cid, cid
        if old and old != cid:
            self.stop(old)
        self._schedule()

    def sending(self, cid: str) -> None:
        """Enter: the message goes as the ordinary request, which ends the read itself (what it
        read stays in the sequence, for the request to reuse)."""
        if cid == self._cid:
            self._timer.stop()
        self._reading.pop(cid, None)
        self._first.pop(cid, None)
        if self._updates.pop(cid, None) is not None:
            self.changed.emit(cid)

    def stop(self, cid: str) -> None:
        entry = self._reading.pop(cid, None)
        self._first.pop(cid, None)
        if entry is not None:
            bridge = self.models.get(entry[0])
            if isinstance(bridge, EngineBridge):
                bridge.stop_read_ahead(cid)
        if self._updates.pop(cid, None) is not None:
            self.changed.emit(cid)

    def idle(self, cid: str | None = None) -> bool:
        """No read waiting for a pause, or under way, for ``cid`` (default: the open chat)."""
        cid = cid or self._cid
        if self._timer.isActive():
            return False
        entry = self._reading.get(cid) if cid else None
        if entry is None:
            return True
        update = self._updates.get(cid or "")
        return update is not None and update.generation == entry[1] and update.finished

    def view(self, cid: str | None) -> ReadAheadView | None:
        update = self._updates.get(cid) if cid else None
        if update is None or update.skipped:
            return None
        todo = update.target - update.draft_start
        rate = None
        first = self._first.get(update.session_id)
        if first is not None:
            seconds = time.monotonic() - first[0]
            if seconds > 0 and update.held > first[1]:
                rate = (update.held - first[1]) / seconds
        return ReadAheadView(
            read=max(0, update.held - update.draft_start),
            held=update.held,
            target=update.target,
            reading=not update.finished,
            long=todo >= LONG_READ,
            rate=rate,
        )

    # -- reading -----------------------------------------------------------------------------

    def documents_changed(self, cid: str) -> None:
        """The chat's documents changed (one attached, removed): read the chat again now."""
        if cid == self._cid:
            self._timer.stop()
            self.read_now()

    def _schedule(self) -> None:
        if self._cid and (self._draft.strip() or self.reads_documents(self._cid)):
            self._timer.start(self._pause(self._cid))

    def _pause(self, cid: str | None) -> int:
        return IDLE_PAUSE_MS if cid and self._may_read_whole(cid) else DEBOUNCE_MS

    def _may_read_whole(self, cid: str) -> bool:
        """A whole read (the word being typed too) is cheap now: the chat's last read is done
        and its model runs no request (ours or another client's)."""
        entry = self._reading.get(cid)
        if entry is not None:
            update = self._updates.get(cid)
            if update is None or update.generation != entry[1] or not update.finished:
                return False
        model_id = self.controller.model_of(cid)
        bridge = self.models.get(model_id)
        if not isinstance(bridge, EngineBridge) or self.controller.replies.writing_on(model_id):
            return False
        return not any(s.state in ("prefilling", "generating") for s in bridge.model.snapshot().slots)

    def read_now(self) -> None:
        """Read the open chat's draft ahead, if type-ahead may."""
        self._timer.stop()
        cid, draft = self._cid, self._draft
        if not cid or self.controller.is_busy(cid) or not self.enabled(cid):
            return
        documents = not draft.strip() and self.reads_documents(cid)
        if not draft.strip() and not documents:
            return
        model_id = self.controller.model_of(cid)
        bridge = self.models.get(model_id)
        old = self._reading.get(cid)
        if old is not None and old[0] != model_id:
            self.stop(cid)  # the chat's model changed: the old one ended the session already
        if not isinstance(bridge, EngineBridge):  # not loaded, or a remote model
            return
        request = self.controller.replies.next_turn_request(cid)
        if request is None:
            return
        whole = self._may_read_whole(cid)
        self._generation += 1
        self._reading[cid] = (model_id, self._generation)
        self.sent_reads += 1
        bridge.read_ahead(ReadAheadRequest(request, draft, self._generation, whole, documents))

    def _on_update(self, update: ReadAheadUpdate) -> None:
        cid = update.session_id
        entry = self._reading.get(cid)
        if entry is None or entry[1] != update.generation:
            return  # an older draft's, or a chat that stopped reading
        if cid not in self._first and not update.finished:
            self._first[cid] = (time.monotonic(), update.held)
        self._updates[cid] = update
        self.changed.emit(cid)

    # -- what happens around it --------------------------------------------------------------

    def _on_released(self, model_id: str) -> None:
        """The model is being unloaded: its bridge stopped every read (what was read is gone
        with the model)."""
        for cid, (mid, _gen) in list(self._reading.items()):
            if mid == model_id:
                self._reading.pop(cid, None)
                self._first.pop(cid, None)
                self._updates.pop(cid, None)
                self.changed.emit(cid)

    def _on_busy_changed(self, cid: str, busy: bool) -> None:
        if busy:  # a request of the chat (sent, regenerated, edited) took its sequence
            self.sending(cid)
        elif cid == self._cid or not self._timer.isActive():
            # a draft written while the reply streamed, or (another chat's reply ended) one
            # the engine now has time to read whole
            self._schedule()

    def _on_conversation_updated(self, cid: str) -> None:
        if cid == self._cid:
            self._schedule()  # its system prompt or model changed: read the draft again

    def _on_models_changed(self) -> None:
        self._schedule()  # a model was loaded (or unloaded): the chat's may be there now
