"""Where a version's CPU per turn goes: a profile of N one-call turns of one server process.

    .venv/bin/python bench/_profile_turns.py [REF] [--turns 300] [--top 60] [--callgrind]
        [--patch MODULE:ATTR=EXPR ...] [--save PROFILE]

REF: a commit (installed by bench/_baseline.py into its own venv) or nothing for this tree.
Not a benchmark (its name starts with `_`); its figures are in docs/benchmarks-server.md,
"Where the CPU per turn goes".

- default: cProfile of the event loop's thread (the main thread, where granian's callbacks,
  the runtime, the loop, the adapters and the store's point reads run; the store's writer
  thread is not in it). The profiler starts after 20 warm-up turns (SIGUSR1) and stops after
  the measured turns (SIGUSR2); printed per turn: calls (exact) and inclusive time (inflated
  by the profiler, so read the times as shares).
- `--callgrind`: instructions per turn instead (bench/_callgrind.py), every thread; with
  `--patch` an ablation: each `MODULE:ATTR=EXPR` replaces that attribute before the server
  starts (EXPR evaluated with the module's namespace), so the difference to a run without
  is what the replaced code costs per turn.
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config  # noqa: E402

import _baseline  # noqa: E402
import _callgrind  # noqa: E402
import server_overhead as so  # noqa: E402

# Run inside the server's interpreter: apply the patches, install the profiler's signals, then
# the CLI. argv: [patches joined by \n, profile path or "", CLI args...].
WRAPPER = r"""
import importlib, signal, sys
patches, profile_path = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
for patch in filter(None, patches.split("\n")):
    target, expr = patch.split("=", 1)
    module_name, attr = target.split(":")
    module = importlib.import_module(module_name)
    owner = module
    *path, last = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, last, eval(expr, vars(module)))
if profile_path:
    import cProfile
    profiler = cProfile.Profile()
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    def stop(*_):
        profiler.disable()
        profiler.dump_stats(profile_path)
    signal.signal(signal.SIGUSR2, stop)
from cursor_byok.cli import main
sys.exit(main(sys.argv[1:]))
"""


def python_of(ref: str | None) -> Path:
    if ref is None:
        venv = REPO / ".venv" / "bin" / "python"
        return venv if venv.exists() else Path(sys.executable)
    return _baseline.prepare(ref).python


def cmd(python: Path, config: Path, patches: list[str], profile: str) -> list[str]:
    wrapper = [str(python), "-c", WRAPPER, "\n".join(patches), profile]
    return [*wrapper, "serve", "--config", str(config)]


def profile(
    python: Path, patches: list[str], turns: int, top: int, save: Path | None = None
) -> None:
    with (
        so.upstream_process() as (upstream_url, _),
        tempfile.TemporaryDirectory(dir="/dev/shm") as tmp,
    ):
        work = Path(tmp)
        config = work / "cursor-byok.toml"
        config.write_text(brain_config(upstream_url, db=work / "db"))
        out = work / "profile.pstats"
        with so.launched_process(cmd(python, config, patches, str(out)), work, "server") as (
            port,
            pid,
        ):
            so.node_turns(port, None, 15)  # 20 warm-up turns
            os.kill(pid, signal.SIGUSR1)
            time.sleep(0.2)
            cpu0 = so.cpu_seconds(pid)
            _callgrind.node_plan_turns(port, [f"hello number {i}" for i in range(turns)])
            cpu = so.cpu_seconds(pid) - cpu0
            os.kill(pid, signal.SIGUSR2)
            for _ in range(100):
                if out.exists():
                    break
                time.sleep(0.1)
            time.sleep(0.5)
        stats = pstats.Stats(str(out))
        if save is not None:  # for pstats' callees and callers views
            shutil.copyfile(out, save)
    print(f"process CPU per turn while profiled: {cpu / turns * 1000:.2f} ms")
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, tt, _, _) in raw.values())
    print(f"profiled time per turn (own time, all functions): {total / turns * 1000:.2f} ms")
    rows = sorted(raw.items(), key=lambda kv: kv[1][3], reverse=True)
    print("| function | calls/turn | inclusive ms/turn | own ms/turn |")
    print("|---|---:|---:|---:|")
    for (file, line, name), (_, nc, tt, ct, _) in rows[:top]:
        where = file.split("site-packages/")[-1].split("/src/")[-1]
        print(f"| {where}:{line} {name} | {nc / turns:.2f} | {ct / turns * 1000:.3f} "
              f"| {tt / turns * 1000:.3f} |")  # fmt: skip


def count(python: Path, patches: list[str], turns: int) -> None:
    with (
        so.upstream_process() as (upstream_url, _),
        tempfile.TemporaryDirectory(dir="/dev/shm") as tmp,
    ):
        config = Path(tmp) / "cursor-byok.toml"
        config.write_text(brain_config(upstream_url, db=Path(tmp) / "db"))
        c = _callgrind.count_turns(cmd(python, config, patches, ""), turns=turns)
    label = "; ".join(patches) or "as built"
    print(
        f"{c.per_turn / 1e6:.3f} M instructions per turn ({label}); counted "
        f"{c.raw / c.turns / 1e6:.3f} M, less idle work {c.idle_per_s / 1e6:.3f} M/s "
        f"over {c.seconds:.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", nargs="?", default=None)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--top", type=int, default=60)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--patch", action="append", default=[])
    parser.add_argument("--save", type=Path, help="keep the raw profile (pstats) here")
    args = parser.parse_args(argv)
    python = python_of(args.ref)
    if args.callgrind:
        count(python, args.patch, args.turns)
    else:
        profile(python, args.patch, args.turns, args.top, args.save)
    subprocess.run(["true"], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
