"""A scripted OpenAI-compatible server on 127.0.0.1 for tests.

Each POST to /v1/chat/completions takes the next scripted reply: (status, content) and
optionally an Event the handler waits on before answering, so a test can hold the LLM
"thinking" for as long as it needs. With no scripted reply left, a `responder` (a
function of the request body) answers, else `default`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    content: str | None
    status: int = 200
    hold: threading.Event | None = None
    tool_calls: list[dict] | None = None  # OpenAI-style calls the "model" makes


def tool_call(call_id: str, name: str, arguments: dict) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


@dataclass
class ScriptedLLM:
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    default: Reply | None = None
    responder: Callable[[dict], Reply] | None = None

    def __post_init__(self) -> None:
        script = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                script.requests.append(body)
                reply: Reply | None
                if script.replies:
                    reply = script.replies.pop(0)
                elif script.responder is not None:
                    reply = script.responder(body)
                else:
                    reply = script.default
                if reply is None:
                    reply = Reply("no scripted reply left", status=500)
                if reply.hold is not None:
                    reply.hold.wait(timeout=60)
                message: dict[str, object] = {"role": "assistant", "content": reply.content}
                if reply.tool_calls:
                    message["tool_calls"] = reply.tool_calls
                payload = (
                    {"choices": [{"message": message}]}
                    if reply.status == 200
                    else {"error": reply.content}
                )
                data = json.dumps(payload).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
