"""The Chat work area: conversation sidebar, chat view, composer, settings panel."""
