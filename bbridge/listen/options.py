"""`bbridge serve`'s listener flags, and the settings they make (refused with one line naming the missing flag)."""

from __future__ import annotations

import argparse
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from bbridge.listen.admission import Address, ListenError, check_exposure

if TYPE_CHECKING:
    from bbridge.listen.face import ListenSettings

log = structlog.get_logger("bbridge.listen")


def add_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--listen",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="also serve HTTP/1.1 here: the client API over WebSocket at /rpc, /healthz, /readyz, /metrics "
        "(repeatable; beside --socket or alone)",
    )
    serve.add_argument(
        "--allow-origin", action="append", default=[], metavar="ORIGIN", help="a browser origin allowed on /rpc"
    )
    serve.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help="a Host name the listener answers to"
    )
    serve.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve --listen over TLS with this certificate")
    serve.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's private key")
    serve.add_argument(
        "--print-url",
        action="store_true",
        help="print the page's URL with the token (http://HOST:PORT/#token=…) on stderr even when stderr is not "
        "a terminal (on a terminal it always is; otherwise only the URL without the token is logged)",
    )
    serve.add_argument(
        "--insecure-listen",
        action="store_true",
        help="allow a non-loopback --listen without TLS or a token (a warning is logged)",
    )


def settings_from(args: argparse.Namespace, has_token: bool) -> list[ListenSettings]:
    """The listeners `args` ask for; `ListenError` says what is missing or wrong."""
    from bbridge.listen.face import ListenSettings  # the listener's modules load only when one is asked for

    if not args.listen:
        if args.tls_cert or args.tls_key or args.allow_origin or args.allow_host or args.insecure_listen:
            raise ListenError("--tls-cert, --tls-key, --allow-origin, --allow-host and --insecure-listen need --listen")
        if args.print_url:
            raise ListenError("--print-url needs --listen (the page is served there)")
        return []
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ListenError("--tls-cert and --tls-key go together: give both")
    tls = _tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    settings = []
    for text in args.listen:
        address = Address.parse(text)
        refusal = check_exposure(address, token=has_token, tls=tls is not None, insecure=args.insecure_listen)
        if refusal is not None:
            raise ListenError(refusal)
        if not address.loopback and (tls is None or not has_token):
            log.warning(
                "serving a non-loopback address without TLS or a token (--insecure-listen): anyone who reaches it "
                "can read and drive every agent",
                listen=text,
            )
        settings.append(
            ListenSettings(
                address,
                tls,
                frozenset(name.lower() for name in args.allow_host),
                frozenset(origin.lower().rstrip("/") for origin in args.allow_origin),
                print_url=args.print_url or sys.stderr.isatty(),
                token_file=args.token_file,
            )
        )
    return settings


def _tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ListenError(f"--tls-cert {cert} / --tls-key {key}: {exc}") from None
    return context
