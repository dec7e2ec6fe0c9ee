"""`[telemetry]` in bbridge.toml: where the daemon's spans go (OTLP over HTTP) and how many of them.

```toml
[telemetry]
otlp_endpoint = "http://127.0.0.1:4318"   # required: a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is; spans go to <it>/v1/traces
headers = { authorization = "Bearer …" }  # sent with every export; default none
service_name = "bbridge"                  # the spans' service.name; default bbridge
sample_ratio = 1.0                        # 0..1, the share of traces kept (a client's sampled flag wins); default 1
```

The table is checked whole when the file is read: any problem refuses it (with every reason, each naming its key),
and the daemon then traces nothing, as without the table. Reading it imports nothing of OpenTelemetry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from bbridge.config_file import Refusal, read_keys, read_toml
from bbridge.config_file import Refused as _Refused

SECTION: Final = "telemetry"
TRACES_PATH: Final = "/v1/traces"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)


@dataclass(frozen=True)
class TelemetryConfig:
    otlp_endpoint: str  # the base URL, without a trailing slash
    headers: Mapping[str, str] = field(default_factory=dict)
    service_name: str = "bbridge"
    sample_ratio: float = 1.0

    @property
    def traces_url(self) -> str:
        """Where the spans are posted: the base URL's `/v1/traces`."""
        return self.otlp_endpoint + TRACES_PATH


KEYS: Final = tuple(f.name for f in fields(TelemetryConfig))


def load_telemetry(path: Path | None) -> tuple[TelemetryConfig | None, tuple[Refusal, ...]]:
    """The file's `[telemetry]` (None without a file or the table, or when it is refused) and the refusals; a
    `ConfigError` when the file itself cannot be used."""
    if path is None:
        return None, ()
    return telemetry_from(read_toml(path))


def telemetry_from(raw: Mapping[str, Any]) -> tuple[TelemetryConfig | None, tuple[Refusal, ...]]:
    """The table of a parsed file: the config, or None and one refusal per problem (the table is refused whole)."""
    if SECTION not in raw:
        return None, ()
    table = raw[SECTION]
    if not isinstance(table, dict):
        return None, (Refusal(SECTION, None, f"expected a table, got {type(table).__name__}"),)
    values, problems = read_keys(table, _READERS)
    if "otlp_endpoint" not in table:
        problems.append('otlp_endpoint: required (the collector\'s OTLP/HTTP base URL, e.g. "http://127.0.0.1:4318")')
    if problems:
        return None, tuple(Refusal(SECTION, None, problem) for problem in problems)
    return TelemetryConfig(**values), ()


def _endpoint(value: Any) -> str:
    if not isinstance(value, str):
        raise _Refused(f"expected a URL string, got {type(value).__name__}")
    url = value.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port out of range raises)
    except ValueError as exc:
        raise _Refused(f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Refused(f"expected an http:// or https:// URL with a host, got {value!r}")
    if parts.query or parts.fragment:
        raise _Refused("a base URL has no query or fragment")
    if parts.path.endswith(TRACES_PATH):
        raise _Refused(f"a base URL: spans go to <otlp_endpoint>{TRACES_PATH}, so leave {TRACES_PATH} out")
    return url


def _headers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _Refused(f"expected a table of header names to strings, got {type(value).__name__}")
    for name, text in value.items():
        if not _TOKEN.fullmatch(name):
            raise _Refused(f"{name!r} is not an HTTP header name")
        if not isinstance(text, str) or "\r" in text or "\n" in text:
            raise _Refused(f"{name}: expected a string on one line")
    return dict(value)


def _service_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Refused("expected a non-empty string")
    return value.strip()


def _ratio(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise _Refused(f"expected a number from 0 to 1, got {value!r}")
    return float(value)


_VALUE_READERS: dict[str, Callable[[Any], Any]] = {
    "otlp_endpoint": _endpoint,
    "headers": _headers,
    "service_name": _service_name,
    "sample_ratio": _ratio,
}


def _by_value(read: Callable[[Any], Any]) -> Callable[[str, Any], Any]:
    """A reader of the value alone, as `read_keys` calls one (with its key too)."""
    return lambda _key, value: read(value)


_READERS: dict[str, Callable[[str, Any], Any]] = {key: _by_value(read) for key, read in _VALUE_READERS.items()}
