"""`poolctl keygen` and `poolctl ledger export|verify|witness`: offline work on a
ledger file (a SQLite store or an export), needing no running scheduler; and
`poolctl ledger head|fetch` and `witness --submit`, which ask a scheduler."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from protos.pool.v1 import ops_pb2, ops_pb2_grpc
from scheduler.ctl.output import EXIT_FAILED, EXIT_OK, CtlError, add_output_flag, emit, table
from scheduler.ctl.wire import add_scheduler_flag, as_ctl_error, call, channel, online_verb, to_doc
from scheduler.ledger import cose, export, keys, receipts, trust, witness
from scheduler.ledger.store import StoreError
from scheduler.ledger.stores import describe, is_dsn, open_store
from scheduler.ledger.verify import Report, verify
from scheduler.service import bodies as scheduler_bodies


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("keygen", help="write an Ed25519 key pair: PREFIX.key (0600), PREFIX.pub")
    p.add_argument("--out", required=True, metavar="PREFIX")
    add_output_flag(p)
    p.set_defaults(run=_keygen)

    ledger = verbs.add_parser("ledger", help="export, verify or witness a ledger")
    sub = ledger.add_subparsers(dest="ledger_verb", required=True)
    online_verb(sub, "head", "a running scheduler's ledger id, length and head", _head)
    p = online_verb(sub, "fetch", "export a running scheduler's ledger as a CBOR sequence", _fetch)
    p.add_argument("--out", required=True, metavar="FILE")

    p = sub.add_parser("export", help="write a store's receipts as a CBOR sequence")
    p.add_argument("store", help="a SQLite file, or a PostgreSQL connection string (postgresql://… or key=value …)")
    p.add_argument("--out", required=True, metavar="FILE")
    add_output_flag(p)
    p.set_defaults(run=_export)

    p = sub.add_parser("import", help="restore a store from an export, once the export verifies")
    p.add_argument("path", help="an export (CBOR sequence) or another store")
    p.add_argument("--store", required=True, help="the SQLite file to create (refused if it exists), or a "
                   "PostgreSQL connection string whose ledger is empty")
    p.add_argument("--key", metavar="PUBKEY", help="the steward's public key (default: the genesis's)")
    add_output_flag(p)
    p.set_defaults(run=_import)

    p = sub.add_parser("verify", help="verify a store or an export; exit 1 if invalid")
    p.add_argument("path", help="an export, a SQLite file, or a PostgreSQL connection string")
    p.add_argument("--key", metavar="PUBKEY", help="the steward's public key (default: the genesis's)")
    p.add_argument("--witness", action="append", default=[], metavar="FILE",
                   help="a witness statement to check against the ledger; repeatable")
    p.add_argument("--witness-key", action="append", default=[], metavar="KEY",
                   help="a trusted witness's public key (file or 64 hex digits); repeatable. With it, only "
                        "these keys' statements grade `witnessed`, and one that contradicts the ledger fails it")
    add_output_flag(p)
    p.set_defaults(run=_verify)

    p = sub.add_parser("witness", help="sign (ledger id, length, head) with a witness key")
    p.add_argument("path")
    p.add_argument("--key", required=True, metavar="WITNESS_KEY", help="the witness's private key")
    p.add_argument("--steward-key", metavar="PUBKEY", help="check the steward's signatures with this key")
    p.add_argument("--out", metavar="FILE", help="write the statement here (else print it as hex)")
    p.add_argument("--submit", action="store_true", help="record the statement in the scheduler's ledger")
    add_scheduler_flag(p, key_flag="--client-key")
    add_output_flag(p)
    p.set_defaults(run=_witness)


def _public_key(path: str | None) -> keys.PublicKey | None:
    try:
        return None if path is None else keys.load_public_key(path)
    except keys.KeyFileError as exc:
        raise CtlError("BAD_KEY", str(exc)) from None


def _signing_key(path: str) -> keys.SigningKey:
    try:
        return keys.load_signing_key(path)
    except keys.KeyFileError as exc:
        raise CtlError("BAD_KEY", str(exc)) from None


def _read_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CtlError("UNREADABLE", f"{path}: {exc.strerror}") from None


def _verified(path: str, key: keys.PublicKey | None, witness_files: Sequence[bytes] = (),
              trusted: frozenset[keys.PublicKey] = frozenset()) -> Report | trust.Judged:
    """The ledger at `path` verified; with `trusted` witness keys, judged by them too."""
    if not is_dsn(path) and not Path(path).is_file():
        raise CtlError("UNREADABLE", f"{path}: no such file")
    try:
        if trusted:
            return trust.judge(export.receipts_at(path), key, witness_files, trusted, bodies=scheduler_bodies.check)
        return verify(export.receipts_at(path), key, witness_files=witness_files, bodies=scheduler_bodies.check)
    except (OSError, StoreError) as exc:
        raise CtlError("UNREADABLE", str(exc)) from None


def _keygen(args: Any) -> int:
    key = keys.generate()
    try:
        private, public = keys.write_pair(key, args.out)
    except FileExistsError:
        raise CtlError("KEY_EXISTS", f"{args.out}.key exists; refusing to overwrite a key") from None
    except OSError as exc:
        raise CtlError("UNWRITABLE", f"{args.out}: {exc.strerror}") from None
    doc = {"private_key": str(private), "public_key": str(public), "key_id": key.public.key_id.hex()}
    emit(args, doc, lambda d: table(("field", "value"), list(d.items())))
    return EXIT_OK


def _export(args: Any) -> int:
    try:
        store = open_store(args.store)
    except StoreError as exc:
        raise CtlError("UNREADABLE", str(exc)) from None
    try:
        count, head = export.write(store.read(), args.out)
    except OSError as exc:
        raise CtlError("UNWRITABLE", f"{args.out}: {exc.strerror}") from None
    finally:
        store.close()
    doc = {"out": args.out, "length": count, "head": head.hex()}
    emit(args, doc, lambda d: table(("field", "value"), list(d.items())))
    return EXIT_OK


def _import(args: Any) -> int:
    """Verify everything first, then write the store in one transaction: a
    ledger that does not verify leaves nothing behind."""
    if not is_dsn(args.store) and Path(args.store).exists():
        raise CtlError("STORE_EXISTS", f"{args.store} exists; import only creates a new store")
    report = _verified(args.path, _public_key(args.key))
    if not report.valid:
        raise CtlError("LEDGER_INVALID", f"receipt {report.first_bad_index}: {report.reason}: {report.detail}",
                       EXIT_FAILED)
    raws = list(export.receipts_at(args.path))
    kinds = [receipts.read_core(cose.parse_whole(raw).payload)[0].kind for raw in raws]
    try:
        store = open_store(args.store, create=True)
    except StoreError as exc:
        raise CtlError("UNWRITABLE", str(exc)) from None
    try:
        if store.length():
            raise CtlError("STORE_EXISTS", f"{describe(args.store)} already holds a ledger; "
                                           "import only fills an empty store")
        store.append(0, list(zip(kinds, raws)))
    except StoreError as exc:
        raise CtlError("UNWRITABLE", str(exc)) from None
    finally:
        store.close()
    doc = {"store": describe(args.store), "length": report.length, "head": report.head.hex()}
    emit(args, doc, lambda d: table(("field", "value"), list(d.items())))
    return EXIT_OK


def _verify(args: Any) -> int:
    statements = [_read_file(path) for path in args.witness]
    try:
        trusted = frozenset(keys.public_key_from(k) for k in args.witness_key)
    except keys.KeyFileError as exc:
        raise CtlError("BAD_KEY", str(exc)) from None
    report = _verified(args.path, _public_key(args.key), statements, trusted)
    emit(args, report.document(), lambda d: _render_report(d, report.detail))
    return EXIT_OK if report.valid else EXIT_FAILED


def _render_report(doc: dict, detail: str) -> str:
    rows = [(k, "—" if v is None else v) for k, v in doc.items() if k != "witness"]
    if doc["witness"]:
        rows.append(("witness", " ".join(f"{k}={v}" for k, v in doc["witness"].items())))
    rows.append(("detail", detail))
    return table(("field", "value"), rows)


def _witness(args: Any) -> int:
    key = _signing_key(args.key)
    report = _verified(args.path, _public_key(args.steward_key))
    if not report.valid:
        raise CtlError("LEDGER_INVALID", f"receipt {report.first_bad_index}: {report.reason}: "
                       f"{report.detail}", EXIT_FAILED)
    try:
        statement = witness.sign_statement(key, report.steward, report.ledger_id, report.length,
                                           report.head)
    except witness.WitnessRejected as exc:
        raise CtlError("WITNESS_REJECTED", str(exc)) from None
    if args.out:
        try:
            Path(args.out).write_bytes(statement)
        except OSError as exc:
            raise CtlError("UNWRITABLE", f"{args.out}: {exc.strerror}") from None
    if args.submit:
        call(_ops(args).RecordWitness, ops_pb2.RecordWitnessRequest(witness_receipt=statement))
    doc = {"ledger_id": report.ledger_id.hex(), "length": report.length, "head": report.head.hex(),
           "witness_key_id": key.public.key_id.hex(), "out": args.out, "submitted": args.submit,
           "statement": None if args.out else statement.hex()}
    emit(args, doc, lambda d: table(("field", "value"), list(d.items())))
    return EXIT_OK


def _ops(args: Any) -> ops_pb2_grpc.OperationsStub:
    return ops_pb2_grpc.OperationsStub(channel(args))


def _head(args: Any) -> int:
    doc = to_doc(call(_ops(args).LedgerHead, ops_pb2.LedgerHeadRequest()))
    emit(args, doc, lambda d: table(("field", "value"), list(d.items())))
    return EXIT_OK


def _fetch(args: Any) -> int:
    try:
        chunks = b"".join(c.receipts for c in _ops(args).LedgerExport(ops_pb2.LedgerExportRequest()))
    except grpc.RpcError as error:
        raise as_ctl_error(error) from None
    try:
        count, head = export.write(export.split(chunks), args.out)
    except OSError as exc:
        raise CtlError("UNWRITABLE", f"{args.out}: {exc.strerror}") from None
    doc = {"out": args.out, "length": count, "head": head.hex()}
    emit(args, doc, lambda d: table(("field", "value"), list(d.items())))
    return EXIT_OK
