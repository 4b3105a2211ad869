"""``python -m bench.switch``: see the package's docstring and ``--help``."""

import sys

from bench.switch.run import main

if __name__ == "__main__":  # not when a spawned sender process imports this module as __mp_main__
    sys.exit(main())
