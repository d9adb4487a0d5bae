"""Per-conversation state the chat keeps beside the messages, in the app database's
settings table: what the engine session holds, where the model's view starts (and its
summary), the overflow policy (with the app-wide default), and why the last reply failed
(so a restart still shows it, with Retry).

``ConversationState.next_turn`` reads, in one go, everything a chat's next request is made of
(the chat, its branch, the system prompt with its documents, these records).

Every function may raise ``StorageError`` (the environment's fault: locked, full, read-only
database); callers decide how to show it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.conversation.window import OverflowPolicy, WindowState
from app.documents import system_with_documents
from app.storage import Conversation, Message, Storage, session_key

log = logging.getLogger(__name__)

DEFAULT_POLICY_KEY = "chat/overflow_policy"


@dataclass(frozen=True, slots=True)
class SessionState:
    """What a sticky session's seq holds after a turn: that turn's prompt and its reply ids.

    Kept by the app across restarts so the first turn after a restart sends exactly the
    tokens the engine saved (an exact-prefix hit on disk) plus the new suffix.
    """

    model_id: str
    prompt: tuple[int, ...]
    generated: tuple[int, ...]
    ended_with_eog: bool

    @property
    def tokens(self) -> list[int]:
        return [*self.prompt, *self.generated]

    def to_dict(self) -> dict[str, object]:
        return {
            "model_id": self.model_id,
            "prompt": list(self.prompt),
            "generated": list(self.generated),
            "ended_with_eog": self.ended_with_eog,
        }

    @classmethod
    def from_dict(cls, data: object) -> SessionState | None:
        """None for a missing or malformed record (it is only an optimisation)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                str(data["model_id"]),
                tuple(int(t) for t in data["prompt"]),
                tuple(int(t) for t in data["generated"]),
                bool(data["ended_with_eog"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            log.info("ignoring a malformed session record: %s", exc)
            return None


@dataclass(frozen=True, slots=True)
class ReplyFailure:
    """Why the reply to the branch ending at ``message_id`` failed; ``not_loaded``: because
    the chat's model was not loaded (which no longer holds once it is)."""

    message_id: str
    text: str
    not_loaded: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"message_id": self.message_id, "text": self.text, "not_loaded": self.not_loaded}

    @classmethod
    def from_dict(cls, data: object) -> ReplyFailure | None:
        if not isinstance(data, dict):
            return None
        message_id, text = data.get("message_id"), data.get("text")
        if not isinstance(message_id, str) or not isinstance(text, str):
            return None
        return cls(message_id, text, bool(data.get("not_loaded")))


@dataclass(frozen=True, slots=True)
class NextTurn:
    """One read of a chat: everything its next request is made of (``next_turn``)."""

    conversation: Conversation
    branch: tuple[Message, ...]
    """The branch the request answers, root first (the active one, or up to a given leaf)."""
    system: str
    """The system prompt, then the chat's documents (``app.documents.layout``)."""
    window: WindowState
    policy: OverflowPolicy
    session: SessionState | None

    @property
    def unanswered(self) -> bool:
        """The branch ends with a user message (a second one in a row is not sent)."""
        return bool(self.branch) and self.branch[-1].role == "user"


def failure_key(conversation_id: str) -> str:
    return f"failure/{conversation_id}"


def window_key(conversation_id: str) -> str:
    return f"window/{conversation_id}"


def policy_key(conversation_id: str) -> str:
    return f"overflow/{conversation_id}"


class ConversationState:
    """Reads and writes the records above for one app database."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def next_turn(self, cid: str, leaf_id: str | None = None) -> NextTurn:
        """What the chat's next request is made of: the active branch, or the branch up to
        ``leaf_id`` (a reply regenerated, continued, or an edit's new message)."""
        conv = self.storage.get_conversation(cid)
        branch = self.storage.path_to(leaf_id) if leaf_id else self.storage.active_branch(cid)
        system = system_with_documents(conv.system_prompt, self.storage.documents(cid))
        return NextTurn(conv, tuple(branch), system, self.window(cid), self.policy(cid), self.session(cid))

    def session(self, cid: str) -> SessionState | None:
        return SessionState.from_dict(self.storage.get_setting(session_key(cid)))

    def save_session(self, cid: str, state: SessionState) -> None:
        self.storage.set_setting(session_key(cid), state.to_dict())

    def window(self, cid: str) -> WindowState:
        return WindowState.from_dict(self.storage.get_setting(window_key(cid)))

    def save_window(self, cid: str, state: WindowState) -> None:
        if state == WindowState():
            self.storage.delete_setting(window_key(cid))
        else:
            self.storage.set_setting(window_key(cid), state.to_dict())

    def failure(self, cid: str) -> ReplyFailure | None:
        return ReplyFailure.from_dict(self.storage.get_setting(failure_key(cid)))

    def save_failure(self, cid: str, failure: ReplyFailure | None) -> None:
        """``None``: the conversation's last reply did not fail (any more)."""
        if failure is None:
            self.storage.delete_setting(failure_key(cid))
        else:
            self.storage.set_setting(failure_key(cid), failure.to_dict())

    def default_policy(self) -> OverflowPolicy:
        return OverflowPolicy.parse(self.storage.get_setting(DEFAULT_POLICY_KEY))

    def set_default_policy(self, policy: OverflowPolicy) -> None:
        self.storage.set_setting(DEFAULT_POLICY_KEY, policy.value)

    def own_policy(self, cid: str) -> OverflowPolicy | None:
        """The conversation's own choice; None when it follows the default."""
        raw = self.storage.get_setting(policy_key(cid))
        return None if raw is None else OverflowPolicy.parse(raw)

    def policy(self, cid: str) -> OverflowPolicy:
        return self.own_policy(cid) or self.default_policy()

    def set_policy(self, cid: str, policy: OverflowPolicy | None) -> None:
        """``None``: follow the app-wide default again."""
        if policy is None:
            self.storage.delete_setting(policy_key(cid))
        else:
            self.storage.set_setting(policy_key(cid), policy.value)
