"""``python -m audit.cli ...`` is the ``audit`` command."""

import sys

from audit.cli import main

if __name__ == "__main__":
    sys.exit(main())
