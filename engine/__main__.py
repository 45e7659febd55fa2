"""``python -m engine`` / ``logitscope-engine``."""

import sys

from engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
