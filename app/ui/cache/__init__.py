"""The Cache work area: see ``app.ui.cache.dashboard.CacheDashboard``."""

from app.ui.cache.dashboard import CacheDashboard

__all__ = ["CacheDashboard"]
