"""The payload codec (worker/codec.py): AES-256-GCM, key ids, rotation, key settings."""

from __future__ import annotations

import base64
import os
import stat

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from dreamkeeper.cli.main import main
from dreamkeeper.client.codec import (
    ENCRYPTED,
    KEY_ID,
    EncryptionCodec,
    PayloadDecodeError,
    PayloadKey,
    PayloadKeyMismatch,
    PayloadKeys,
    data_converter,
    derived_key_id,
    generate_key_file,
    parse_key,
)
from dreamkeeper.core.errors import SettingsError, StoreMismatch
from dreamkeeper.core.payloads import SaveInput

SECRET = "Trish Roberts's phone number is +1 386-299-4605."


def _key(key_id: str | None = None) -> PayloadKey:
    secret = os.urandom(32)
    return PayloadKey(key_id or derived_key_id(secret), secret)


def _b64(key: PayloadKey) -> str:
    return base64.b64encode(key.secret).decode()


def _save_input() -> SaveInput:
    return SaveInput(
        agent_id="a1",
        entry_id="0123456789ab",
        content=SECRET,
        category="people",
        tags=["phone"],
        source="user",
        importance=0.5,
    )


async def test_round_trip_through_the_data_converter_hides_the_content():
    key = _key()
    converter = data_converter(PayloadKeys((key,), "test"))
    [payload] = await converter.encode([_save_input()])
    assert payload.metadata["encoding"] == ENCRYPTED
    assert payload.metadata[KEY_ID] == key.key_id.encode()
    assert b"Trish" not in payload.SerializeToString() and b"4605" not in payload.data
    [back] = await converter.decode([payload], [SaveInput])
    assert back == _save_input()


async def test_every_payload_gets_its_own_nonce():
    codec = EncryptionCodec([_key()])
    plain = (await pydantic_data_converter.encode([SECRET]))[0]
    first, second = await codec.encode([plain, plain])
    assert first.data[:12] != second.data[:12] and first.data != second.data
    assert await codec.decode([first, second]) == [plain, plain]


async def test_rotation_old_key_still_decodes_new_key_encodes(tmp_path):
    old, new = _key("k2025"), _key("k2026")
    sealed_before = await EncryptionCodec([old]).encode([Payload(data=b"old history")])
    key_file = tmp_path / "keys"
    key_file.write_text(
        f"# rotated in 2026\n{new.key_id}:{_b64(new)}\n\n{old.key_id}:{_b64(old)}\n"
    )
    settings = PayloadKeys.from_env({"DREAMKEEPER_PAYLOAD_KEY_FILE": str(key_file)})
    assert [k.key_id for k in settings.keys] == ["k2026", "k2025"]
    rotated = EncryptionCodec(settings.keys)
    assert (await rotated.decode(sealed_before))[0].data == b"old history"
    [fresh] = await rotated.encode([Payload(data=b"new history")])
    assert fresh.metadata[KEY_ID] == b"k2026"
    with pytest.raises(PayloadDecodeError, match="k2026"):
        await EncryptionCodec([old]).decode([fresh])  # a worker not yet given the new key


async def test_an_unknown_key_id_is_a_clear_error():
    [sealed] = await EncryptionCodec([_key("gone")]).encode([Payload(data=b"x")])
    with pytest.raises(PayloadDecodeError, match="key id 'gone', which is not configured"):
        await EncryptionCodec([_key("current")]).decode([sealed])


async def test_tampered_ciphertext_is_refused():
    codec = EncryptionCodec([_key()])
    [sealed] = await codec.encode([Payload(data=SECRET.encode())])
    flipped = bytearray(sealed.data)
    flipped[20] ^= 0x01
    tampered = Payload(metadata=dict(sealed.metadata), data=bytes(flipped))
    with pytest.raises(PayloadDecodeError, match="failed authentication"):
        await codec.decode([tampered])
    truncated = Payload(metadata=dict(sealed.metadata), data=sealed.data[:10])
    with pytest.raises(PayloadDecodeError, match="truncated"):
        await codec.decode([truncated])


async def test_plain_and_foreign_payloads_pass_through_and_nothing_is_sealed_twice():
    codec = EncryptionCodec([_key()])
    plain = (await pydantic_data_converter.encode([SECRET]))[0]
    foreign = Payload(metadata={"encoding": ENCRYPTED}, data=b"someone else's")  # no key id
    assert await codec.decode([plain, foreign]) == [plain, foreign]
    [sealed] = await codec.encode([plain])
    assert await codec.encode([sealed]) == [sealed]


async def test_failure_messages_are_sealed_too():
    converter = data_converter(PayloadKeys((_key(),), "test"))
    failure = Failure()
    await converter.encode_failure(ApplicationError(f"could not parse {SECRET}"), failure)
    assert "Trish" not in str(failure)
    error = await converter.decode_failure(failure)
    assert SECRET in str(error)


