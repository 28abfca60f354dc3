"""The `dreamkeeper` subcommands of the memory service (#16): serve, mcp, export, import;
and the service settings the CLI's --url, --host and --port override."""

from __future__ import annotations

import argparse
import asyncio
import errno
import socket
import sys
from dataclasses import replace
from typing import Any

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import (
    ServiceSettings,
    StoreSettings,
    TemporalSettings,
    embedding_settings,
)
from dreamkeeper.stores.embedding_client import embedding_client
from dreamkeeper.stores.memory_store import FileMemoryStore


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


def require_free_port(host: str, port: int) -> None:
    """Refuse a port something already listens on, before anything starts: `serve` would
    otherwise start a worker on the live task queue first, then fail to listen."""
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
                    "it, or choose another with --port or DREAMKEEPER_SERVE_PORT"
                ) from None
            raise InvalidInput(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


def serve(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.service.runtime import run_serve

    service = service_settings(args)
    require_free_port(service.host, service.port)
    try:
        asyncio.run(run_serve(settings, TemporalSettings.from_env(), service, reclaim=args.reclaim))
    except OSError as exc:
        raise InvalidInput(f"cannot serve on {service.host}:{service.port}: {exc}") from None
    return 0


def mcp_stdio(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.service.mcp_stdio import run_stdio

    asyncio.run(
        run_stdio(
            settings, TemporalSettings.from_env(), service_settings(args), session=args.session
        )
    )
    return 0


def export_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.stores.transfer import write_export

    store = FileMemoryStore(settings.data_dir, settings.agent_id)
    options = {"include_archived": args.include_archived, "with_vectors": args.with_vectors}
    if args.output is None:
        count = write_export(store, sys.stdout, **options)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                count = write_export(store, out, **options)
        except OSError as exc:
            raise InvalidInput(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"exported {count} memories of agent {settings.agent_id}", file=sys.stderr)
    return 0


def import_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.stores.transfer import apply_import, plan_import
    from dreamkeeper.cli.transfer import read_with_progress

    parsed = read_with_progress(args.file)
    embeddings = embedding_client(embedding_settings())
    store = FileMemoryStore(settings.data_dir, settings.agent_id, embeddings=embeddings)
    if args.dry_run:
        plan = plan_import(store, parsed)
    else:
        plan = apply_import(store, parsed)
    print(plan.summary(dry_run=args.dry_run))
    if args.dry_run:
        for entry_id in plan.create:
            print(f"  + {entry_id}")
        for entry_id in plan.conflicts:
            print(f"  ! {entry_id} (conflict)")
    return 0
