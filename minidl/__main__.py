"""``python -m minidl ...`` runs the ``minidl`` command line."""

import sys

from minidl.cli import main

if __name__ == "__main__":
    sys.exit(main())
