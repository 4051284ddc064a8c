"""``kaas certs``: a local CA and broker/client certificates, for dev clusters and tests
(issue 21). Made with ``cryptography``; every file is PEM, keys unencrypted (mode 0600).

    kaas certs init DIR                 # DIR/ca.pem ca.key broker.pem broker.key client.pem client.key
    kaas certs issue DIR alice --client # DIR/alice.pem alice.key, signed by DIR/ca.*

Certificates carry SANs for 127.0.0.1, ::1 and localhost (and any ``--san``), so a
client checking the host name (librdkafka's default) accepts a broker on this machine.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.types import (
        CertificateIssuerPrivateKeyTypes,
        CertificateIssuerPublicKeyTypes,
        PrivateKeyTypes,
    )

DEFAULT_SANS = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _key() -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str, org: str = "kaas", ou: str | None = None) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def make_ca(directory: Path, cn: str = "kaas dev CA", days: int = 3650) -> Issued:
    """A self-signed CA in ``directory`` (ca.pem, ca.key), replacing any there."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    directory.mkdir(parents=True, exist_ok=True)
    key = _key()
    now = dt.datetime.now(dt.timezone.utc)
    name = _name(cn)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    out = Issued(directory / "ca.pem", directory / "ca.key")
    _write(out.key, _pem_key(key), 0o600)
    _write(out.cert, cert.public_bytes(serialization.Encoding.PEM))
    return out


def _issuer_keys(cert: x509.Certificate, key: PrivateKeyTypes
                 ) -> tuple[CertificateIssuerPublicKeyTypes, CertificateIssuerPrivateKeyTypes]:
    """The CA's public and private keys, as keys that sign certificates.

    Raises:
        TypeError: a key of a kind that cannot sign (X25519, X448, DH), as ``sign`` would.
    """
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

    public = cert.public_key()
    if not isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, dsa.DSAPrivateKey,
                            ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)):
        raise TypeError(f"the CA's {type(key).__name__} cannot sign certificates")
    if not isinstance(public, (rsa.RSAPublicKey, ec.EllipticCurvePublicKey, dsa.DSAPublicKey,
                               ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        raise TypeError(f"the CA's {type(public).__name__} cannot sign certificates")
    return public, key


def issue(directory: Path, name: str, *, cn: str | None = None, ou: str | None = None, client: bool = True,
          server: bool = True, sans: tuple[str, ...] = DEFAULT_SANS, days: int = 825,
          not_after: dt.datetime | None = None) -> Issued:
    """A certificate ``name.pem``/``name.key`` in ``directory``, signed by its ``ca.pem``.

    Args:
        cn: the subject's common name (default ``name``); the subject is ``CN=cn[,OU=ou],O=kaas``.
        client, server: the extended key usages (a broker's certificate has both: peers
            present it as their client certificate).
        sans: DNS names and IP addresses.
        not_after: the expiry (default: ``days`` from now).

    Raises:
        FileNotFoundError: the directory has no CA.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    ca_public, ca_key = _issuer_keys(ca_cert, serialization.load_pem_private_key((directory / "ca.key").read_bytes(),
                                                                                   None))
    key = _key()
    now = dt.datetime.now(dt.timezone.utc)
    names: list[x509.GeneralName] = []
    for s in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(s)))
        except ValueError:
            names.append(x509.DNSName(s))
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) \
        + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (x509.CertificateBuilder().subject_name(_name(cn or name, ou=ou)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(not_after or now + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    out = Issued(directory / f"{name}.pem", directory / f"{name}.key")
    _write(out.key, _pem_key(key), 0o600)
    _write(out.cert, cert.public_bytes(serialization.Encoding.PEM))
    return out


def init_dev(directory: Path, *, sans: tuple[str, ...] = DEFAULT_SANS, force: bool = False) -> dict[str, Issued]:
    """A CA, a broker certificate (``CN=broker``) and a client certificate (``CN=client``)
    in ``directory``; what exists is kept unless ``force``."""
    directory = Path(directory)
    ca = Issued(directory / "ca.pem", directory / "ca.key")
    if force or not (ca.cert.exists() and ca.key.exists()):
        ca = make_ca(directory)
        force = True
    out = {"ca": ca}
    for name, client, server in (("broker", True, True), ("client", True, False)):
        got = Issued(directory / f"{name}.pem", directory / f"{name}.key")
        if force or not (got.cert.exists() and got.key.exists()):
            got = issue(directory, name, client=client, server=server, sans=sans)
        out[name] = got
    return out


@click.group()
def certs() -> None:
    """Make a local CA and broker/client certificates (PEM) for dev clusters and tests."""


@certs.command("init")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--san", "sans", multiple=True, help="Another DNS name or IP address of the brokers (repeatable).")
@click.option("--force", is_flag=True, help="Replace the CA and certificates that exist.")
def init_cmd(directory: Path, sans: tuple[str, ...], force: bool) -> None:
    """A CA (ca.pem, ca.key), broker.pem/.key and client.pem/.key in DIRECTORY."""
    made = init_dev(directory, sans=DEFAULT_SANS + tuple(sans), force=force)
    for kind, got in made.items():
        click.echo(f"{kind}: {got.cert} {got.key}")


@certs.command("issue")
@click.argument("directory", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.argument("name")
@click.option("--cn", default=None, help="Subject common name (default: NAME).")
@click.option("--ou", default=None, help="Subject organisational unit.")
@click.option("--client", "kind", flag_value="client", default=True, help="A client certificate (default).")
@click.option("--server", "kind", flag_value="server", help="A broker certificate (server and client use).")
@click.option("--san", "sans", multiple=True,
              help="DNS name or IP address (repeatable; default 127.0.0.1, ::1, localhost).")
@click.option("--days", type=int, default=825, show_default=True, help="Validity.")
def issue_cmd(directory: Path, name: str, cn: str | None, ou: str | None, kind: str, sans: tuple[str, ...],
              days: int) -> None:
    """NAME.pem/NAME.key in DIRECTORY, signed by its CA."""
    got = issue(directory, name, cn=cn, ou=ou, client=True, server=kind == "server",
                sans=tuple(sans) or DEFAULT_SANS, days=days)
    click.echo(f"{name}: {got.cert} {got.key}")
