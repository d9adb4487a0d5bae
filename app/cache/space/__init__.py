"""Room on each tier: quotas, LRU demotion and eviction, moves between tiers, removals, and the user's actions on rows (pin, evict, delete, move, clear)."""
