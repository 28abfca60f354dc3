"""`dreamkeeper config`: the effective settings (environment, then --data/--agent),
secrets masked."""

from __future__ import annotations

import argparse
import dataclasses
import json

from dreamkeeper.cli.common import Subparsers
from dreamkeeper.core.settings import StoreSettings, describe, load_settings


def config(args: argparse.Namespace, settings: StoreSettings) -> int:
    effective = dataclasses.replace(load_settings(), store=settings)
    from dreamkeeper.client.codec import DATA_DIR_KEY_FILE  # only here: it loads crypto

    sections = describe(effective)
    dev_key = settings.data_dir / DATA_DIR_KEY_FILE
    codec = effective.codec
    if codec.payload_key is None and codec.payload_key_file is None and dev_key.is_file():
        sections["codec"]["payload_key_file"] = f"{dev_key} (the data directory's key)"
    if args.json:
        print(json.dumps(sections, indent=2))
        return 0
    for section, values in sections.items():
        print(f"[{section}]")
        for name, value in values.items():
            print(f"{name} = {value}")
        print()
    return 0


def register(sub: Subparsers) -> None:
    p = sub.add_parser("config", help="print the effective settings (secrets hidden)")
    p.set_defaults(handler=config)
    p.add_argument("--json", action="store_true", help="as JSON, one object per section")
