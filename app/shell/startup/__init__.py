"""Starting the app: the log file, the database opened with a way out, recovery of what a
crash left, and the packaged app's own start-up modes (``selftest``, ``startup_report``)."""
