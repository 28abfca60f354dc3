"""The front door: `from dreamkeeper import ...` gives the agent side and loads nothing of
the worker side (each check in a fresh interpreter, so this session's imports don't count)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dreamkeeper

# With the dot: dreamkeeper.client is not dreamkeeper.cli.
WORKER_SIDE = tuple(
    f"dreamkeeper.{name}." for name in ("workflows", "activities", "worker", "service", "cli")
)


def _loaded_after(statement: str, *, everything: bool = False) -> list[str]:
    code = (
        f"import json, sys\n{statement}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if {everything} or "
        "m.startswith('dreamkeeper'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout)


def test_importing_the_agent_side_loads_no_workflow_activity_or_worker_module():
    loaded = _loaded_after(
        "from dreamkeeper import MemoryClient, AgentMemory, ContextBuilder, MemoryTools, "
        "SessionContext, ToolResultStash, tool_specs, load_settings, DreamkeeperError"
    )
    assert "dreamkeeper.agent.client" in loaded  # the import did happen
    assert [m for m in loaded if f"{m}.".startswith(WORKER_SIDE)] == []


def test_import_dreamkeeper_alone_loads_only_the_front_door():
    assert _loaded_after("import dreamkeeper") == ["dreamkeeper"]


def test_every_exported_name_resolves_and_the_package_is_typed():
    for name in dreamkeeper.__all__:
        assert getattr(dreamkeeper, name) is not None, name
    assert sorted(dir(dreamkeeper)) == sorted(dreamkeeper.__all__)
    assert (Path(dreamkeeper.__file__).parent / "py.typed").is_file()


def test_the_remote_client_loads_the_core_and_httpx_only():
    loaded = _loaded_after("from dreamkeeper import RemoteMemoryClient", everything=True)
    assert "dreamkeeper.agent.remote" in loaded and "httpx" in loaded
    ours = {m.split(".")[1] for m in loaded if m.startswith("dreamkeeper.")}
    assert ours == {"agent", "core"}
    assert "dreamkeeper.agent.client" not in loaded  # nor the local client's stores
    heavy = ("numpy", "temporalio", "rank_bm25", "snowballstemmer", "Stemmer")
    assert [m for m in loaded if m.split(".")[0] in heavy] == []
