"""What type-ahead reads of a draft (docs/user-guide.md, type-ahead), without Qt.

While a message is being written, the app reads the prompt it would send into the chat's
sticky sequence (``Model.read_ahead``), so that on Enter only the last few tokens and the
assistant header remain. What is read is the prompt rendered with the draft as the last user
message — through the same window planner as the real request, so an overflowing draft reads
only what the overflow policy will send — **up to the draft's end, minus a few tokens**:
nothing after it (no end-of-turn, no assistant header), and not the last tokens, whose
tokenization may still change as typing goes on.

Where the draft ends is found without reading text: the prompt is rendered a second time with
``PROBE`` appended to the draft as typed (``probe_of``). The two token lists agree up to the
draft's end; a word being typed merges with the probe, so it is left out by itself, and
``MARGIN`` more tokens cover merges across words (a run of newlines or punctuation that
grows). A draft that ends with a space or a newline just typed ends with a whole word: its
tokens no longer change as typing goes on, and no margin is left (``margin_of``).

A **whole** read (``whole=True``: the composer asks for one when the engine has nothing else
to do) reads the word being typed too: the probe is then a word of its own after the draft
(``" " + PROBE``), so the two renderings agree up to the draft's very end — never past it: the
token there (end of turn, or a token merging the draft's end with the template's text) differs
from the probe's. A word still being typed may tokenize differently once it grows; the next
read's prefix match drops that tail, as an edit does (for a transformer a ``seq_rm`` of a few
cells), so whole reads are asked only of models whose memory can drop a tail.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.cache.prefix import common_prefix_len
from app.conversation.window import Turn
from app.storage import Storage

PROBE = "x"
MARGIN = 2
"""Tokens left out before where the draft and the probed draft part.
NOTE: measured on SmolLM2's tokenizer, reading after every character typed of six messages
(prose, code with indentation, numbers, runs of spaces and tabs, punctuation runs): with no
margin 159 of 556 reads changed a token an earlier read had read (each a tail the engine must
drop, and on a recurrent model a re-read from a checkpoint), with 1 token 26, with 2 none.
Reading after each word instead: 1 of 106 with no margin, none with 1 or 2.
Measured again (SmolLM2, ``probe_of`` the draft as typed): reading at every
character typed of eleven texts (B11's messages, code with indentation and tabs, numbers,
prices, a URL, runs of punctuation and of spaces and newlines), no margin changed 645 of
1,894 reads, 1 token 75, 2 tokens 5; reading only where a space or newline was just typed,
no margin changed none of 382, and left 8 tokens for Enter where 2 left 10."""

DRAFT_ID = "draft"
"""The id of the draft's turn in a view (a message not stored yet)."""


def with_draft(turns: Sequence[Turn], draft: str) -> tuple[Turn, ...]:
    """The branch as the model would see it once ``draft`` is sent."""
    return (*turns, Turn(DRAFT_ID, "user", draft))


def probe_of(draft: str, whole: bool = False) -> str:
    """The draft as typed (its leading blanks go, as the message's do), then ``PROBE``; for a
    ``whole`` read the draft as sent, then ``PROBE`` as a word of its own."""
    return draft.strip() + " " + PROBE if whole else draft.lstrip() + PROBE


def margin_of(draft: str, whole: bool = False) -> int:
    """Tokens to leave out of a read of ``draft`` (as typed): none after a word just ended, nor
    in a ``whole`` read."""
    return 0 if whole or draft[-1:].isspace() else MARGIN


def readable_prefix(prompt: Sequence[int], probed: Sequence[int], margin: int = MARGIN) -> list[int]:
    """The tokens of ``prompt`` (rendered with the draft) that type-ahead may read: those it
    shares with ``probed`` (rendered with ``probe_of(draft)``), less ``margin`` (``margin_of(draft)``)."""
    n = common_prefix_len(prompt, probed) - margin
    return list(prompt[: max(0, n)])


DEFAULT_KEY = "chat/type_ahead"


def chat_key(conversation_id: str) -> str:
    return f"type_ahead/{conversation_id}"


class TypeAheadSetting:
    """Type-ahead on or off: app-wide (Settings › New chats, on unless turned off) and per
    chat (its settings panel; None follows the app-wide choice). Every call may raise
    ``StorageError`` (the database's fault), as ``ConversationState`` does."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def default(self) -> bool:
        return self.storage.get_setting(DEFAULT_KEY) is not False

    def set_default(self, on: bool) -> None:
        self.storage.set_setting(DEFAULT_KEY, bool(on))

    def own(self, conversation_id: str) -> bool | None:
        raw = self.storage.get_setting(chat_key(conversation_id))
        return raw if isinstance(raw, bool) else None

    def set_own(self, conversation_id: str, on: bool | None) -> None:
        """``None``: follow the app-wide choice again."""
        if on is None:
            self.storage.delete_setting(chat_key(conversation_id))
        else:
            self.storage.set_setting(chat_key(conversation_id), bool(on))

    def enabled(self, conversation_id: str) -> bool:
        own = self.own(conversation_id)
        return self.default() if own is None else own
