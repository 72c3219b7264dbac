"""An OTLP/HTTP trace receiver on loopback, for the tracing tests: it
decodes each export with the official protobuf definitions
(opentelemetry-proto) and appends one JSON line per span to a file.

    otlp_receiver.py PORT OUT_FILE

Each line: {"service", "name", "kind", "trace_id", "span_id",
"parent_span_id", "status", "status_message", "attributes"} (ids in hex,
attributes as plain values). Anything that is not a valid
ExportTraceServiceRequest is answered 400 and written as {"error": ...}.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

port, out_path = int(sys.argv[1]), sys.argv[2]


def plain(value):
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        lines = []
        try:
            if self.path != "/v1/traces":
                raise ValueError(f"unexpected path {self.path}")
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for rs in request.resource_spans:
                resource = {a.key: plain(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        lines.append({
                            "service": resource.get("service.name"),
                            "name": s.name,
                            "kind": s.kind,
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "status": s.status.code,
                            "status_message": s.status.message,
                            "attributes": {a.key: plain(a.value) for a in s.attributes},
                        })
            status, answer = 200, ExportTraceServiceResponse().SerializeToString()
        except Exception as e:  # noqa: BLE001 - every failure is reported
            lines = [{"error": str(e)}]
            status, answer = 400, b""
        with open(out_path, "a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


print("listening", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
