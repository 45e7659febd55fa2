"""Logitscope's desktop app (PySide6 + pyqtgraph). Never imports MLX: the engine runs
in a worker thread and talks to the GUI through queued signals (docs/ARCHITECTURE.md, Layers)."""
