"""Remote models in the app: add an OpenAI-compatible endpoint, list and remove them, and
chat with them through the same chat view as local models (no local KV cache)."""
