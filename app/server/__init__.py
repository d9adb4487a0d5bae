"""The OpenAI-compatible HTTP server over Hearth's engine and KV cache (docs/user-guide.md). No Qt.

``create_app(engine, ServerConfig(...))`` builds the FastAPI app; ``ServerThread`` runs it
with uvicorn on its own thread and loop (``hearth serve`` and the app's "Local server"
switch both use it). Requests carry no session id: a conversation re-sent each turn is
recognised by its tokens (``alignment``) and reuses the KV the engine holds.
"""
