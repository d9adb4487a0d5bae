"""The app database (conversations, message trees, settings). No Qt here."""

from app.storage.documents import ChatDocument
from app.storage.errors import InvalidTextError, StorageError
from app.storage.paths import data_dir, database_path
from app.storage.preferences import THEMES, ChatPreset, Preferences
from app.storage.records import Conversation, Message, ReplyStats, SamplingSettings, Siblings
from app.storage.storage import DEFAULT_TITLE, Storage, session_key

__all__ = [
    "DEFAULT_TITLE",
    "ChatDocument",
    "THEMES",
    "ChatPreset",
    "Conversation",
    "InvalidTextError",
    "Message",
    "Preferences",
    "ReplyStats",
    "SamplingSettings",
    "Siblings",
    "Storage",
    "StorageError",
    "data_dir",
    "session_key",
    "database_path",
]
