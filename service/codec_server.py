"""A codec server: Temporal's HTTP protocol for the UI and the `temporal` CLI to read
payloads sealed by `worker/codec.py` (`dreamkeeper codec-server`, and in-process under
`dreamkeeper dev`).

`POST …/encode` and `POST …/decode` (only the last path segment counts, so
`--codec-endpoint http://host:8081/{namespace}` works) take and return
`{"payloads": [...]}` in protobuf JSON (metadata values and data base64). Browsers get
CORS for the configured UI origins (`DREAMKEEPER_CODEC_CORS_ORIGINS`, comma-separated,
default `http://localhost:8233`), preflight included. With `DREAMKEEPER_CODEC_TOKEN`
set, a request without `Authorization: Bearer <token>` gets 401. A payload of a
forgotten agent decodes to a placeholder string saying so (`client.codec.FORGOTTEN` in
its metadata), so the UI shows the rest of the history. Request bodies and decoded
payloads are never logged.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from dreamkeeper.client.codec import (
    DATA_DIR_KEY_FILE,
    KEY_ENV,
    KEY_FILE_ENV,
    EncryptionCodec,
    PayloadDecodeError,
    PayloadErased,
    PayloadKeys,
    forgotten_placeholder,
    generate_key_file,
)
from dreamkeeper.core.errors import InvalidInput, SettingsError
from dreamkeeper.core.settings import load_settings
from dreamkeeper.stores.backends import agent_key_store

log = logging.getLogger(__name__)

DEFAULT_PORT = 8081
# `dreamkeeper dev`'s: stable across restarts, so the `--codec-endpoint` a user copied
# (and the UI's codec setting) keeps working; next to the dev UI's 8233.
DEV_PORT = 8234
DEV_PORT_ENV = "DREAMKEEPER_DEV_CODEC_PORT"
DEFAULT_ORIGINS = ("http://localhost:8233",)
CORS_ENV = "DREAMKEEPER_CODEC_CORS_ORIGINS"
TOKEN_ENV = "DREAMKEEPER_CODEC_TOKEN"
ALLOWED_HEADERS = "X-Namespace, Content-Type, Authorization"
MAX_BODY_BYTES = 64 * 1024 * 1024
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class CodecServerSettings:
    origins: tuple[str, ...] = DEFAULT_ORIGINS
    token: str | None = None
    dev_port: int = DEV_PORT

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CodecServerSettings:
        configured = load_settings(env).codec  # read and checked in core.settings
        return cls(
            origins=configured.cors_origins or DEFAULT_ORIGINS,
            token=configured.server_token,
            dev_port=configured.dev_port,
        )


def make_server(
    codec: EncryptionCodec,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    settings: CodecServerSettings | None = None,
) -> ThreadingHTTPServer:
    handler = functools.partial(
        CodecRequestHandler, codec=codec, settings=settings or CodecServerSettings()
    )
    return ThreadingHTTPServer((host, port), handler)


class CodecRequestHandler(BaseHTTPRequestHandler):
    """One request to the codec server: its route, CORS for the configured origins, the
    bearer token when one is set, and the payloads through `codec`."""

    def __init__(
        self, *args: Any, codec: EncryptionCodec, settings: CodecServerSettings, **kwargs: Any
    ) -> None:
        # Before the base class's __init__, which handles the request.
        self.codec = codec
        self.settings = settings
        super().__init__(*args, **kwargs)

    def log_message(self, fmt: str, *args) -> None:
        log.debug("codec-server: " + fmt, *args)

    def _cors(self) -> None:
        origin = self.headers.get("Origin")
        if origin and origin in self.settings.origins:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")

    def _send(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self._cors()
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, extra: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps({"error": message}).encode(), extra)

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]

    def do_OPTIONS(self) -> None:  # noqa: N802 - the CORS preflight
        origin = self.headers.get("Origin")
        if origin not in self.settings.origins:
            self._error(403, f"origin {origin!r} is not allowed (set {CORS_ENV})")
            return
        self.send_response(204)
        self._cors()
        self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", ALLOWED_HEADERS)
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 - liveness for healthchecks
        if self._route() in ("", "health"):
            self._send(200, b'{"status": "ok"}')
        elif self._route() in ("encode", "decode"):
            self._error(405, "use POST", {"Allow": "POST, OPTIONS"})
        else:
            self._error(404, "not found")

    def do_POST(self) -> None:  # noqa: N802
        route = self._route()
        if route not in ("encode", "decode"):
            self._error(404, "not found: POST …/encode or …/decode")
            return
        if not self._authorized():
            self._error(
                401,
                "a valid bearer token is required",
                {"WWW-Authenticate": 'Bearer realm="dreamkeeper-codec"'},
            )
            return
        payloads = self._payloads()
        if payloads is None:
            return
        try:
            if route == "encode":
                done = self.codec.encode_sync(payloads.payloads)
            else:
                done = [_decoded(self.codec, payload) for payload in payloads.payloads]
        except PayloadDecodeError as exc:
            self._error(400, str(exc))
            return
        body = json_format.MessageToJson(Payloads(payloads=done), indent=None)
        self._send(200, body.encode())

    def _authorized(self) -> bool:
        """No token set, or the request's bearer token is it (compared in constant time)."""
        if not self.settings.token:
            return True
        given = (self.headers.get("Authorization") or "").encode()
        return hmac.compare_digest(given, f"Bearer {self.settings.token}".encode())

    def _payloads(self) -> Payloads | None:
        """The request's body as Payloads; None once the error is answered."""
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._error(411, "Content-Length is required")
            return None
        if not 0 <= length <= MAX_BODY_BYTES:
            self._error(413, f"body over {MAX_BODY_BYTES} bytes")
            return None
        payloads = Payloads()
        try:
            json_format.Parse(self.rfile.read(length), payloads, ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
            self._error(400, f"not Payloads JSON: {exc}")
            return None
        return payloads


def _decoded(codec: EncryptionCodec, payload: Payload) -> Payload:
    """One payload opened; a forgotten agent's, a placeholder saying so. An error for it
    would fail the UI's whole request, and the page would show a connection banner
    instead of the rest of the history."""
    try:
        return codec.decode_sync([payload])[0]
    except PayloadErased as exc:
        return forgotten_placeholder(exc)


def load_codec(
    data_dir: Path | None, database_url: str | None = None
) -> tuple[EncryptionCodec, PayloadKeys]:
    """The workers' codec: their payload keys, and the per-agent data keys where the
    workers keep them (the database when a URL is set, else under `data_dir`)."""
    keys = PayloadKeys.from_env(data_dir=data_dir, key_store=agent_key_store(database_url))
    if not keys.configured:
        raise SettingsError(
            f"no payload key: set {KEY_ENV} or {KEY_FILE_ENV} (the worker's keys) "
            "before starting the codec server"
        )
    return EncryptionCodec(keys.keys, keys.agent_keys()), keys


def serve_cli(host: str, port: int, data_dir: Path | None, database_url: str | None = None) -> int:
    """`dreamkeeper codec-server`: blocks until Ctrl-C."""
    codec, keys = load_codec(data_dir, database_url)
    settings = CodecServerSettings.from_env()
    try:
        server = make_server(codec, host, port, settings)
    except OSError as exc:
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc}") from None
    print(
        f"codec server on http://{host}:{server.server_address[1]} — key {codec.key_id} seals, "
        f"{len(keys.keys)} key(s) open (from {keys.source}); CORS for "
        f"{', '.join(settings.origins)}; bearer token {'required' if settings.token else 'off'}",
        flush=True,
    )
    if host not in LOOPBACK and not settings.token:
        print(
            f"warning: serving decrypted payloads on {host} without {TOKEN_ENV}",
            file=sys.stderr,
            flush=True,
        )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


