"""TLS contexts built from the tls-* directives (Redis' names and rules).

Three contexts come out of one configuration (:func:`build_contexts`):

* ``clients``: the server side of the client port ``tls-port``, asking for a
  client certificate as ``tls-auth-clients`` says (yes: required, optional:
  checked when sent, no: not asked);
* ``bus_server`` / ``bus_client``: both sides of a cluster bus link with
  ``tls-cluster yes``: mutual TLS, the node's own certificate on both sides,
  the peer's certificate always required and checked against the CA. As in
  Redis, peers are not checked by name (a bus peer is dialled by the address
  gossip gave): the CA is what a cluster trusts, so give the cluster a CA of
  its own.

Errors are the operator's: :class:`TLSConfigError` carries Redis' log text
("No tls-cert-file configured!", "Failed to load certificate: ..."), the
process logs it and refuses to start, or refuses the CONFIG SET that caused it
(leaving the running contexts as they were).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

__all__ = ["TLSConfigError", "TLSContexts", "build_contexts", "tls_wanted"]

_VERSIONS = {
    "tlsv1": ssl.TLSVersion.TLSv1, "tlsv1.1": ssl.TLSVersion.TLSv1_1,
    "tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3,
}
_DEFAULT_PROTOCOLS = "TLSv1.2 TLSv1.3"
_VERIFY = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}


class TLSConfigError(Exception):
    """The tls-* directives do not make a usable TLS configuration."""


@dataclass(frozen=True)
class TLSContexts:
    clients: ssl.SSLContext
    bus_server: ssl.SSLContext
    bus_client: ssl.SSLContext


def tls_wanted(config) -> bool:
    """Whether anything listens or dials with TLS."""
    return bool(config.tls_port or config.tls_cluster)


def _protocol_range(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    # The config table has checked the names. OpenSSL takes a range: a list
    # with a hole ("TLSv1 TLSv1.3") means the versions between as well.
    versions = [_VERSIONS[t.lower()] for t in (text or _DEFAULT_PROTOCOLS).split()]
    return min(versions), max(versions)


def _context(config, purpose: ssl.Purpose, verify: ssl.VerifyMode) -> ssl.SSLContext:
    server_side = purpose is ssl.Purpose.CLIENT_AUTH
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    if not server_side:
        ctx.check_hostname = False      # see the module doc: the CA is the trust
    ctx.minimum_version, ctx.maximum_version = _protocol_range(config.tls_protocols)
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    try:
        ctx.load_cert_chain(config.tls_cert_file, config.tls_key_file,
                            password=config.tls_key_file_pass or None)
    except (OSError, ssl.SSLError) as e:
        raise TLSConfigError(f"Failed to load certificate: {config.tls_cert_file} "
                             f"(key {config.tls_key_file}): {e}") from None
    if config.tls_ca_cert_file or config.tls_ca_cert_dir:
        try:
            ctx.load_verify_locations(config.tls_ca_cert_file or None,
                                      config.tls_ca_cert_dir or None)
        except (OSError, ssl.SSLError) as e:
            raise TLSConfigError(
                f"Failed to configure CA certificate(s) file/directory: {e}") from None
    if config.tls_ciphers:
        try:
            ctx.set_ciphers(config.tls_ciphers)
        except ssl.SSLError:
            raise TLSConfigError(f"Failed to configure ciphers: {config.tls_ciphers}") from None
    ctx.verify_mode = verify
    return ctx


def build_contexts(config) -> TLSContexts:
    """The three contexts for ``config``; raises TLSConfigError."""
    if not config.tls_cert_file:
        raise TLSConfigError("No tls-cert-file configured!")
    if not config.tls_key_file:
        raise TLSConfigError("No tls-key-file configured!")
    if ((config.tls_auth_clients != "no" or config.tls_cluster)
            and not config.tls_ca_cert_file and not config.tls_ca_cert_dir):
        raise TLSConfigError(
            "Either tls-ca-cert-file or tls-ca-cert-dir must be specified when "
            "tls-cluster or tls-auth-clients are enabled!")
    return TLSContexts(
        clients=_context(config, ssl.Purpose.CLIENT_AUTH, _VERIFY[config.tls_auth_clients]),
        bus_server=_context(config, ssl.Purpose.CLIENT_AUTH, ssl.CERT_REQUIRED),
        bus_client=_context(config, ssl.Purpose.SERVER_AUTH, ssl.CERT_REQUIRED),
    )
