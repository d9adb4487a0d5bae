"""The app database (conversations, message trees, settings). No Qt here."""

from app.storage.paths import data_dir, database_path
from app.storage.records import Conversation, Message, ReplyStats, SamplingSettings, Siblings
from app.storage.storage import DEFAULT_TITLE, Storage, StorageError

__all__ = [
    "DEFAULT_TITLE",
    "Conversation",
    "Message",
    "ReplyStats",
    "SamplingSettings",
    "Siblings",
    "Storage",
    "StorageError",
    "data_dir",
    "database_path",
]
