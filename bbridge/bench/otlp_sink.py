"""The scale phase's trace collector: an OTLP/HTTP receiver on loopback, in the bench's own process (a thread),
that the traced daemon (`[telemetry] otlp_endpoint`) exports its spans to. It answers each `POST /v1/traces` as a
collector does and counts the spans, decoding the bodies with the official protobuf definitions
(`opentelemetry-proto`), so the daemon pays the whole real pipeline: spans made, batched, encoded and posted over
HTTP. Bounded: a body over `MAX_BODY` is refused, and the server stops with its block.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 16 * 1024 * 1024


@dataclass
class Sink:
    url: str = ""  # the base URL, `[telemetry] otlp_endpoint`
    requests: int = 0
    spans: int = 0
    bytes: int = 0


@contextmanager
def otlp_sink() -> Iterator[Sink]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    sink, lock = Sink(), threading.Lock()
    answer = ExportTraceServiceResponse().SerializeToString()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != "/v1/traces" or length > MAX_BODY:
                self.send_response(404 if self.path != "/v1/traces" else 413)
                self.end_headers()
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(length))
            count = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
            with lock:
                sink.requests += 1
                sink.spans += count
                sink.bytes += length
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sink.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        server.shutdown()
        server.server_close()
