"""[server.tls] as gRPC server credentials that SIGHUP can swap.

gRPC asks `fetch` for the certificate configuration at each new handshake;
it answers None (keep the one in force) until `reload` has read a new one,
which it then hands over once. Connections already open keep the
certificates they were made with; a new connection gets the new files.
"""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from scheduler.service.config import Tls


class TlsFileError(ValueError):
    pass


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsFileError(f"server.tls.{what} {path}: {exc.strerror}") from None


def _public(key) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def validated(tls: Tls) -> tuple[bytes, bytes, bytes | None]:
    """The key, certificate and client CA files, once the key is the
    certificate's and every file parses (gRPC would take garbage here and keep
    the old credentials without a word)."""
    key, cert = _read(tls.key, "key"), _read(tls.cert, "cert")
    roots = _read(tls.client_ca, "client_ca") if tls.client_ca else None
    try:
        certificate = x509.load_pem_x509_certificate(cert)
    except ValueError as exc:
        raise TlsFileError(f"server.tls.cert {tls.cert}: not a PEM certificate ({exc})") from None
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:
        raise TlsFileError(f"server.tls.key {tls.key}: not an unencrypted PEM private key ({exc})") from None
    if _public(private.public_key()) != _public(certificate.public_key()):
        raise TlsFileError(f"server.tls.key {tls.key} is not the key of server.tls.cert {tls.cert}")
    if roots is not None:
        try:
            if not x509.load_pem_x509_certificates(roots):
                raise ValueError("no certificate")
        except ValueError as exc:
            raise TlsFileError(f"server.tls.client_ca {tls.client_ca}: not PEM certificates ({exc})") from None
    return key, cert, roots


def certificate_configuration(tls: Tls) -> grpc.ServerCertificateConfiguration:
    key, cert, roots = validated(tls)
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=roots)


class ReloadableTls:
    def __init__(self, tls: Tls) -> None:
        self.tls = tls
        self._initial = certificate_configuration(tls)
        self._next: grpc.ServerCertificateConfiguration | None = None
        self._lock = threading.Lock()

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(self._initial, self._fetch,
                                                   require_client_authentication=self.tls.client_ca is not None)

    def reload(self, tls: Tls) -> None:
        """Read the files again (TlsFileError leaves the ones in force)."""
        if (tls.client_ca is None) != (self.tls.client_ca is None):
            raise TlsFileError("server.tls.client_ca cannot be added or removed by a reload: restart")
        configuration = certificate_configuration(tls)
        with self._lock:
            self.tls, self._next = tls, configuration

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            configuration, self._next = self._next, None
        return configuration
