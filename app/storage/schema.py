"""SQLAlchemy 2.0 tables of the app database: conversations, messages (a tree), settings."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, String, Text
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
