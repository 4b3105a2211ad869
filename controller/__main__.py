"""``python -m controller``: the controller daemon (see :mod:`controller.service`)."""

import sys

from controller.service import main

if __name__ == "__main__":
    sys.exit(main())
