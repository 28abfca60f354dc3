"""What the command groups share: where a command's store is (local, through the worker,
or a serve's with --url), the checks that refuse before anything is touched, and the
options several commands spell the same way."""

from __future__ import annotations

import argparse
import errno
import socket
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dreamkeeper.core.errors import DreamkeeperError, InvalidInput, NotFound, Unavailable
from dreamkeeper.core.settings import ServiceSettings, StoreSettings, TemporalSettings

if TYPE_CHECKING:
    from dreamkeeper.agent.client import MemoryClient
    from dreamkeeper.agent.remote import RemoteMemoryClient

# A command's handler: (parsed options, the store they name) -> exit code.
Command = Callable[[argparse.Namespace, StoreSettings], int]
# `add_subparsers()`'s return: what each group's register() adds its commands to.
Subparsers = Any

JSON_HELP = "print JSON instead of text"


def add_json(p: argparse.ArgumentParser, *, default: Any = False) -> None:
    p.add_argument("--json", action="store_true", default=default, help=JSON_HELP)


def add_direct(p: argparse.ArgumentParser) -> None:
    p.add_argument("--direct", action="store_true", help="write the store, not via the worker")


def add_bind(p: argparse.ArgumentParser, port: int) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    p.add_argument("--port", type=int, default=port, help=f"port to bind ({port})")


def service_settings(args: argparse.Namespace) -> ServiceSettings:
    """ServiceSettings from the environment, with --url, --host and --port over them."""
    service = ServiceSettings.from_env()
    overrides: dict[str, Any] = {}
    if getattr(args, "url", None) is not None:
        if not args.url.startswith(("http://", "https://")):
            raise InvalidInput(f"--url {args.url!r} is not an http:// or https:// URL")
        overrides["url"] = args.url.rstrip("/")
    if getattr(args, "host", None) is not None:
        overrides["host"] = args.host
    if getattr(args, "port", None) is not None:
        if not 0 < args.port < 65_536:
            raise InvalidInput(f"--port {args.port} is out of range (1-65535)")
        overrides["port"] = args.port
    return replace(service, **overrides) if overrides else service


def require_free_port(host: str, port: int, option: str = "--port") -> None:
    """Refuse a port something already listens on, before anything starts: `serve` would
    otherwise start a worker on the live task queue first, then fail to listen. `option`
    is the command's own option for that port (`dev`'s `--port` is Temporal's)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidInput(f"cannot serve on {host}:{port}: {exc}") from None
    with socket.socket(family, kind, proto) as probe:
        # As uvicorn binds: a port left in TIME_WAIT is free, one with a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidInput(
                    f"port {port} (memory service) is already in use: stop whatever holds "
                    f"it, or choose another with {option} or DREAMKEEPER_SERVE_PORT"
                ) from None
            raise InvalidInput(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


# -- against a remote `dreamkeeper serve` (--url / DREAMKEEPER_URL) ----------------------


def remote_client(args: argparse.Namespace) -> RemoteMemoryClient | None:
    """The remote client when --url or DREAMKEEPER_URL names a server; --direct then makes
    no sense (the store is the server's)."""
    service = service_settings(args)
    if not service.url:
        return None
    if getattr(args, "direct", False):
        raise InvalidInput("--direct writes a local store: it cannot be used with --url")
    from dreamkeeper.agent.remote import RemoteMemoryClient

    return RemoteMemoryClient(service.url, token=service.sent_token)


def refuse_url(args: argparse.Namespace, what: str) -> None:
    """`what` works on the local store only: refuse rather than act on another store than
    the one --url (or DREAMKEEPER_URL) names."""
    url = service_settings(args).url
    if not url:
        return
    given = "--url" if getattr(args, "url", None) is not None else "DREAMKEEPER_URL"
    raise InvalidInput(
        f"{what} works on a local data directory, not through a serve: {given} is set "
        f"({url}); run it where that server's data directory is, without {given}"
    )


def require_store(settings: StoreSettings, agent_id: str | None = None) -> None:
    """The data directory and the agent's store must exist: a read of a mistyped path or
    agent would otherwise answer "nothing matched", and opening the store creates its
    directory and lock file. Like serve, an agent exists once it has a directory (in a
    database: once it has a long-term store)."""
    from dreamkeeper.stores.backends import open_backend
    from dreamkeeper.stores.contract.backend import POSTGRESQL

    data_dir = settings.data_dir
    agent = agent_id or settings.agent_id
    backend = open_backend(settings)
    if backend.kind == POSTGRESQL:
        if not backend.has_agent(agent):
            known = backend.agents()
            raise NotFound(
                f"unknown agent {agent!r}: it has no store in the database at "
                f"{backend.location} (agents there: {', '.join(known) if known else 'none'})"
            )
        return
    require_data_dir(settings)
    agents = data_dir / "agents"
    if not (agents / agent).is_dir():
        known = sorted(p.name for p in agents.iterdir() if p.is_dir()) if agents.is_dir() else []
        raise NotFound(
            f"unknown agent {agent!r}: it has no store in {data_dir} "
            f"(agents there: {', '.join(known) if known else 'none'})"
        )


def require_data_dir(settings: StoreSettings) -> None:
    if not settings.data_dir.is_dir():
        raise NotFound(
            f"data directory {settings.data_dir} does not exist (--data or DREAMKEEPER_DATA; "
            "`save` or `import` creates it)"
        )


# -- through the worker (a workflow each, with a history) -------------------------------


async def memory_client(settings: StoreSettings) -> MemoryClient:
    from dreamkeeper.agent.client import MemoryClient

    temporal = TemporalSettings.from_env()
    try:
        return await MemoryClient.connect(settings, temporal)
    except DreamkeeperError:
        raise  # some are RuntimeErrors too (a payload key refused): already said clearly
    except RuntimeError as exc:  # the SDK's "cannot connect"
        raise Unavailable(
            f"cannot reach Temporal at {temporal.address} ({exc}); start `dreamkeeper dev`, "
            "or pass --direct to write the store without the worker"
        ) from None
