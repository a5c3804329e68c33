"""`poolctl split` as a real subprocess, as an operator runs it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

POOLCTL = Path(sys.executable).with_name("poolctl")


def poolctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(POOLCTL), *args], capture_output=True, text=True, timeout=60)


def test_json_output_matches_the_contract():
    out = poolctl("split", "--total-uj", "1000", "--grade", "HwShunt",
                  "--share", "a=1", "--share", "b=1", "--share", "c=1", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"total_uj": 1000, "shares": [
        {"occupant": "a", "uj": 334, "grade": "GRADE_MODEL_BASED"},
        {"occupant": "b", "uj": 333, "grade": "GRADE_MODEL_BASED"},
        {"occupant": "c", "uj": 333, "grade": "GRADE_MODEL_BASED"},
    ]}


def test_table_output_is_readable():
    out = poolctl("split", "--total-uj", "2000000", "--grade", "HwShunt", "--share", "only=1000")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["occupant", "µJ", "energy", "grade"]
    assert lines[2].split() == ["only", "2000000", "2.000", "J", "HwShunt"]


@pytest.mark.parametrize("args, needle", [
    (["--total-uj", "10", "--grade", "HwShunt"], "no shares"),
    (["--total-uj", "10", "--grade", "HwShunt", "--share", "a=0"], "sum to 0"),
    (["--total-uj", "-10", "--grade", "HwShunt", "--share", "a=1"], "--total-uj"),
    (["--total-uj", "1.5", "--grade", "HwShunt", "--share", "a=1"], "--total-uj"),
    (["--total-uj", "10", "--grade", "HwShunt", "--share", "a=-1"], "weight of 'a'"),
    (["--total-uj", "10", "--grade", "Bogus", "--share", "a=1"], "unknown grade"),
    (["--total-uj", "10", "--grade", "HwShunt", "--share", "a=1", "--share", "a=2"], "duplicate occupant"),
    (["--total-uj", "10", "--grade", "HwShunt", "--share", "a"], "OCCUPANT=WEIGHT"),
])
def test_bad_input_exits_nonzero_with_one_line(args, needle):
    out = poolctl("split", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
