"""The window's controllers: each menu item's or dialog's GUI-thread end, taking the
window's parts (``app.shell.context.ShellContext``), not the window."""
