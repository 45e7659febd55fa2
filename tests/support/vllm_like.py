"""A stand-in server (real HTTP on 127.0.0.1) that streams a reasoning reply as vLLM does with
a reasoning parser: one token a chunk, the thinking as ``reasoning_content`` deltas, the end
marker's chunk with an empty delta (the parser drops it), then ``content`` deltas. It is a
stand-in written from vLLM's behaviour, not vLLM; the ``vllm_like`` fixture (``tests/conftest.py``)
serves it."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

# (delta key, text) per streamed token: two thinking tokens, the end marker (empty delta),
# two answer tokens.
STREAM = [
    ("reasoning_content", "Let"),
    ("reasoning_content", " me"),
    (None, "</think>"),
    ("content", "Hi"),
    ("content", "!"),
]


class VllmLike(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        data = json.dumps({"object": "list", "data": [{"id": "qwen3", "owned_by": "vllm"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send(self, obj: Any) -> None:
        self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i, (key, text) in enumerate(STREAM):
            raw = list(text.encode())
            entry = {"token": f"token_id:{100 + i}", "logprob": -0.5, "bytes": raw}
            entry["top_logprobs"] = [dict(entry), {"token": "token_id:7", "logprob": -1.5, "bytes": [120]}]
            delta = {key: text} if key else {}
            self._send(
                {"choices": [{"index": 0, "delta": delta, "logprobs": {"content": [entry]}, "finish_reason": None}]}
            )
        self._send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self.wfile.write(b"data: [DONE]\n\n")
