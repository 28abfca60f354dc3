"""The codec server over real HTTP on 127.0.0.1: Temporal's codec protocol, CORS for the
UI, the bearer token, and `dreamkeeper dev`'s in-process server and key."""

from __future__ import annotations

import base64
import os
import stat
import threading

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from dreamkeeper.cli.main import main
from dreamkeeper.client.codec import ENCRYPTED, EncryptionCodec, PayloadKey, derived_key_id
from dreamkeeper.core.errors import SettingsError
from dreamkeeper.service.codec_server import (
    CodecServerSettings,
    DevCodecServer,
    make_server,
)
from dreamkeeper.worker import runtime

UI = "http://localhost:8233"
SECRET = b'"Rocky Lhotka\'s GitHub account is rockfordlhotka."'


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _key(key_id: str = "k1") -> PayloadKey:
    return PayloadKey(key_id, os.urandom(32))


def _plain() -> dict:
    return {"metadata": {"encoding": _b64(b"json/plain")}, "data": _b64(SECRET)}


@pytest.fixture
def serve():
    servers = []

    def start(codec: EncryptionCodec, settings: CodecServerSettings | None = None) -> str:
        srv = make_server(codec, "127.0.0.1", 0, settings)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_encode_then_decode_round_trip(serve):
    url = serve(EncryptionCodec([_key()]))
    encoded = httpx.post(f"{url}/encode", json={"payloads": [_plain()]}, timeout=5)
    assert encoded.status_code == 200
    [sealed] = encoded.json()["payloads"]
    assert base64.b64decode(sealed["metadata"]["encoding"]) == ENCRYPTED
    assert base64.b64decode(sealed["metadata"]["encryption-key-id"]) == b"k1"
    assert b"Lhotka" not in base64.b64decode(sealed["data"])
    # The CLI templates `{namespace}` into the endpoint: only the last segment counts.
    decoded = httpx.post(
        f"{url}/default/decode",
        json={"payloads": [sealed]},
        headers={"X-Namespace": "default"},
        timeout=5,
    )
    assert decoded.status_code == 200 and decoded.json()["payloads"] == [_plain()]


