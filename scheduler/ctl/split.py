"""`poolctl split`: the operators' calculator for one device split (RULES §2)."""

from __future__ import annotations

import argparse
from typing import Any

from protos.energy import UNALLOCATED, Grade, SplitError, format_uj, split
from protos.pool.v1 import types_pb2
from scheduler.ctl.output import CtlError, add_output_flag, emit, table
from scheduler.ctl.wire import grade_label


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("split", help="split a device's energy between occupants (RULES §2.5), offline",
                         description="The calculator behind every split row: a device's window total divided "
                         "between its occupants by largest remainder, in integer µJ, nothing lost. It needs no "
                         "scheduler.")
    p.add_argument("--total-uj", required=True, help="the device's window total in µJ")
    p.add_argument("--grade", required=True, help="the total's grade: HwShunt, ModelBased or Estimator")
    p.add_argument("--share", action="append", default=[], metavar="OCCUPANT=WEIGHT",
                   help="an occupant and its weight: the milli-devices (mdev, 1000 = one GPU) it holds on the "
                        "device; shares are proportional to the weights. Repeat for each occupant; give the "
                        "unoccupied remainder as an occupant of your own (the name 'unallocated' is Pool's)")
    add_output_flag(p)
    p.set_defaults(run=run)


def _natural(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise CtlError("INVALID_ARGUMENT", f"{what} must be a non-negative integer, got {text!r}")
    return int(text)


def _weights(pairs: list[str]) -> dict[str, int]:
    if not pairs:
        raise CtlError("INVALID_ARGUMENT", "no shares: give at least one --share OCCUPANT=WEIGHT")
    weights: dict[str, int] = {}
    for pair in pairs:
        occupant, sep, weight = pair.partition("=")
        if not sep or not occupant:
            raise CtlError("INVALID_ARGUMENT", f"share {pair!r} is not OCCUPANT=WEIGHT")
        if occupant == UNALLOCATED:
            raise CtlError("INVALID_ARGUMENT", f"{UNALLOCATED!r} is the remainder Pool names itself; "
                           "call the unoccupied part something else")
        if occupant in weights:
            raise CtlError("INVALID_ARGUMENT", f"duplicate occupant {occupant!r}")
        weights[occupant] = _natural(weight, f"weight of {occupant!r}")
    return weights


def run(args: Any) -> int:
    total = _natural(args.total_uj, "--total-uj")
    try:
        grade = Grade.parse(args.grade)
        shares = split(total, _weights(args.share), grade)
    except (SplitError, ValueError) as exc:
        raise CtlError("INVALID_ARGUMENT", str(exc)) from None
    document = {
        "total_uj": total,
        "shares": [{"occupant": s.occupant, "uj": s.uj, "grade": types_pb2.Grade.Name(int(s.grade))} for s in shares],
    }
    emit(args, document, _render)
    return 0


def _render(doc: dict) -> str:
    rows = [(s["occupant"], s["uj"], format_uj(s["uj"]), grade_label(s["grade"])) for s in doc["shares"]]
    rows.append(("total", doc["total_uj"], format_uj(doc["total_uj"]), ""))
    return table(("occupant", "µJ", "energy", "grade"), rows)
