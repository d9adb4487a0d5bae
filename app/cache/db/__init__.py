"""The cache's SQLite metadata (one row per saved state, rebuilt from the files when lost) and the change notifications the store sends out."""