def test_bad_requests_and_unknown_keys_are_400(serve):
    url = serve(EncryptionCodec([_key("new")]))
    assert httpx.post(f"{url}/decode", content=b"{nope", timeout=5).status_code == 400
    other = EncryptionCodec([_key("old")])
    sealed = other.encode_sync([Payload(data=SECRET)])
    body = json_format.MessageToJson(Payloads(payloads=sealed))
    response = httpx.post(
        f"{url}/decode", content=body, timeout=5, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and "'old'" in response.json()["error"]
    assert httpx.post(f"{url}/other", json={"payloads": []}, timeout=5).status_code == 404
    assert httpx.get(f"{url}/decode", timeout=5).status_code == 405
    assert httpx.get(f"{url}/health", timeout=5).json() == {"status": "ok"}


def test_cors_preflight_answers_the_ui_origin_only(serve):
    url = serve(EncryptionCodec([_key()]))
    preflight = httpx.options(
        f"{url}/decode",
        timeout=5,
        headers={
            "Origin": UI,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == UI
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed = {
        h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")
    }
    assert {"x-namespace", "content-type", "authorization"} <= allowed
    post = httpx.post(
        f"{url}/encode", json={"payloads": [_plain()]}, timeout=5, headers={"Origin": UI}
    )
    assert post.headers["access-control-allow-origin"] == UI
    evil = httpx.options(f"{url}/decode", headers={"Origin": "http://evil.example"}, timeout=5)
    assert evil.status_code == 403 and "access-control-allow-origin" not in evil.headers
    post = httpx.post(
        f"{url}/encode", json={"payloads": []}, timeout=5, headers={"Origin": "http://evil.example"}
    )
    assert "access-control-allow-origin" not in post.headers


def test_a_token_is_required_when_configured(serve):
    url = serve(EncryptionCodec([_key()]), CodecServerSettings(origins=(UI,), token="s3cret"))
    body = {"payloads": [_plain()]}
    missing = httpx.post(f"{url}/encode", json=body, headers={"Origin": UI}, timeout=5)
    assert missing.status_code == 401 and "bearer" in missing.headers["www-authenticate"].lower()
    assert missing.headers["access-control-allow-origin"] == UI  # the UI can read why
    wrong = httpx.post(
        f"{url}/decode", json=body, timeout=5, headers={"Authorization": "Bearer guess"}
    )
    assert wrong.status_code == 401
    right = httpx.post(
        f"{url}/encode", json=body, timeout=5, headers={"Authorization": "Bearer s3cret"}
    )
    assert right.status_code == 200
    # The browser's preflight carries no credentials; it must still pass.
    assert httpx.options(f"{url}/decode", headers={"Origin": UI}, timeout=5).status_code == 204


def test_server_settings_from_the_environment():
    assert CodecServerSettings.from_env({}) == CodecServerSettings((UI,), None)
    settings = CodecServerSettings.from_env(
        {
            "DREAMKEEPER_CODEC_CORS_ORIGINS": "http://localhost:8080, https://temporal.example/",
            "DREAMKEEPER_CODEC_TOKEN": "t",
        }
    )
    assert settings.origins == ("http://localhost:8080", "https://temporal.example")
    assert settings.token == "t"
    with pytest.raises(SettingsError, match="DREAMKEEPER_CODEC_CORS_ORIGINS"):
        CodecServerSettings.from_env({"DREAMKEEPER_CODEC_CORS_ORIGINS": "localhost:8080"})


def test_codec_server_without_a_key_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY", raising=False)
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY_FILE", raising=False)
    code = main(["--data", str(tmp_path), "codec-server", "--port", "0"])
    assert code == 2 and "no payload key" in capsys.readouterr().err


def test_dev_generates_a_key_once_and_serves_the_ui(tmp_path, monkeypatch):
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY", raising=False)
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY_FILE", raising=False)
    monkeypatch.delenv("DREAMKEEPER_CODEC_CORS_ORIGINS", raising=False)
    monkeypatch.setenv("DREAMKEEPER_CODEC_TOKEN", "not-for-dev")  # the dev UI sends none
    # port 0: a free one, never the user's own `dev` codec port (8234)
    dev = DevCodecServer(tmp_path, (UI, "http://127.0.0.1:8233"), port=0)
    try:
        key_file = tmp_path / "payload-key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert str(key_file.resolve()) in dev.banner and "generated" in dev.banner
        assert dev.endpoint in dev.banner and dev.endpoint.startswith("http://127.0.0.1:")
        response = httpx.post(
            f"{dev.endpoint}/encode",
            json={"payloads": [_plain()]},
            headers={"Origin": "http://127.0.0.1:8233"},
            timeout=5,
        )
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "http://127.0.0.1:8233"
        [sealed] = response.json()["payloads"]
        key_id = base64.b64decode(sealed["metadata"]["encryption-key-id"]).decode()
    finally:
        dev.close()
    again = DevCodecServer(tmp_path, (UI,), port=0)  # second run: the same key, not a new one
    again.close()
    assert "generated" not in again.banner and key_id in again.banner
    secret = base64.b64decode(key_file.read_text().splitlines()[-1])
    assert key_id == derived_key_id(secret)


def test_dev_server_gets_the_ui_codec_endpoint(tmp_path, monkeypatch):
    seen = {}

    class FakePopen:
        def __init__(self, args, **kwargs):
            seen["args"] = args

    monkeypatch.setattr(runtime, "port_in_use", lambda port, host="127.0.0.1": False)
    monkeypatch.setattr(runtime.subprocess, "Popen", FakePopen)
    runtime.start_dev_server(tmp_path, ui_codec_endpoint="http://127.0.0.1:5555")
    args = seen["args"]
    assert args[args.index("--ui-codec-endpoint") + 1] == "http://127.0.0.1:5555"
