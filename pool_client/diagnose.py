"""Why no scheduler could be reached, in one line, from what gRPC reported;
for a TLS failure the server is asked again with Python's ssl module (its
certificate, whether it speaks TLS at all), only after the failure, so a
working call pays nothing.

The causes told apart: nothing listening; plaintext against a TLS scheduler;
TLS against a plaintext one; a server certificate the CA does not trust (its
issuer named); a certificate that does not name the address dialled (its
names listed); our certificate refused, or none given; a listener that never
completes a handshake. UNKNOWN_PRINCIPAL is the scheduler's own answer, a
PoolError of its own.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import grpc

PERMANENT = ("CERTIFICATE_VERIFY_FAILED", "WRONG_VERSION_NUMBER", "Hostname Verification", "Socket closed")


def permanent(error: grpc.RpcError) -> bool:
    """A connection failure that trying again will not mend (TLS set up wrongly on one side)."""
    details = error.details() or ""
    return any(mark in details for mark in PERMANENT)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def cause(error: grpc.RpcError, address: str, settings: Any) -> str:
    """One line: what is wrong with reaching `address`."""
    details = error.details() or ""
    tls = settings.tls
    if "Connection refused" in details:
        return f"nothing is listening at {address} (connection refused)"
    if "WRONG_VERSION_NUMBER" in details:
        return f"{address} answers in plaintext, not TLS: it is an insecure scheduler (or not a scheduler); drop --ca"
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return f"{address}: the scheduler's certificate is not trusted by the CA given: {_issuer(address, settings)}"
    if "Hostname Verification" in details or "Peer name" in details:
        return f"{address}: the scheduler's certificate does not name the address dialled: {_names(address)}"
    if "Socket closed" in details or "Connection reset" in details:
        if not tls:
            return (f"{address} closed a plaintext connection: the scheduler speaks TLS "
                    "(give --ca, --cert and --key, or a context with them)")
        if settings.credentials is not None and not getattr(settings, "has_cert", True):
            return f"{address} refused the connection: the scheduler requires a client certificate (--cert, --key)"
        return f"{address} refused our client certificate: {_client_refusal(address, settings)}"
    if "Handshake read failed" in details or "Deadline" in details or "handshake" in details.lower():
        return (f"{address} accepted the connection but completed no handshake within "
                f"{settings.connect_timeout:g} s (not a scheduler, or it is frozen)")
    if "DNS" in details or "resolution" in details.lower():
        return f"cannot resolve {address.rpartition(':')[0]}"
    return f"{address}: {details}"


def _certificate(address: str) -> Any:
    from cryptography import x509   # loaded only to explain a failure
    host, port = _split(address)
    pem = ssl.get_server_certificate((host, port), timeout=2)
    return x509.load_pem_x509_certificate(pem.encode())


def _cn(name: Any) -> str:
    from cryptography.x509.oid import NameOID
    found = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(found[0].value) if found else name.rfc4514_string()


def _key_id(certificate: Any, authority: bool) -> str:
    """The first bytes of the (authority) key identifier: two CAs may share a name, never a key."""
    from cryptography import x509
    try:
        if authority:
            value = certificate.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
        else:
            value = certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except x509.ExtensionNotFound:
        return ""
    return f" key {value[:4].hex()}…" if value else ""


def _issuer(address: str, settings: Any) -> str:
    try:
        certificate = _certificate(address)
    except (OSError, ValueError):
        return "(its certificate could not be read)"
    ours = ""
    if getattr(settings, "ca_path", None):
        try:
            from cryptography import x509
            with open(settings.ca_path, "rb") as f:
                ca = x509.load_pem_x509_certificate(f.read())
            ours = f", the CA given is {_cn(ca.subject)!r}{_key_id(ca, False)}"
        except (OSError, ValueError):
            pass
    return f"it was issued by {_cn(certificate.issuer)!r}{_key_id(certificate, True)}{ours}"


def _names(address: str) -> str:
    from cryptography import x509
    host, _ = _split(address)
    try:
        certificate = _certificate(address)
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(v) for v in san.get_values_for_type(x509.DNSName)] + \
                [str(v) for v in san.get_values_for_type(x509.IPAddress)]
    except (OSError, ValueError, x509.ExtensionNotFound):
        return f"it is not valid for {host}"
    return f"it names {', '.join(names) or 'nothing'}, not {host}"


def _client_refusal(address: str, settings: Any) -> str:
    """Our certificate, named, and what the scheduler's TLS alert said about it."""
    try:
        from cryptography import x509
        with open(settings.cert_path, "rb") as f:
            ours = x509.load_pem_x509_certificate(f.read())
        named = f"{_cn(ours.subject)!r}, issued by {_cn(ours.issuer)!r}{_key_id(ours, True)}"
    except (OSError, ValueError, TypeError):
        return "its file could not be read"
    return f"{named}: {_alert(address, settings)}"


def _alert(address: str, settings: Any) -> str:
    """What the scheduler's TLS alert says about our certificate."""
    host, port = _split(address)
    context = ssl.create_default_context(cafile=getattr(settings, "ca_path", None))
    context.check_hostname = False
    try:
        if getattr(settings, "cert_path", None):
            context.load_cert_chain(settings.cert_path, settings.key_path)
        with socket.create_connection((host, port), timeout=2) as raw, \
                context.wrap_socket(raw, server_hostname=host) as tls:
            tls.recv(1)   # TLS 1.3 tells a refused client certificate after the handshake
    except ssl.SSLError as error:
        reason = (error.reason or str(error)).replace("_", " ").lower()
        return f"the scheduler does not trust it ({reason})"
    except OSError:
        pass
    return "the scheduler closed the connection during the TLS handshake (it does not trust that issuer)"
