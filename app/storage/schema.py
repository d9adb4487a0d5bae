"""SQLAlchemy 2.0 tables of the app database: conversations, messages (a tree), settings,
documents (stored once) and the chats they are attached to."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class ConversationRow(Base):
    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    title: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[float] = mapped_column(Float)
    updated: Mapped[float] = mapped_column(Float, index=True)
    system_prompt: Mapped[str] = mapped_column(Text, default="")
    model_id: Mapped[str] = mapped_column(String(200), default="")
    sampling: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    active_leaf_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    # NOTE: soft delete, so "Undo" can bring a conversation back; purged on the next start.
    deleted_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class MessageRow(Base):
    __tablename__ = "messages"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    # NOTE: messages form a tree; an edit or a regenerate adds a sibling instead of
    # overwriting, and the conversation's active leaf picks the branch that is shown.
    parent_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text, default="")
    thinking: Mapped[str] = mapped_column(Text, default="")
    stats: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_messages_parent", "conversation_id", "parent_id"),)


class SettingRow(Base):
    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[object] = mapped_column(JSON, nullable=True)


class DocumentRow(Base):
    """A document's text, stored once whatever the number of chats that attach it: keyed by
    the SHA-256 of the text (content-addressed)."""

    __tablename__ = "documents"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    created: Mapped[float] = mapped_column(Float)


class ChatDocumentRow(Base):
    """A document attached to a conversation: at ``position`` (attach order), under the file
    name it was attached with."""

    __tablename__ = "chat_documents"

    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    sha256: Mapped[str] = mapped_column(ForeignKey("documents.sha256"), index=True)
    name: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16), default="text")
    pages: Mapped[int] = mapped_column(Integer, default=0)
    added: Mapped[float] = mapped_column(Float)