class DevCodecServer:
    """`dreamkeeper dev`'s codec server on a loopback port in a daemon thread:
    DREAMKEEPER_DEV_CODEC_PORT (8234) unless `port` is given; if that port is busy, a
    free one, and the banner says so."""

    def __init__(
        self,
        data_dir: Path,
        ui_origins: tuple[str, ...],
        *,
        port: int | None = None,
        database_url: str | None = None,
    ) -> None:
        data_dir = data_dir.resolve()
        generated = False
        if not PayloadKeys.from_env(data_dir=data_dir).configured:
            generate_key_file(data_dir / DATA_DIR_KEY_FILE)
            generated = True
        codec, self.keys = load_codec(data_dir, database_url)
        env = CodecServerSettings.from_env()
        wanted = env.dev_port if port is None else port
        # No token here: the bundled dev UI cannot send one; the port is loopback-only.
        origins = tuple(dict.fromkeys((*ui_origins, *env.origins)))
        chosen = CodecServerSettings(origins=origins)
        self.fallback: str | None = None
        try:
            self._server = make_server(codec, "127.0.0.1", wanted, chosen)
        except OSError as exc:
            self._server = make_server(codec, "127.0.0.1", 0, chosen)
            self.fallback = (
                f"port {wanted} for the codec server is busy ({exc.strerror or exc}), so it "
                f"took {self._server.server_address[1]} for this run: set {DEV_PORT_ENV} to "
                "keep one that is free"
            )
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="dreamkeeper-codec-server", daemon=True
        )
        self._thread.start()
        where = f"{self.keys.source} (generated now, mode 0600)" if generated else self.keys.source
        self.banner = (
            f"Payloads encrypted with key {codec.key_id} from {where}; the UI decodes them "
            f"through the codec server at {self.endpoint}"
        )

    def cli_hint(self, schedule_id: str) -> str:
        """The `temporal` command line that reads sealed payloads through this server."""
        return (
            f"Temporal CLI: temporal schedule describe --schedule-id {schedule_id} "
            f"--codec-endpoint {self.endpoint}  (the same option for workflow show/describe)"
        )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
