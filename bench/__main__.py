"""``python -m deltalog.bench``: run the benchmark (see :mod:`deltalog.bench.cli`)."""

import sys

from deltalog.bench.cli import main

# The guard matters: worker processes are spawned, and spawn re-imports this
# module as ``__mp_main__``; without it every worker would start a benchmark.
if __name__ == "__main__":
    sys.exit(main())
