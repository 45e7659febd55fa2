"""Where the tests find the repository and their fixtures, wherever a test module sits."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (its Makefile, README, docs, app and engine)."""
DATA = ROOT / "tests" / "data"
"""The tests' fixture files."""
