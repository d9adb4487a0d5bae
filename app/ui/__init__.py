"""The PySide6 desktop app. Only this package imports Qt."""
