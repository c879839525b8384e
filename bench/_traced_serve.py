"""`cursor-byok serve` with tracemalloc on, for bench/soak.py's `--trace`: SIGUSR1 writes a
snapshot to $SOAK_SNAPSHOT_DIR/<n>.snap. `--cache-mib N` makes the runtime's caches N MiB, so
they reach their caps in seconds and whatever grows after that shows sooner.

    python bench/_traced_serve.py [--cache-mib N] serve --config FILE --port PORT
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--cache-mib"]:
        cap = int(args[1]) << 20
        args = args[2:]
        from cursor_byok.transport.runtime import client_blobs, committed_states, request_bases

        for cls in (
            committed_states.CommittedStates,
            request_bases.RequestBases,
            client_blobs.ClientBlobs,
        ):
            cls.__init__.__defaults__ = (cap,)
    if os.environ.get("SOAK_TRACE", "1") == "0":  # only the small caches
        from cursor_byok.cli import main as plain_main

        return plain_main(args)
    tracemalloc.start(12)
    folder = Path(os.environ["SOAK_SNAPSHOT_DIR"])
    numbers = itertools.count()

    def dump(*_: object) -> None:
        tracemalloc.take_snapshot().dump(str(folder / f"{next(numbers)}.snap"))

    signal.signal(signal.SIGUSR1, dump)
    from cursor_byok.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
