"""Bringing files and database into agreement: opening a cache directory (set aside strays, clean interrupted writes, reconcile) and ``CacheStore.verify``."""
