"""Running ``make`` from a test as a person would from a shell."""

from __future__ import annotations

import os

# Set by an outer make (``make test`` runs the suite): an inner make then prints
# "Entering/Leaving directory" lines around its output and joins the outer one's jobs.
OUTER_MAKE = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")


def outside_make(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) without what an outer make passes down."""
    base = os.environ if env is None else env
    return {key: value for key, value in base.items() if key not in OUTER_MAKE}
