"""Grammars: llama.cpp's GBNF parser, ported (``gbnf``), and the check every grammar passes
before llama.cpp sees it (``check``), with what a vocabulary can spell (``spellable``)."""
