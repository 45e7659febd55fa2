"""Logitscope as an OpenAI-compatible server (``python -m engine serve``, and the app's Server
menu): requests read and checked (``request_fields``), the answers in OpenAI's shapes
(``responses``), what the server needs of an engine (``seam``), the engine's thread of the
command line (``engine_loop``), the HTTP application (``http``), where it listens
(``address``) and the server on a thread of its own (``server_thread``)."""
