"""The committed generated code is exactly what the .proto files produce."""

from pathlib import Path

import pytest

from protos import codegen


def test_committed_code_matches_regeneration(tmp_path: Path):
    pytest.importorskip("grpc_tools")
    codegen.generate(tmp_path)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert generated, "protoc produced nothing"
    committed_dir = codegen.ROOT
    stale = [str(p) for p in generated if (committed_dir / p).read_bytes() != (tmp_path / p).read_bytes()]
    assert not stale, f"regenerate with `make proto`: {stale}"
    on_disk = {p.relative_to(committed_dir) for p in codegen.PROTO_DIR.glob("*_pb2*.py*")}
    assert on_disk == set(generated), "generated files on disk without a .proto, or missing"


def test_generated_modules_import_and_share_the_grade_enum():
    from protos.energy import Grade
    from protos.pool.v1 import types_pb2

    assert {g.name: g.value for g in Grade} == {
        "HwShunt": types_pb2.GRADE_HW_SHUNT,
        "ModelBased": types_pb2.GRADE_MODEL_BASED,
        "Estimator": types_pb2.GRADE_ESTIMATOR,
    }
