"""A scripted OpenAI-compatible `/v1/embeddings` server on 127.0.0.1 for tests.

Vectors are deterministic and crudely semantic: words of one concept (dog, hound,
puppy, canine) share a dimension with weight 1; any other word adds 0.25 to a dimension
chosen by its hash. So "the family hound" and "puppy" are close with no shared word,
while texts about several concepts are far from a one-concept query. `dim` can change
between calls (a model swap); `down` answers 503; every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

CONCEPTS = [
    {"dog", "dogs", "hound", "puppy", "puppies", "canine", "pooch"},
    {"car", "cars", "automobile", "vehicle", "sedan"},
    {"invoice", "invoices", "bill", "billing", "payment"},
    {"doctor", "physician", "clinic", "medical"},
    {"coffee", "espresso", "latte", "cappuccino"},
    {"name", "named", "called", "nickname"},
    {"holiday", "vacation", "trip", "travel"},
    {"house", "home", "apartment", "flat"},
]
OTHER_WEIGHT = 0.25
_WORD = re.compile(r"[a-z0-9']+")


def concept_vector(text: str, dim: int) -> list[float]:
    vector = np.zeros(dim, dtype=np.float64)
    spare = dim - len(CONCEPTS)
    for word in _WORD.findall(text.lower()):
        word = word.removesuffix("'s")
        if len(word) < 3:
            continue
        for i, concept in enumerate(CONCEPTS):
            if word in concept:
                vector[i] += 1.0
                break
        else:
            slot = int(hashlib.sha256(word.encode()).hexdigest(), 16) % spare
            vector[len(CONCEPTS) + slot] += OTHER_WEIGHT
    if not vector.any():
        vector[-1] = 1.0
    return vector.tolist()


@dataclass
class ScriptedEmbeddings:
    dim: int = 24
    down: bool = False
    status: int | None = None  # answer every request with this status instead
    requests: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        script = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                script.requests.append(body)
                status = 503 if script.down else (script.status or 200)
                if status != 200:
                    payload: dict = {"error": "unavailable"}
                else:
                    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                    payload = {
                        "object": "list",
                        "model": body.get("model"),
                        "data": [
                            {
                                "object": "embedding",
                                "index": i,
                                "embedding": concept_vector(text, script.dim),
                            }
                            for i, text in enumerate(inputs)
                        ],
                    }
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def inputs(self) -> list[str]:
        out = []
        for body in self.requests:
            out += body["input"] if isinstance(body["input"], list) else [body["input"]]
        return out

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
