"""Regenerate the protobuf modules in src/cursor_byok/transport/cursor/proto/.

Run `python scripts/gen_proto.py` after editing a .proto file and commit the output. Only PyPI
tools run here (grpcio-tools' protoc), so generation needs no network.
The .proto files sit at their package path under src/ and protoc runs with `-I src`, which makes
the generated imports read `from cursor_byok.transport.cursor.proto import agent_pb2`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PROTO_PKG = Path("cursor_byok/transport/cursor/proto")
PROTO_FILES = ("agent.proto", "aiserver.proto")
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi")


def _well_known_include() -> str:
    """grpc_tools ships google/protobuf/*.proto; protoc needs them for struct.proto."""
    import grpc_tools

    return str(Path(grpc_tools.__file__).parent / "_proto")


def generate(out_root: Path) -> list[Path]:
    """Write the generated modules under out_root (the proto package); return their paths."""
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{SRC}",
        f"-I{_well_known_include()}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        *(str(PROTO_PKG / name) for name in PROTO_FILES),
    ]
    subprocess.run(args, check=True, cwd=REPO)
    out_dir = out_root / PROTO_PKG
    return sorted(p for p in out_dir.iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SRC, help="output root (default: src/)")
    for path in generate(parser.parse_args().out):
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


if __name__ == "__main__":
    main()
