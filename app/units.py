"""Human-readable quantities shared by every layer (CLI, model library, UI). No Qt.

The one home of ``human_bytes``: the cache CLI, the Hub client's free-space errors, the
Models view and the Cache dashboard all print sizes the same way.
"""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float | None) -> str:
    """``5408928`` → ``"5.2 MiB"`` (binary units, one decimal above bytes); ``None`` → ``"–"``."""
    if n is None:
        return "–"
    size = float(n)
    for unit in _UNITS[:-1]:
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} {_UNITS[-1]}"
