"""The PySide6 desktop app. Only this package imports Qt."""

from app.ui.pyside_compat import immortalize_singletons

immortalize_singletons()
