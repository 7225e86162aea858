"""``python -m deltalog``: the ``deltalog`` command (see :mod:`deltalog.engine.cli`)."""

import sys

from deltalog.engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
