"""Developer tools that are not part of the shipped app: the screenshot commands of the docs
(``python -m tools.screenshot``, ``tools.score_shot``, ``tools.remote_shot``,
``tools.precision_shot``). The app never imports this package (an import-linter contract)
and packaging leaves it out (only ``app`` and ``engine`` are collected)."""
