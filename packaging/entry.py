"""Entry point of the frozen app (PyInstaller runs this file as __main__)."""

import sys

from app.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
