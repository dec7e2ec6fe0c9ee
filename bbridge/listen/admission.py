"""Who may use a `--listen` address, pure: the address itself, the `Host` and `Origin` a request names, its bearer token.

* `Host` must be the bound address (with or without the port), `localhost` on a loopback address, any IP literal on
  a wildcard address (an IP literal cannot be rebound), or a name given by `--allow-host`: a DNS-rebinding page
  reaches the listener under its own name and is refused.
* An upgrade's `Origin`, when the peer sends one (browsers always do), must be the listener's own origin (its scheme
  and the `Host` it was reached by) or one named by `--allow-origin`: no page a user happens to visit drives their
  agents. Programs that send no `Origin` are not browsers and prove themselves with the token.
* Tokens are compared in constant time (`token_matches`) and never logged.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from bbridge.daemon.server import token_matches


class ListenError(ValueError):
    """A `--listen` value or flag combination `bbridge serve` refuses; the message says which flag is missing."""


@dataclass(frozen=True)
class Address:
    host: str  # as bound: an IP literal or a name (IPv6 without brackets)
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """`HOST:PORT`, `[V6]:PORT`; port 0 picks a free one."""
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ListenError(f"--listen {text!r}: expected HOST:PORT (for example 127.0.0.1:8765)")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return cls(host, int(port))

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def wildcard(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_unspecified
        except ValueError:
            return False


def _split_host(value: str) -> str:
    """A `Host` header's host part, lowercased, IPv6 without brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Admission:
    """The checks one listener applies to each request."""

    address: Address
    scheme: str  # http or https
    token: str | None
    allow_hosts: frozenset[str] = field(default_factory=frozenset)
    allow_origins: frozenset[str] = field(default_factory=frozenset)

    def host_refusal(self, host_header: str | None) -> str | None:
        """Why a request's `Host` is refused, or None."""
        if not host_header:
            return "the request names no Host"
        host = _split_host(host_header)
        bound = self.address.host.lower()
        if host == bound or host in self.allow_hosts:
            return None
        if host == "localhost" and self.address.loopback:
            return None
        if self.address.wildcard and _is_ip(host):
            return None
        return f"Host {host!r} is not this listener's address (name it with --allow-host to accept it)"

    def origin_refusal(self, origin: str | None, host_header: str | None) -> str | None:
        """Why an upgrade's `Origin` is refused, or None (no `Origin`: not a browser)."""
        if origin is None:
            return None
        origin = origin.strip().lower().rstrip("/")
        if origin in self.allow_origins:
            return None
        if host_header and origin == f"{self.scheme}://{host_header.strip().lower()}":
            return None
        return f"Origin {origin!r} may not use this listener (name it with --allow-origin to accept it)"

    def bearer(self, authorization: str | None) -> bool | None:
        """The `Authorization: Bearer` token: None when absent, else whether it is the daemon's."""
        if authorization is None:
            return None
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or self.token is None:
            return False
        return token_matches(value.strip(), self.token)


def check_exposure(address: Address, *, token: bool, tls: bool, insecure: bool) -> str | None:
    """Why `bbridge serve` refuses to bind `address`, or None. A non-loopback address needs a token and TLS, or an
    explicit `--insecure-listen` (a warning is logged at start)."""
    if address.loopback or insecure:
        return None
    missing = [flag for flag, have in (("--token-file", token), ("--tls-cert and --tls-key", tls)) if not have]
    if not missing:
        return None
    return (
        f"--listen {address.host}:{address.port} is not a loopback address: it needs {' and '.join(missing)} "
        "(or --insecure-listen to serve it anyway)"
    )
