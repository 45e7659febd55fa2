"""The Qt views (napari's ``_qt/``): the chat, the inspector, the timeline, the sampling
panel and its chain editor, the status bar's widgets and the dialogs. They subscribe to the
model layer's events and redraw on one clock; they never import the shell (``app.shell``),
which builds and wires them (import-linter contracts in ``pyproject.toml``).
"""
