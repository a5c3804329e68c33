"""Regenerate the committed gRPC/protobuf code: `python -m protos.codegen [OUT_ROOT]`.

Runs the protoc bundled with grpcio-tools over protos/pool/v1/*.proto with the
repository root as the include path, so generated modules import each other as
`protos.pool.v1.*`. With OUT_ROOT the code goes there instead of the tree; the
regeneration test uses that to compare byte for byte.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos" / "pool" / "v1"


def proto_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in PROTO_DIR.glob("*.proto"))


def generate(out_root: Path) -> None:
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *proto_files(),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> None:
    out_root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    generate(out_root)


if __name__ == "__main__":
    main()
