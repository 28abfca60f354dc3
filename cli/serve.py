"""The long-running processes: `worker` (the Temporal worker alone), `serve` (the worker
plus the memory service: HTTP API, MCP, metrics), `mcp` (the memory tools over stdio),
and the side servers `codec-server` and `embed-server`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses

from dreamkeeper.cli.common import Subparsers, add_bind, require_free_port, service_settings
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import StoreSettings, TemporalSettings

RECLAIM_HELP = "take over a task queue claimed by another data directory"


def worker(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.worker import runtime

    asyncio.run(runtime.run_worker(settings, TemporalSettings.from_env(), reclaim=args.reclaim))
    return 0


def serve(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.service.runtime import run_serve

    service = service_settings(args)
    if args.no_worker:
        service = dataclasses.replace(service, worker=False)
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


def embed_server(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.service.embedding_server import LocalModelMissing, serve

    try:
        serve(args.host, args.port)
    except LocalModelMissing as exc:
        raise InvalidInput(str(exc)) from None
    except OSError as exc:
        raise InvalidInput(f"cannot listen on {args.host}:{args.port}: {exc}") from None
    return 0


def codec_server(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.service.codec_server import serve_cli
    from dreamkeeper.stores.backends import open_backend

    # A database holds the agents' data keys: refuse before listening when it does not
    # answer (a data directory has nothing to ask).
    open_backend(settings).check_reachable()
    return serve_cli(args.host, args.port, settings)


def register(sub: Subparsers) -> None:
    """`reports`: a long-running command logs what it does (a one-shot command logs only
    what went wrong)."""
    p = sub.add_parser("worker", help="run the Temporal worker (TEMPORAL_ADDRESS, ...)")
    p.set_defaults(handler=worker, reports=True)
    p.add_argument("--reclaim", action="store_true", help=RECLAIM_HELP)

    p = sub.add_parser(
        "serve", help="run the worker and the memory service (HTTP API, MCP, /metrics)"
    )
    p.set_defaults(handler=serve, reports=True)
    p.add_argument("--host", help="address to bind (env DREAMKEEPER_SERVE_HOST, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (env DREAMKEEPER_SERVE_PORT, 8780)")
    p.add_argument("--reclaim", action="store_true", help=RECLAIM_HELP)
    p.add_argument(
        "--no-worker",
        action="store_true",
        help="answer requests only; `dreamkeeper worker` processes on the task queue run "
        "the workflows (env DREAMKEEPER_SERVE_WORKER=0)",
    )

    p = sub.add_parser("mcp", help="the memory tools as an MCP server over stdio (--agent)")
    p.set_defaults(handler=mcp_stdio)
    p.add_argument("--session", default="mcp", help="the session id the tools work in")

    p = sub.add_parser(
        "embed-server", help="serve local embeddings (extra: dreamkeeper[local-embeddings])"
    )
    p.set_defaults(handler=embed_server, reports=True)
    add_bind(p, 8765)

    p = sub.add_parser("codec-server", help="decrypt payloads for the Temporal UI and CLI")
    p.set_defaults(handler=codec_server, reports=True)
    add_bind(p, 8081)
