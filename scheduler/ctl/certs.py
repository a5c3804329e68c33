"""`poolctl certs ca|server|agent|client`: a development PKI, as `cockroach
cert` or `nomad tls` make one.

    D/ca.pem, D/ca.key            the CA (ECDSA P-256, self-signed)
    D/server.pem, D/server.key    the scheduler: SANs from every --host (names and IPs)
    D/HOST.pem, D/HOST.key        an agent: CN = the host id it may register as
    D/NAME.pem, D/NAME.key        a client: CN = the principal in [principals.NAME]

Keys are written 0600 and nothing is ever overwritten. For production use
any CA that issues X.509 (docs/OPERATIONS.md, Security): the scheduler only
reads PEM files and a certificate's subject CN.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from scheduler.ctl.output import EXIT_USAGE, CtlError, add_output_flag, emit

CA_DAYS = 3650
LEAF_DAYS = 365


class PkiError(ValueError):
    pass


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise PkiError(f"{path} exists; nothing is overwritten (remove it first to replace it)") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _save(directory: Path, name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for path in (directory / f"{name}.pem", directory / f"{name}.key"):
        if path.exists():
            raise PkiError(f"{path} exists; nothing is overwritten (remove it first to replace it)")
    _write_new(directory / f"{name}.key", key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)
    _write_new(directory / f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return directory / f"{name}.pem"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Pool"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _load_ca(directory: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    try:
        cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise PkiError(f"no CA in {directory} (make one with `poolctl certs ca --dir {directory}`): {exc}") from None
    return key, cert  # type: ignore[return-value]


def _validity(days: int, not_before: datetime.datetime | None) -> tuple[datetime.datetime, datetime.datetime]:
    start = not_before or datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    return start, start + datetime.timedelta(days=days)


def make_ca(directory: Path, common_name: str = "Pool development CA") -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(CA_DAYS, None)
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return _save(directory, "ca", key, cert)


def issue(directory: Path, name: str, common_name: str, *, server_hosts: tuple[str, ...] = (),
          days: int = LEAF_DAYS, not_before: datetime.datetime | None = None) -> Path:
    """D/NAME.pem and D/NAME.key signed by D's CA: a server certificate when
    server_hosts are given (SANs), else a client certificate for CN."""
    if not common_name:
        raise PkiError("a certificate needs a non-empty name")
    ca_key, ca_cert = _load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days, not_before)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_hosts else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if server_hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in server_hosts]),
                                        critical=False)
    return _save(directory, name, key, builder.sign(ca_key, hashes.SHA256()))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_server(directory: Path, hosts: tuple[str, ...]) -> Path:
    return issue(directory, "server", hosts[0], server_hosts=hosts)


def make_client(directory: Path, principal: str, **kwargs: Any) -> Path:
    """A principal's certificate (an agent's is the same, named for its host)."""
    return issue(directory, principal, principal, **kwargs)


# -- the command ---------------------------------------------------------------

def register(verbs: argparse._SubParsersAction) -> None:
    certs = verbs.add_parser("certs", help="make a development PKI: a CA and certificates signed by it")
    sub = certs.add_subparsers(dest="what", required=True)
    for name, help_text in (("ca", "D/ca.pem and D/ca.key"),
                            ("server", "D/server.pem and D/server.key for the scheduler"),
                            ("agent", "D/HOST.pem and D/HOST.key for the agent of host HOST"),
                            ("client", "D/NAME.pem and D/NAME.key for principal NAME")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--dir", required=True, type=Path, metavar="D")
        if name == "server":
            p.add_argument("--host", action="append", required=True, metavar="NAME",
                           help="a DNS name or IP address clients dial; repeatable")
        elif name == "agent":
            p.add_argument("--host", required=True, metavar="HOST_ID", help="the host id the agent registers")
        elif name == "client":
            p.add_argument("--principal", required=True, metavar="NAME", help="the principal, as in [principals.NAME]")
        add_output_flag(p)
        p.set_defaults(run=_run)


def _run(args: Any) -> int:
    try:
        if args.what == "ca":
            made = make_ca(args.dir)
        elif args.what == "server":
            made = make_server(args.dir, tuple(args.host))
        else:
            made = make_client(args.dir, args.host if args.what == "agent" else args.principal)
    except PkiError as exc:
        raise CtlError("CERTS", str(exc), EXIT_USAGE) from None
    emit(args, {"certificate": str(made), "key": str(made.with_suffix(".key"))},
         lambda doc: f"wrote {doc['certificate']} and {doc['key']} (0600)")
    return 0
