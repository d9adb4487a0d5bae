"""Documents attached to a chat (docs/user-guide.md, Documents): what a file holds as text,
and where that text goes in the prompt. No Qt: the chat, the server and ``hearth bench``
share it."""

from app.documents.extract import (
    MAX_FILE_BYTES,
    DocumentError,
    Extracted,
    extract_bytes,
    extract_file,
)
from app.documents.layout import Attached, document_block, document_names, system_with_documents

__all__ = [
    "MAX_FILE_BYTES",
    "Attached",
    "DocumentError",
    "Extracted",
    "document_block",
    "document_names",
    "extract_bytes",
    "extract_file",
    "system_with_documents",
]
