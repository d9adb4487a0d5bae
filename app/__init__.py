"""Hearth: a desktop app for local language models with a token-exact, persistent KV cache."""

__version__ = "0.1.0"
