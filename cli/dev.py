"""Trying Dreamkeeper on one machine: `dev` (a local Temporal dev server, the payload
codec for its UI, and `serve` on it; with --demo the worker and a narrated tour instead)
and `demo` (an offline tour of the store, no Temporal)."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from dataclasses import replace

from temporalio.client import Client

from dreamkeeper.cli.common import Subparsers, require_free_port, service_settings
from dreamkeeper.cli.serve import RECLAIM_HELP
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import ServiceSettings, StoreSettings, TemporalSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.worker.runtime import (
    DEV_GRPC_PORT,
    DEV_UI_PORT,
    PortTaken,
    run_worker,
    start_dev_server,
    wait_for_server,
)
from dreamkeeper.worker.schedules import schedule_id_for


async def run_dev(
    store: StoreSettings,
    temporal: TemporalSettings,
    *,
    demo: bool = False,
    service: ServiceSettings | None = None,
    grpc_port: int | None = None,
    ui_port: int | None = None,
    reclaim: bool = False,
) -> None:
    """The dev server, then `serve` on it (`service` given, no demo) or the worker alone."""
    from dreamkeeper.service.codec_server import DevCodecServer

    # Before the dev server starts: a database at the wrong schema is refused at once.
    open_backend(store).check_ready()
    grpc_port = grpc_port or DEV_GRPC_PORT
    ui_port = ui_port or DEV_UI_PORT
    codec = DevCodecServer(
        store.data_dir,
        (f"http://localhost:{ui_port}", f"http://127.0.0.1:{ui_port}"),
        database_url=store.database_url,
    )
    try:
        proc = start_dev_server(
            store.data_dir, ui_codec_endpoint=codec.endpoint, grpc_port=grpc_port, ui_port=ui_port
        )
    except BaseException:
        codec.close()
        raise
    try:
        address = f"127.0.0.1:{grpc_port}"
        await wait_for_server(address, proc)
        print(f"Temporal dev server: {address}  (UI http://localhost:{ui_port})")
        print(f"Data: {store.data_dir.resolve()}  — Ctrl-C stops the worker and the server.")
        print(codec.banner)
        if codec.fallback:
            print(codec.fallback)
        print(codec.cli_hint(schedule_id_for(temporal.task_queue)))
        dev = TemporalSettings(
            address=address,
            namespace="default",
            task_queue=temporal.task_queue,
            dream_cron=temporal.dream_cron,
        )
        ui = f"http://localhost:{ui_port}"
        await _run_on_dev_server(store, dev, demo=demo, service=service, ui=ui, reclaim=reclaim)
    finally:
        _stop_dev_server(proc)
        codec.close()


async def _run_on_dev_server(
    store: StoreSettings,
    dev: TemporalSettings,
    *,
    demo: bool,
    service: ServiceSettings | None,
    ui: str,
    reclaim: bool,
) -> None:
    """The worker with the tour (`demo`), `serve` (`service` given), or the worker alone,
    until stopped."""
    on_ready = None
    if demo:
        from dreamkeeper.cli.tour import tour

        async def on_ready(client: Client) -> None:
            await tour(client, store, dev.task_queue, ui=ui)

    if on_ready is None and service is not None:
        from dreamkeeper.service.runtime import run_serve

        await run_serve(store, dev, service, reclaim=reclaim)  # worker + memory service
    else:
        await run_worker(store, dev, on_ready, reclaim=reclaim)


def _stop_dev_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


def dev(args: argparse.Namespace, settings: StoreSettings) -> int:
    service = service_settings(args)
    for port in (args.temporal_port, args.ui_port, args.serve_port):
        if port is not None and not 0 < port < 65_536:
            raise InvalidInput(f"port {port} is out of range (1-65535)")
    if args.serve_port is not None:
        service = replace(service, port=args.serve_port)
    if not args.demo:  # `serve` runs on the dev server: its port too, before starting it
        require_free_port(service.host, service.port, "--serve-port")
    try:
        asyncio.run(
            run_dev(
                settings,
                TemporalSettings.from_env(),
                demo=args.demo,
                service=service,
                grpc_port=args.temporal_port,
                ui_port=args.ui_port,
                reclaim=args.reclaim,
            )
        )
    except PortTaken as exc:
        raise InvalidInput(
            f"{exc}; or give `dev` other ports: --port (Temporal gRPC), --ui-port (its web UI)"
        ) from None
    return 0


def demo(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.cli.demo import run_demo

    run_demo(keep=args.keep)
    return 0


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "dev",
        help="start a local Temporal dev server (UI :8233) and `serve` on it (worker + API)",
    )
    p.set_defaults(handler=dev, reports=True)
    p.add_argument("--demo", action="store_true", help="run a short tour through the workflows")
    p.add_argument(
        "--port",
        dest="temporal_port",
        type=int,
        help="the dev server's gRPC port (default 7233; the worker connects to it)",
    )
    p.add_argument("--ui-port", type=int, help="the dev server's web UI port (default 8233)")
    p.add_argument("--reclaim", action="store_true", help=RECLAIM_HELP)
    p.add_argument(
        "--serve-port",
        type=int,
        help="the memory service's port (env DREAMKEEPER_SERVE_PORT, default 8780)",
    )

    p = sub.add_parser("demo", help="a short tour against a throwaway store")
    p.set_defaults(handler=demo, reports=True)
    p.add_argument("--keep", action="store_true", help="keep the demo store afterwards")
