"""Write softswitch's P4Info (text format): ``python -m softswitch.p4info OUT``."""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf import text_format

from softswitch.dataplane import PROGRAM


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m softswitch.p4info OUT.p4info.txt", file=sys.stderr)
        return 2
    Path(args[0]).write_text(text_format.MessageToString(PROGRAM.p4info()))
    print(f"wrote softswitch P4Info to {args[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
