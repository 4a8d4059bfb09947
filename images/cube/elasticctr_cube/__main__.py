"""python -m elasticctr_cube builder|server|agent|transfer [options]"""

from __future__ import annotations

import sys

ROLES = ("builder", "server", "agent", "transfer")


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ROLES:
        print(f"usage: python -m elasticctr_cube {{{'|'.join(ROLES)}}} [options]", file=sys.stderr)
        return 2
    role, args = sys.argv[1], sys.argv[2:]
    if role == "builder":
        from .builder import main as run
    elif role == "server":
        from .server import main as run
    elif role == "agent":
        from .agent import main as run
    else:
        from .transfer import main as run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
