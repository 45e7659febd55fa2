"""The window shell: ``window.MainWindow`` builds the views and wires them to the model
layer and to the engine's worker thread (``worker``, ``engine_link``); the menus, the dock
layout, model loading, recovery at start, the settings kept between sessions, and the
shipped app's own start-up modes (``selftest`` for the packaged app's check,
``startup_report``)."""
