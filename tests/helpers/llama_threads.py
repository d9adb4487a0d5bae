"""How many threads llama.cpp gets in the tests: one per context.

NOTE: ``make test`` runs one pytest worker per core (pytest-xdist). ggml's spinning thread
barriers make an oversubscribed 2-thread decode ~50x slower than 1 thread (see
tests/integration/backend/conftest.py), so every context a test makes runs on one thread:
``tests/conftest.py`` caps ``LlamaBackend`` in-process, and subprocesses (``hearth serve``)
get ``--threads LLAMA_THREADS``. The configs keep the thread counts they were given (a test
may check that a setting reaches ``ModelConfig``); only the native context is capped.
"""

from __future__ import annotations

LLAMA_THREADS = 1
