"""The UI's state without Qt: plain-Python lists that notify (``observable.py``) and what the
views show — the cache's rows (``row_state.py``), conversation titles and row previews, the
chat list (``conversation_catalog.py``), the model library (``library_catalog.py``), Hub
downloads (``downloads.py``) — and the words and numbers they are shown in (``format.py``,
``cache_fmt.py``). ``app.ui.qt_models`` adapts these lists for Qt views; nothing here imports
Qt or any other part of the UI (an import-linter contract in pyproject.toml says so)."""
