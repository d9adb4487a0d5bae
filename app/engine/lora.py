"""A model's LoRA adapters: changed on the scheduler thread, read anywhere as a snapshot.

``LoraSet.entries`` is a tuple of frozen ``AdapterEntry`` records, replaced whole after each
change, so ``list_adapters`` and the effective fingerprint can be read from any thread
without a lock and never see half a change. A change reaches llama.cpp first
(``Backend.set_adapters``); only when it took is the new tuple published. If llama.cpp
refuses it, the previous set is applied again and the error is raised.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from dataclasses import dataclass
from typing import Any, TypedDict

from app.cache.keys import effective_fingerprint
from app.engine.backend import Backend
from app.engine.errors import NotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AdapterEntry:
    handle: int
    path: str
    sha256: bytes
    scale: float
    native: Any


class AdapterListing(TypedDict):
    """One attached adapter as ``Model.list_adapters`` reports it (plain data, any thread)."""

    handle: int
    path: str
    sha256: str  # hex
    scale: float


class LoraSet:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._ids = itertools.count(1)
        self.entries: tuple[AdapterEntry, ...] = ()

    # ------------------------------------------------------------------ any thread

    def listing(self) -> list[AdapterListing]:
        return [
            {"handle": e.handle, "path": e.path, "sha256": e.sha256.hex(), "scale": e.scale}
            for e in self.entries
        ]

    def fingerprint(self, base: bytes) -> bytes:
        """The effective fingerprint (docs/design.md §4) of ``base`` under the current adapters."""
        return effective_fingerprint(base, [(e.sha256, e.scale) for e in self.entries])

    # ------------------------------------------------------------------ scheduler thread

    def attach(self, path: str, sha256: bytes) -> int:
        """Load and attach an adapter at scale 1.0; returns its handle."""
        native = self._backend.load_adapter(path)
        entry = AdapterEntry(next(self._ids), path, sha256, 1.0, native)
        try:
            self._apply((*self.entries, entry))
        except BaseException:
            self._backend.free_adapter(native)
            raise
        return entry.handle

    def detach(self, handle: int) -> bool:
        """Idempotent; True when an adapter was detached."""
        entry = next((e for e in self.entries if e.handle == handle), None)
        if entry is None:
            return False
        self._apply(tuple(e for e in self.entries if e.handle != handle))
        self._backend.free_adapter(entry.native)
        return True

    def rescale(self, handle: int, scale: float) -> None:
        if not any(e.handle == handle for e in self.entries):
            raise NotFound(f"no adapter with handle {handle}")
        self._apply(tuple(dataclasses.replace(e, scale=scale) if e.handle == handle else e for e in self.entries))

    def free_all(self) -> None:
        """After the scheduler stopped: free every native adapter."""
        entries, self.entries = self.entries, ()
        for entry in entries:
            self._backend.free_adapter(entry.native)

    def _apply(self, new: tuple[AdapterEntry, ...]) -> None:
        try:
            self._backend.set_adapters([(e.native, e.scale) for e in new])
        except BaseException:
            try:
                self._backend.set_adapters([(e.native, e.scale) for e in self.entries])
            except Exception:
                log.critical("restoring the previous adapter set failed; reload the model", exc_info=True)
            raise
        self.entries = new
