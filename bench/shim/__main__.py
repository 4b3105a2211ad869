"""``python -m bench.shim``: see the package's docstring and ``--help``."""

import sys

from bench.shim.run import main

if __name__ == "__main__":  # not when a spawned helper process imports this module as __mp_main__
    sys.exit(main())
