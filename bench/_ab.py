"""Interleaved A/B of the per-turn overhead of two versions of the server.

    .venv/bin/python bench/_ab.py BASE [OTHER] [--rounds 8] [--turns 100] [--db DIR]

BASE and OTHER are git commits (checked out into temporary worktrees) or paths to a `src`
directory; OTHER defaults to this working tree's `src`. Both servers run at once against one
scripted upstream; the Node client (bench/node_client.mjs) alternates between them, `--rounds`
times `--turns` turns, swapping the order every round, so the drift of a shared machine hits
both alike. Prints, per version, the median over the rounds of each round's median overhead
(ms over the upstream consumed directly) and every round's value.

Why it exists: on the 2-core VM these figures were taken on, absolute times drift by 30-50 %
from hour to hour, so two benchmark runs made one after the other cannot show a 0.2 ms change.
It is not run by `bench/run` (its name starts with `_`): it needs two versions to compare.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config  # noqa: E402

import server_overhead as so  # noqa: E402

LAUNCH = "import sys; sys.path.insert(0, sys.argv.pop(1)); from cursor_byok.cli import main; sys.exit(main(sys.argv[1:]))"  # noqa: E501
METRICS = (("first text delta", "ttft"), ("turn ended", "ended"), ("whole turn", "total"))


@contextlib.contextmanager
def source(ref: str) -> Iterator[Path]:
    """The `src` directory of a commit or a path."""
    path = Path(ref)
    if path.is_dir():
        yield path.resolve()
        return
    tree = Path(tempfile.mkdtemp(prefix="ab-"))
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tree), ref], check=True
    )
    try:
        yield tree / "src"
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)])


@contextlib.contextmanager
def server(src: Path, upstream_url: str, db_dir: Path) -> Iterator[int]:
    work = Path(tempfile.mkdtemp(dir=db_dir))
    config = work / "cursor-byok.toml"
    config.write_text(brain_config(upstream_url, db=work / "db"))
    cmd = [sys.executable, "-c", LAUNCH, str(src), "serve", "--config", str(config)]
    with so.launched(cmd, work, f"the server from {src}") as port:
        yield port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base")
    parser.add_argument("other", nargs="?", default=str(REPO / "src"))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--db", type=Path, default=Path("/dev/shm"), help="where the databases go")
    args = parser.parse_args(argv)
    if not so.node_available():
        print("bench/_ab.py needs node (bench/node_client.mjs)", file=sys.stderr)
        return 2
    with (
        so.upstream_process() as (upstream_url, _),
        source(args.base) as base_src,
        source(args.other) as other_src,
        server(base_src, upstream_url, args.db) as base_port,
        server(other_src, upstream_url, args.db) as other_port,
    ):
        names = {args.base: base_port, args.other: other_port}
        keys = tuple(key for _, key in METRICS)
        rounds = so.interleaved_overheads(names, upstream_url, args.rounds, args.turns, keys)
    print(f"## A/B: {args.base} vs {args.other}")
    print()
    print(
        f"{args.rounds} rounds of {args.turns} turns, Node client, DB in {args.db}; ms over direct."
    )
    print()
    print("| overhead | version | median of rounds | rounds |")
    print("|---|---|---:|---|")
    for label, key in METRICS:
        for name in names:
            values = rounds[name][key]
            each = " ".join(f"{v:+.2f}" for v in values)
            print(f"| {label} | {name} | {statistics.median(values):+.2f} | {each} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