async def test_no_key_seals_nothing_and_refuses_a_sealed_payload_saying_where_it_looked(
    tmp_path,
):
    settings = PayloadKeys.from_env({}, data_dir=tmp_path)
    assert not settings.configured
    keyless = data_converter(settings)
    assert keyless.payload_converter_class is pydantic_data_converter.payload_converter_class
    plain = await keyless.encode(["store 1234"])
    assert plain == await pydantic_data_converter.encode(["store 1234"])  # nothing sealed
    assert await keyless.decode(plain, [str]) == ["store 1234"]
    sealed = await data_converter(PayloadKeys((_key(),), "test")).encode(["store 1234"])
    # Before: the SDK's KeyError 'Unknown payload encoding binary/encrypted'.
    with pytest.raises(PayloadKeyMismatch) as refused:
        await keyless.decode(sealed, [str])
    assert isinstance(refused.value, StoreMismatch) and refused.value.exit_code == 2
    message = str(refused.value)
    assert "DREAMKEEPER_PAYLOAD_KEY and DREAMKEEPER_PAYLOAD_KEY_FILE are unset" in message
    assert str(tmp_path / "payload-key") in message and "--data" in message
    with pytest.raises(PayloadKeyMismatch, match="PAYLOAD_KEY_FILE are unset"):
        await data_converter(None).decode(sealed, [str])


def test_key_forms_base64_hex_urlsafe_and_named():
    key = _key()
    assert parse_key(_b64(key), "X") == key  # derived id
    assert parse_key(key.secret.hex(), "X") == key
    urlsafe = base64.urlsafe_b64encode(key.secret).decode().rstrip("=")
    assert parse_key(urlsafe, "X") == key
    assert parse_key(f"prod-1:{_b64(key)}", "X") == PayloadKey("prod-1", key.secret)
    env = PayloadKeys.from_env({"DREAMKEEPER_PAYLOAD_KEY": f" {_b64(key)} "})
    assert env.keys == (key,) and env.source == "DREAMKEEPER_PAYLOAD_KEY"


@pytest.mark.parametrize(
    "value, message",
    [
        ("not a key!", "neither base64 nor 64 hex digits"),
        (base64.b64encode(b"k" * 16).decode(), "16 bytes; AES-256 needs exactly 32"),
        ("bad id!:" + base64.b64encode(b"k" * 32).decode(), "key id 'bad id!'"),
    ],
)
def test_bad_key_material_is_a_settings_error_that_never_repeats_the_key(value, message):
    with pytest.raises(SettingsError, match="DREAMKEEPER_PAYLOAD_KEY") as err:
        PayloadKeys.from_env({"DREAMKEEPER_PAYLOAD_KEY": value})
    assert message in str(err.value)
    assert value.rsplit(":", 1)[-1] not in str(err.value)


def test_key_file_errors(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SettingsError, match="cannot read"):
        PayloadKeys.from_env({"DREAMKEEPER_PAYLOAD_KEY_FILE": str(missing)})
    empty = tmp_path / "empty"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(SettingsError, match="holds no key"):
        PayloadKeys.from_env({"DREAMKEEPER_PAYLOAD_KEY_FILE": str(empty)})
    bad = tmp_path / "bad"
    bad.write_text(f"{_b64(_key())}\nshort\n")
    with pytest.raises(SettingsError, match="line 2"):
        PayloadKeys.from_env({"DREAMKEEPER_PAYLOAD_KEY_FILE": str(bad)})
    clash = tmp_path / "clash"
    clash.write_text(f"a:{_b64(_key())}\na:{_b64(_key())}\n")
    with pytest.raises(SettingsError, match="used by two different keys"):
        PayloadKeys.from_env({"DREAMKEEPER_PAYLOAD_KEY_FILE": str(clash)})
    with pytest.raises(SettingsError, match="not both"):
        PayloadKeys.from_env(
            {"DREAMKEEPER_PAYLOAD_KEY": _b64(_key()), "DREAMKEEPER_PAYLOAD_KEY_FILE": str(bad)}
        )


def test_the_data_directory_key_is_used_when_nothing_is_configured(tmp_path):
    key = generate_key_file(tmp_path / "payload-key")
    assert stat.S_IMODE((tmp_path / "payload-key").stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):  # never overwritten
        generate_key_file(tmp_path / "payload-key")
    settings = PayloadKeys.from_env({}, data_dir=tmp_path)
    assert settings.keys == (key,) and settings.source == str(tmp_path / "payload-key")
    other = _key()
    env = PayloadKeys.from_env({"DREAMKEEPER_PAYLOAD_KEY": _b64(other)}, data_dir=tmp_path)
    assert env.keys == (other,)  # the environment wins


def test_bad_key_exits_2_before_reaching_a_server(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DREAMKEEPER_PAYLOAD_KEY", "too-short")
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    code = main(["--data", str(tmp_path), "save", "a fact"])
    err = capsys.readouterr().err
    assert code == 2 and "DREAMKEEPER_PAYLOAD_KEY" in err and len(err.strip().splitlines()) == 1
