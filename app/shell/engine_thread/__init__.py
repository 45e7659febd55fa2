"""What runs on the engine's thread: the worker that owns the engine (``worker``) and the
jobs it advances a piece at a time (the runners, ``score_steps``). Nothing here touches a
widget; the GUI thread hears from it through ``app.shell.engine_link``'s queued signals."""
