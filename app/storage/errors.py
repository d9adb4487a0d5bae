"""The storage layer's errors. No Qt."""

from __future__ import annotations


class StorageError(Exception):
    """The database could not do what was asked (locked, full disk, corrupt, unknown id)."""


class InvalidTextError(StorageError, ValueError):
    """A value handed to storage is not storable text (``bytes``, an unpaired surrogate …).

    Raised before anything is written, so nothing is lost; the message says which field.
    """
