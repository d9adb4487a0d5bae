"""Message trees: every edit or regenerate adds a sibling, and a conversation's active leaf
picks the branch that is shown (``MessageStore``, a part of :class:`~app.storage.Storage`).
No Qt."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.storage.db import Database, message_record
from app.storage.errors import StorageError
from app.storage.records import Message, ReplyStats, Siblings
from app.storage.schema import ConversationRow, MessageRow
from app.storage.text import check_json, check_text


class MessageStore(Database):
    """Adding messages, walking and switching branches."""

    def add_message(
        self,
        conversation_id: str,
        parent_id: str | None,
        role: str,
        content: str,
        *,
        thinking: str = "",
        stats: ReplyStats | None = None,
        error: str = "",
        make_active: bool = True,
        message_id: str | None = None,
    ) -> Message:
        """Append a message under ``parent_id`` (None = a root); by default it becomes the leaf.
        ``message_id``: its id, when the caller chose it (a message sent before it is stored,
        ``ReplyRunner.send``); else a new one."""
        if role not in ("user", "assistant", "system", "tool"):  # tool: a call's result (app.tools)
            raise ValueError(f"unknown role {role!r}")
        check_text("the message text", content)
        check_text("the thinking text", thinking)
        check_text("the error text", error)
        if message_id is not None:
            check_text("the message id", message_id)
        stats_data = check_json("the reply stats", stats.to_dict()) if stats else None
        now = time.time()
        with self._session() as s:
            conv = self._row(s, conversation_id)
            if parent_id is not None:
                parent = s.get(MessageRow, parent_id)
                if parent is None or parent.conversation_id != conversation_id:
                    raise StorageError(f"parent message {parent_id} is not in this conversation")
            if message_id is not None and s.get(MessageRow, message_id) is not None:
                raise StorageError(f"message {message_id} exists already")
            row = MessageRow(
                id=message_id or str(uuid.uuid4()),
                conversation_id=conversation_id,
                parent_id=parent_id,
                role=role,
                content=content,
                thinking=thinking,
                stats=stats_data,
                error=error,
                created=_monotonic_after(s, conversation_id, now),
            )
            s.add(row)
            conv.updated = now
            if make_active:
                conv.active_leaf_id = row.id
            s.flush()
            return message_record(row)

    def get_message(self, message_id: str) -> Message:
        with self._session() as s:
            row = s.get(MessageRow, message_id)
            if row is None:
                raise StorageError(f"no message {message_id}")
            return message_record(row)

    def path_to(self, message_id: str | None) -> list[Message]:
        """Messages from the root down to ``message_id`` (inclusive)."""
        if message_id is None:
            return []
        out: list[Message] = []
        with self._session() as s:
            current = s.get(MessageRow, message_id)
            while current is not None:
                out.append(message_record(current))
                current = s.get(MessageRow, current.parent_id) if current.parent_id else None
        out.reverse()
        return out

    def active_branch(self, conversation_id: str) -> list[Message]:
        """The messages on the conversation's active branch, root first."""
        return [m for m, _sib in self.branch_with_siblings(conversation_id)]

    def branch_with_siblings(self, conversation_id: str) -> list[tuple[Message, Siblings]]:
        """The active branch, root first, each message with its siblings — in one query.

        This is what the chat view renders; one round trip keeps switching chats cheap, and
        the answer is kept until the next write (``ReadCache``).
        """
        return list(
            self._cache.read(
                ("branch", conversation_id), lambda: tuple(self._branch_rows(conversation_id))
            )
        )

    def _branch_rows(self, conversation_id: str) -> list[tuple[Message, Siblings]]:
        with self._session() as s:
            conv = self._row(s, conversation_id)
            rows = list(
                s.scalars(
                    select(MessageRow)
                    .where(MessageRow.conversation_id == conversation_id)
                    .order_by(MessageRow.created)
                )
            )
            leaf_id = conv.active_leaf_id
        by_id = {r.id: r for r in rows}
        children: dict[str | None, list[str]] = {}
        for r in rows:
            children.setdefault(r.parent_id, []).append(r.id)
        path: list[MessageRow] = []
        current = by_id.get(leaf_id) if leaf_id else None
        while current is not None:
            path.append(current)
            current = by_id.get(current.parent_id) if current.parent_id else None
        path.reverse()
        out = []
        for r in path:
            ids = tuple(children.get(r.parent_id, [r.id]))
            out.append((message_record(r), Siblings(ids=ids, index=ids.index(r.id))))
        return out

    def recent_replies(self, before: float, limit: int = 50) -> list[tuple[Message, str]]:
        """The newest replies created before ``before`` (unix seconds) that carry stats, in
        chats not deleted, newest first, each with its chat's model id."""
        stmt = (
            select(MessageRow, ConversationRow.model_id)
            .join(ConversationRow, ConversationRow.id == MessageRow.conversation_id)
            .where(MessageRow.role == "assistant", MessageRow.created < before)
            .where(ConversationRow.deleted_at.is_(None))
            .order_by(MessageRow.created.desc())
            .limit(4 * limit)
        )
        with self._session() as s:
            rows = [(message_record(m), model_id) for m, model_id in s.execute(stmt)]
        return [(m, model_id) for m, model_id in rows if m.stats is not None][:limit]

    def set_active_leaf(self, conversation_id: str, message_id: str | None) -> None:
        with self._session() as s:
            conv = self._row(s, conversation_id)
            if message_id is not None:
                row = s.get(MessageRow, message_id)
                if row is None or row.conversation_id != conversation_id:
                    raise StorageError(f"message {message_id} is not in this conversation")
            conv.active_leaf_id = message_id

    def select_branch(self, message_id: str) -> str:
        """Make the branch through ``message_id`` active, following its newest descendants.

        Returns the new active leaf.
        """
        with self._session() as s:
            row = s.get(MessageRow, message_id)
            if row is None:
                raise StorageError(f"no message {message_id}")
            leaf = row
            while True:
                child = s.scalars(
                    select(MessageRow)
                    .where(MessageRow.conversation_id == row.conversation_id)
                    .where(MessageRow.parent_id == leaf.id)
                    .order_by(MessageRow.created.desc())
                    .limit(1)
                ).first()
                if child is None:
                    break
                leaf = child
            self._row(s, row.conversation_id).active_leaf_id = leaf.id
            return leaf.id

    def children(self, conversation_id: str, parent_id: str | None) -> list[Message]:
        with self._session() as s:
            return [message_record(r) for r in s.scalars(self._children_stmt(conversation_id, parent_id))]

    def siblings(self, message_id: str) -> Siblings:
        """The message and its siblings (same parent), oldest first, and its index."""
        msg = self.get_message(message_id)
        ids = tuple(m.id for m in self.children(msg.conversation_id, msg.parent_id))
        return Siblings(ids=ids, index=ids.index(message_id))

    @staticmethod
    def _children_stmt(conversation_id: str, parent_id: str | None) -> Any:
        stmt = select(MessageRow).where(MessageRow.conversation_id == conversation_id)
        if parent_id is None:
            stmt = stmt.where(MessageRow.parent_id.is_(None))
        else:
            stmt = stmt.where(MessageRow.parent_id == parent_id)
        return stmt.order_by(MessageRow.created)


def _monotonic_after(s: Session, conversation_id: str, now: float) -> float:
    """A creation time strictly after the conversation's newest message, so order is stable."""
    latest = s.scalars(
        select(MessageRow.created)
        .where(MessageRow.conversation_id == conversation_id)
        .order_by(MessageRow.created.desc())
        .limit(1)
    ).first()
    return max(now, latest + 1e-6) if latest is not None else now
