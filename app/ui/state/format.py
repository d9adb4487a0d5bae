"""Short human-readable strings for rates, durations, counts and dates (no Qt); sizes come
from :func:`app.units.human_bytes`."""

from __future__ import annotations

from datetime import UTC, datetime

from app.units import human_bytes

__all__ = ["human_bytes", "human_count", "human_date", "human_duration", "human_rate", "short_hex"]


def human_rate(bytes_per_s: float) -> str:
    return f"{human_bytes(bytes_per_s)}/s" if bytes_per_s > 0 else "–"


def human_duration(seconds: float | None) -> str:
    """``75`` → ``"1 min 15 s"``; ``None`` → ``"–"``."""
    if seconds is None or seconds < 0:
        return "–"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def human_count(n: int | None) -> str:
    """``1234567`` → ``"1.2M"``."""
    if n is None:
        return "–"
    for unit, scale in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value >= 100 else f"{value:.1f}{unit}"
    return str(n)


def human_date(when: datetime | None) -> str:
    """A date relative to now for recent ones (``"3 days ago"``), else ``"2025-03-01"``."""
    if when is None:
        return "–"
    now = datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    days = (now - when).days
    if days < 1:
        return "today"
    if days < 2:
        return "yesterday"
    if days < 30:
        return f"{days} days ago"
    return when.strftime("%Y-%m-%d")


def short_hex(fingerprint: bytes | str, n: int = 12) -> str:
    """The first ``n`` hex digits of a fingerprint (bytes or hex)."""
    text = fingerprint.hex() if isinstance(fingerprint, bytes) else fingerprint
    return text[:n]
