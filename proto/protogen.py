"""Generate the Python code for every `.proto` under `proto/` into a directory.

One function serves both `proto/regen.sh` (writes `proto/gen/`) and the staleness test
(`proto/gen/generated_test.py`, writes a temp dir and compares), so the two can never disagree on
flags. Tools: grpcio-tools' bundled protoc (pinned in the lockfile, so no binary download) plus
mypy-protobuf's plugins for typed `.pyi` stubs of both messages and gRPC services, which is what
lets mypy strict check the code that uses them.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    """All `.proto` sources below `root`, excluding the generated tree."""
    gen = root / "gen"
    return sorted(p for p in root.rglob("*.proto") if gen not in p.parents)


def _plugin(directory: Path, name: str, entry: str) -> Path:
    # protoc runs plugins as executables; these shims run mypy-protobuf in this interpreter, so the
    # plugin is the locked PyPI version and not whatever is on PATH.
    path = directory / f"protoc-gen-{name}"
    path.write_text(
        f"#!{sys.executable}\nfrom mypy_protobuf.main import {entry}\n{entry}()\n", encoding="utf-8"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def generate(out: Path, root: Path = PROTO_ROOT) -> None:
    """Write `*_pb2.py`, `*_pb2.pyi`, `*_pb2_grpc.py` and `*_pb2_grpc.pyi` for every proto."""
    out, root = out.resolve(), root.resolve()
    protos = proto_files(root)
    if not protos:
        raise SystemExit(f"no .proto files under {root}")
    out.mkdir(parents=True, exist_ok=True)
    wkt = str(files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        mypy = _plugin(Path(tmp), "mypy", "main")
        mypy_grpc = _plugin(Path(tmp), "mypy_grpc", "grpc")
        argv = [
            "protoc",
            f"-I{root}",
            f"-I{wkt}",
            f"--plugin=protoc-gen-mypy={mypy}",
            f"--plugin=protoc-gen-mypy_grpc={mypy_grpc}",
            f"--python_out={out}",
            f"--mypy_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_grpc_out={out}",
            *(str(p.relative_to(root)) for p in protos),
        ]
        cwd = os.getcwd()
        os.chdir(root)
        try:
            code = protoc.main(argv)
        finally:
            os.chdir(cwd)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    # Every generated directory must be a package so that imports resolve the same everywhere.
    for directory in {p.parent for p in out.rglob("*_pb2.py")}:
        d = directory
        while d != out:
            (d / "__init__.py").touch()
            d = d.parent


def tree(root: Path) -> dict[str, bytes]:
    """The generated files below `root`, by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "_pb2" in p.name and p.suffix in {".py", ".pyi"}
    }


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT / "gen"
    for old in target.rglob("*_pb2*.py*"):
        old.unlink()
    generate(target)
    print(f"generated {len(tree(target))} files into {target}")
