"""`poolctl keygen` and `poolctl ledger export|verify|witness`: offline work on a
ledger file (a SQLite store or an export), needing no running scheduler; and
`poolctl ledger head|fetch` and `witness --submit`, which ask a scheduler."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from protos.pool.v1 import ops_pb2, ops_pb2_grpc, proofs_pb2, proofs_pb2_grpc
from scheduler.ctl.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CtlError, add_output_flag, emit, table
from scheduler.ctl.wire import add_scheduler_flag, as_ctl_error, call, channel, client, online_verb, to_doc
from scheduler.ledger import cose, export, keys, merkle, note, proof, receipts, trust, witness
from scheduler.ledger.index import first_wrong_node
from scheduler.ledger.sqlite import MAGIC
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
                   help="a witness statement, or a cosigned C2SP checkpoint note, to check against the ledger; "
                        "repeatable")
    p.add_argument("--witness-key", action="append", default=[], metavar="KEY",
                   help="a trusted witness's public key (file or 64 hex digits) or C2SP vkey; repeatable. With "
                        "it, only these keys' statements and cosignatures grade `witnessed`, and one that "
                        "contradicts the ledger fails it")
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

    p = online_verb(sub, "prove", "a claim's receipts (or a subtree's, with --tenant) with inclusion proofs "
                    "against the latest cosigned checkpoint, written as a proof file for check-proof", _prove)
    p.add_argument("claim", nargs="?")
    p.add_argument("--tenant", help="instead of a claim: every claim the scheduler holds in this subtree")
    p.add_argument("--since-ns", type=int, default=0, metavar="NS", help="with --tenant: receipts from this time")
    p.add_argument("--until-ns", type=int, default=0, metavar="NS", help="with --tenant: receipts before this time")
    p.add_argument("--out", required=True, metavar="FILE")
    p.add_argument("--since-size", type=int, default=0, metavar="N",
                   help="also prove the checkpoint consistent with your earlier one of N receipts")

    p = sub.add_parser("check-proof", help="check a proof file offline (no server, no ledger); exit 1 if it fails")
    p.add_argument("path")
    p.add_argument("--key", required=True, metavar="PUBKEY", help="the steward's public key")
    p.add_argument("--witness-key", action="append", default=[], metavar="VKEY",
                   help="a trusted witness's vkey (name+keyid+base64(0x04 ‖ key)), or a file holding one; "
                        "repeatable: each must have cosigned the checkpoint")
    p.add_argument("--since", metavar="NOTE", help="an earlier checkpoint note you trust: the proof's must extend it")
    add_output_flag(p)
    p.set_defaults(run=_check_proof)

    p = sub.add_parser("cosign", help="play a C2SP witness: check the scheduler's checkpoint is consistent "
                       "with the last one this witness cosigned, cosign it, and record it")
    p.add_argument("--key", required=True, metavar="WITNESS_KEY", help="the witness's private key")
    p.add_argument("--name", required=True, help="the witness's key name (its vkey's name)")
    p.add_argument("--steward-key", required=True, metavar="PUBKEY", help="the steward's public key")
    p.add_argument("--state", required=True, metavar="FILE",
                   help="this witness's last cosigned checkpoint for the log (created on first use)")
    p.add_argument("--out", metavar="FILE", help="write the cosigned note here too")
    p.add_argument("--submit", action="store_true", help="record the cosigned checkpoint in the scheduler's ledger")
    add_scheduler_flag(p, key_flag="--client-key")
    add_output_flag(p)
    p.set_defaults(run=_cosign)


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
    leaves: list[bytes] = []
    hashes: list[bytes] = []

    def leafed(raws: Iterable[bytes]) -> Iterator[bytes]:
        for raw in raws:
            leaves.append(merkle.leaf_hash(raw))
            hashes.append(receipts.digest(raw))
            yield raw
    try:
        checks = {"bodies": scheduler_bodies.check, "follows": scheduler_bodies.Tiling()}
        if trusted:
            judged = trust.judge(leafed(export.receipts_at(path)), key, witness_files, trusted, **checks)
            return judged._replace(report=_stored_tree(path, judged.report, leaves, hashes))
        report = verify(leafed(export.receipts_at(path)), key, witness_files=witness_files, **checks)
        return _stored_tree(path, report, leaves, hashes)
    except (OSError, StoreError) as exc:
        raise CtlError("UNREADABLE", str(exc)) from None


def _starts_with(path: str, magic: bytes) -> bool:
    with open(path, "rb") as file:
        return file.read(len(magic)) == magic


def _stored_tree(path: str, report: Report, leaves: list[bytes], hashes: list[bytes]) -> Report:
    """A store's stored Merkle nodes checked against the tree rebuilt from its
    receipts (reason `tree` at the first receipt of the first wrong subtree)."""
    if not report.valid or not (is_dsn(path) or _starts_with(path, MAGIC)):
        return report
    store = open_store(path)
    try:
        at = first_wrong_node(store.tree_rows(), leaves[:report.length])
    finally:
        store.close()
    if at is None:
        return report
    return dataclasses.replace(
        report, valid=False, length=at, first_bad_index=at, reason="tree",
        head=hashes[at - 1] if at else bytes(32),
        root=merkle.root_of(leaves[:at]),
        detail=f"the store's Merkle nodes from receipt {at} are not the tree of its receipts")


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
        trusted = frozenset(k for text in args.witness_key for k in note.witness_keys(text))
    except (keys.KeyFileError, note.NoteError) as exc:
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


def _proofs(args: Any) -> proofs_pb2_grpc.ProofsStub:
    """The Proofs service on the first scheduler address, with the caller's
    settings (pool_client offers claims.proto and ops.proto only; a proof is
    asked again by hand after a failover)."""
    settings = client(args).settings
    address = settings.addresses[0]
    if settings.credentials is None:
        return proofs_pb2_grpc.ProofsStub(grpc.insecure_channel(address, settings.options))
    return proofs_pb2_grpc.ProofsStub(grpc.secure_channel(address, settings.credentials, settings.options))


def _write(path: str, data: bytes) -> None:
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise CtlError("UNWRITABLE", f"{path}: {exc.strerror}") from None


def _claim_document(answer: proofs_pb2.ClaimProof) -> dict:
    return proof.document(answer.claim_id, answer.checkpoint,
                          [(r.seq, r.receipt, list(r.path)) for r in answer.receipts], list(answer.pending),
                          answer.since_size, list(answer.consistency))


def _prove(args: Any) -> int:
    if (args.claim is None) == (args.tenant is None):
        raise CtlError("USAGE", "name a claim, or a subtree with --tenant", EXIT_USAGE)
    if args.claim is not None:
        answers = [call(_proofs(args).ProveClaim, proofs_pb2.ProveClaimRequest(claim_id=args.claim,
                                                                              since_size=args.since_size))]
        doc = _claim_document(answers[0])
    else:
        subtree = call(_proofs(args).ProveSubtree, proofs_pb2.ProveSubtreeRequest(
            tenant=args.tenant, since_ns=args.since_ns, until_ns=args.until_ns, since_size=args.since_size))
        answers = list(subtree.claims)
        doc = {"format": proof.SET_FORMAT, "tenant": subtree.tenant, "since_ns": args.since_ns,
               "until_ns": args.until_ns, "proofs": [_claim_document(a) for a in answers]}
    _write(args.out, json.dumps(doc, indent=1).encode() + b"\n")
    summary = {"out": args.out, "claims": [a.claim_id for a in answers],
               "proven": sum(len(a.receipts) for a in answers), "pending": sum(len(a.pending) for a in answers),
               "cosigned": all(a.checkpoint for a in answers)}
    emit(args, summary, lambda d: table(("field", "value"), list(d.items())))
    if answers and not all(a.checkpoint for a in answers):
        raise CtlError("NOT_COSIGNED", "no cosigned checkpoint is recorded yet: nothing can be proven", EXIT_FAILED)
    return EXIT_OK


def _vkey(text: str) -> note.VKey:
    if not text.count("+") >= 2 or Path(text).is_file():
        text = _read_file(text).decode(errors="replace").strip()
    try:
        vkey = note.read_vkey(text)
    except note.NoteError as exc:
        raise CtlError("BAD_KEY", f"witness key: {exc}") from None
    if vkey.kind != note.COSIGNATURE_V1:
        raise CtlError("BAD_KEY", "a witness's vkey has type 0x04 (cosignature/v1)")
    return vkey


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _check_proof(args: Any) -> int:
    steward = _public_key(args.key)
    witnesses = [_vkey(w) for w in args.witness_key]
    since = None
    if args.since:
        try:
            since = note.read_checkpoint(note.read_note(_read_file(args.since)).body)
        except note.NoteError as exc:
            raise CtlError("UNREADABLE", f"{args.since}: {exc}") from None
    try:
        every = [proof.check(one, steward, witnesses, since) for one in proof.proofs_in(proof.read(
            _read_file(args.path)))]
    except proof.ProofInvalid as exc:
        raise CtlError("PROOF_INVALID", f"{exc.reason}: {exc}", EXIT_FAILED) from None
    checked = every[0] if len(every) == 1 else None
    facts = [f for c in every for f in c.facts]
    doc = {"valid": True, "claim_id": checked.claim_id if checked else None,
           "claims": [c.claim_id for c in every],
           "origin": every[0].origin if every else None, "size": every[0].size if every else None,
           "root": every[0].root.hex() if every else None, "cosigned_by": [w.name for w in witnesses],
           "receipts": [{"seq": f.seq, "kind": f.kind, "time_ns": f.time_ns, "actor": f.actor,
                         "body": _plain(f.body)} for f in facts],
           "pending": [p for c in every for p in c.pending]}
    if not witnesses:
        doc["note"] = "no --witness-key: the checkpoint is only the steward's word, not a witness's"
    emit(args, doc, lambda d: table(("seq", "kind", "actor"), [(f["seq"], f["kind"], f["actor"] or "")
                                                               for f in d["receipts"]]))
    return EXIT_OK


def _cosign(args: Any) -> int:
    key, steward = _signing_key(args.key), _public_key(args.steward_key)
    state_path = Path(args.state)
    last = None
    if state_path.exists():
        try:
            last = note.read_checkpoint(note.read_note(_read_file(args.state)).body)
        except note.NoteError as exc:
            raise CtlError("UNREADABLE", f"{args.state}: {exc}") from None
    answer = call(_proofs(args).GetCheckpoint, proofs_pb2.GetCheckpointRequest(old_size=last.size if last else 0))
    try:
        signed = note.read_note(answer.note)
        checkpoint = note.read_checkpoint(signed.body)
    except note.NoteError as exc:
        raise CtlError("WITNESS_REJECTED", f"malformed: {exc}", EXIT_FAILED) from None
    if not note.signed_by(signed, checkpoint.origin, steward):
        raise CtlError("WITNESS_REJECTED", "signature: the checkpoint is not signed by the steward's key", EXIT_FAILED)
    if last is not None:   # tlog-witness: only a tree consistent with the last one cosigned
        if last.origin != checkpoint.origin or answer.old_size != last.size or not merkle.verify_consistency(
                last.size, checkpoint.size, last.root, checkpoint.root, list(answer.consistency)):
            raise CtlError("WITNESS_REJECTED", f"consistency: the checkpoint of {checkpoint.size} is not an "
                           f"extension of the one of {last.size} this witness cosigned", EXIT_FAILED)
    cosigned = signed.with_signature(note.cosign(signed.body, args.name, key, int(time.time())))
    if args.submit:
        call(_proofs(args).AddCosignature, proofs_pb2.AddCosignatureRequest(note=cosigned.encoded()))
    _write(args.state, cosigned.encoded())   # only once it is consistent (and recorded, with --submit)
    if args.out:
        _write(args.out, cosigned.encoded())
    doc = {"origin": checkpoint.origin, "size": checkpoint.size, "root": checkpoint.root.hex(),
           "previous_size": last.size if last else 0, "submitted": args.submit,
           "vkey": note.VKey(args.name, note.COSIGNATURE_V1, key.public).text()}
    emit(args, doc, lambda d: table(("field", "value"), list(d.items())))
    return EXIT_OK
