"""A real OTLP/HTTP trace receiver on loopback, for the tracing tests: it takes `POST /v1/traces` bodies as a
collector does and decodes them with the official protobuf definitions (`opentelemetry-proto`'s
`ExportTraceServiceRequest`), never trusting the SDK's own view of what it sent.

Bounded: at most `MAX_REQUESTS` requests of at most `MAX_BODY` bytes each are read; the server stops with its block.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support import loopback_http

MAX_REQUESTS = 500
MAX_BODY = 8 * 1024 * 1024


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex, as W3C writes it
    span_id: str
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    message: str  # the status's description
    start_ns: int
    end_ns: int


@dataclass
class Receiver:
    url: str = ""  # the base URL (`[telemetry] otlp_endpoint`)
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: list[dict[str, str]] = field(default_factory=list)  # each request's path and (lower-cased) headers
    lock: threading.Lock = field(default_factory=threading.Lock)

    def named(self, name: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.name == name]

    def wait_for(self, name: str, count: int = 1, timeout: float = 10.0) -> list[ReceivedSpan]:
        """The spans called `name`, once at least `count` have arrived (polling, bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.named(name)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"{count} {name!r} span(s) expected, got {[s.name for s in self.spans]}")


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind is not None else None


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={kv.key: value(kv.value) for kv in span.attributes},
                        resource=resource,
                        status=span.status.code,
                        message=span.status.message,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                    )
                )
    return spans


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if len(state.requests) >= MAX_REQUESTS or length > MAX_BODY:
                self.send_response(413)
                self.end_headers()
                return
            body = self.rfile.read(length)
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with state.lock:
                state.requests.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                if self.path == "/v1/traces":
                    state.spans.extend(decode(body))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with loopback_http(Handler) as url:
        state.url = url
        yield state
