"""A local OpenAI-compatible `/v1/embeddings` endpoint: `dreamkeeper embed-server`, serving
the in-process model of `stores.vectors.local_embeddings` (all-MiniLM-L6-v2, int8 ONNX, 384
dimensions; no PyTorch, no download) over HTTP for processes that talk only HTTP — other
hosts, other languages, or an agent whose store lives elsewhere.

Dreamkeeper's own processes do not need it: with the extra installed
(`pip install 'dreamkeeper[local-embeddings]'`) and no DREAMKEEPER_EMBEDDING_BASE_URL set,
they embed in-process. To use the server instead, set
`DREAMKEEPER_EMBEDDING_BASE_URL=http://127.0.0.1:8765/v1` and
`DREAMKEEPER_EMBEDDING_MODEL=all-MiniLM-L6-v2-int8` (the model name keys the vectors, so
both paths then share them).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from dreamkeeper.stores import safe_json
from dreamkeeper.stores.vectors.local_embeddings import (
    INSTALL_HINT,
    LOCAL_MODEL,
    LocalModelMissing,
    OnnxEncoder,
    local_model_files,
)

log = logging.getLogger(__name__)

MODEL_NAME = LOCAL_MODEL
MAX_INPUTS = 2_048
MAX_BODY_BYTES = 64 * 1024 * 1024

Encoder = Callable[[Sequence[str]], list[list[float]]]

__all__ = ["LocalModelMissing", "MODEL_NAME", "local_encoder", "make_server", "serve"]


def local_encoder() -> Encoder:
    """The bundled model, loaded from site-packages (no download, ever)."""
    files = local_model_files()
    if files is None:
        raise LocalModelMissing(f"the local embedding model is not installed: {INSTALL_HINT}")
    encoder = OnnxEncoder(*files)

    def encode(texts: Sequence[str]) -> list[list[float]]:
        return encoder.encode(texts).tolist()

    return encode


def make_server(encode: Encoder, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args) -> None:
            log.debug("embed-server: " + fmt, *args)

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") in ("/health", "/v1/models"):
                self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
            else:
                self._error(404, f"no such path {self.path}")

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/v1/embeddings":
                return self._error(404, f"no such path {self.path}; POST /v1/embeddings")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                return self._error(413, f"request body over {MAX_BODY_BYTES} bytes")
            try:
                body = safe_json.loads(
                    self.rfile.read(length), max_bytes=MAX_BODY_BYTES, max_depth=4
                )
                raw = body["input"]
            except (ValueError, KeyError, TypeError):
                return self._error(400, 'expected a JSON object with "input"')
            texts = [raw] if isinstance(raw, str) else raw
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                return self._error(400, '"input" must be a string or a list of strings')
            if not texts or len(texts) > MAX_INPUTS:
                return self._error(400, f'"input" must hold 1 to {MAX_INPUTS} strings')
            try:
                vectors = encode(texts)
            except Exception as exc:  # noqa: BLE001 — report, keep serving
                log.exception("embed-server: encoding failed")
                return self._send(500, {"error": {"message": f"encoding failed: {exc}"}})
            self._send(
                200,
                {
                    "object": "list",
                    "model": MODEL_NAME,
                    "data": [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(vectors)
                    ],
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                },
            )

    return ThreadingHTTPServer((host, port), Handler)


def serve(host: str, port: int) -> None:
    encode = local_encoder()
    server = make_server(encode, host, port)
    log.info(
        "embeddings: %s on http://%s:%d/v1 (set DREAMKEEPER_EMBEDDING_BASE_URL to it)",
        MODEL_NAME,
        host,
        port,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
