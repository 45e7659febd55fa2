"""Logitscope as an OpenAI-compatible server (``python -m engine serve``): requests read and
checked (``request_fields``), the answers in OpenAI's shapes (``responses``), the engine's
thread (``engine_loop``) and the HTTP application (``http``)."""
