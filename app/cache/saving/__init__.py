"""From a save to a published row, and back: the background writer and its write holds, the writer's jobs, and whole (v1) and chunked (v2) rows written and read."""
