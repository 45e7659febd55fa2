"""Persistence, Qt-free: the SQLite store (``store.Store``, its writes in ``writes``, its
reads in ``queries``, the rows they hand out in ``rows``, its schema and migrations in
``schema``), a reply's steps as JSON (``serialize``), the stream journal written while a
reply streams (``stream.StreamJournal``), and exports out of and into the store
(``export``, ``export_csv``, ``export_store``, ``export_cli`` for ``python -m app export``).
It imports no Qt, no views and no shell (import-linter contracts in ``pyproject.toml``).
"""
