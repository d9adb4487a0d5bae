"""Conversation logic without Qt: the model's view of a long conversation (overflow
policies), one hit accounting, and the plain words a reply's numbers are shown in."""
