"""`serve`'s access tokens in `{data}/access/tokens.json` (`stores.contract.tokens`)."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.tokens import TokenRecord, TokenSnapshot, TokenStoreDamaged
from dreamkeeper.stores.files.agent_files import atomic_write_text, path_lock
from dreamkeeper.stores.files.identity import IDENTITY_FILE, mark_tokens_issued, tokens_issued
from dreamkeeper.stores.tokens import SeenIssued

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 16 * 1_048_576
DIR = "access"
FILE = "tokens.json"
FILE_VERSION = 1


class FileTokenStore:
    """`{data}/access/tokens.json`, replaced atomically under a lock file; readers keep
    the checked snapshot and read the file again only when it, its directory or the
    store identity changed (a few `lstat`s per request), so a revocation is seen by the
    next request."""

    def __init__(self, data_dir: Path | str) -> None:
        self.root = Path(data_dir)
        self._seen_issued = SeenIssued()
        self.path = self.root / DIR / FILE
        self.where = str(self.path)
        self.public_name = f"{DIR}/{FILE} in the data directory"
        self._lock = path_lock(self.root / DIR / ".lock", within=self.root / DIR)
        self._cache: tuple[tuple[Any, ...], TokenSnapshot] | None = None
        self._guard = threading.Lock()

    def _stamp(self) -> tuple[Any, ...]:
        stamps: list[Any] = []
        for path in (self.path, self.path.parent, self.root / IDENTITY_FILE):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                stamps.append(None)
                continue
            stamps.append((st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        return tuple(stamps)

    def snapshot(self) -> TokenSnapshot:
        stamp = self._stamp()
        with self._guard:
            if self._cache is not None and self._cache[0] == stamp:
                return self._cache[1]
            found = self._seen_issued.check(self._read(), self.where)
            if found.damage and (self._cache is None or self._cache[1].damage != found.damage):
                log.error("access tokens damaged: %s", found.damage)
            self._cache = (stamp, found)
            return found

    def _read(self) -> TokenSnapshot:
        try:
            marked = tokens_issued(self.root)
        except InvalidInput as exc:
            return TokenSnapshot({}, True, f"cannot tell whether tokens were issued here: {exc}")
        try:
            folder = os.lstat(self.path.parent)
        except FileNotFoundError:
            folder = None
        if folder is not None and not stat.S_ISDIR(folder.st_mode):
            return TokenSnapshot({}, True, f"{self.path.parent} is not a plain directory")
        try:
            raw = safe_json.load_file(self.path, max_bytes=MAX_FILE_BYTES)
        except FileNotFoundError:
            if marked:
                return TokenSnapshot(
                    {}, True, f"{self.path} is missing, but tokens were issued here"
                )
            return TokenSnapshot()
        except (OSError, ValueError) as exc:
            return TokenSnapshot({}, True, f"{self.path} cannot be read ({exc})")
        records, damage = parse_token_file(raw)
        if damage is None and not records:
            damage = "it holds no token, but tokens were issued here"
        if damage is not None:
            return TokenSnapshot(records, True, f"{self.path}: {damage}")
        if not marked:
            # Tokens issued before the store identity kept the mark: keep it now, so
            # losing this file later does not open the server.
            try:
                mark_tokens_issued(self.root)
            except (OSError, InvalidInput) as exc:
                log.warning("cannot record in the store identity that tokens are issued: %s", exc)
        return TokenSnapshot(records, True)

    def _save(self, records: dict[str, TokenRecord]) -> None:
        body = {"version": FILE_VERSION, "tokens": [r.to_json() for r in records.values()]}
        atomic_write_text(self.path, json.dumps(body, indent=2) + "\n", within=self.root / DIR)
        os.chmod(self.path, 0o600)

    def _writable(self) -> dict[str, TokenRecord]:
        """The records to write the next file from; refuses to write over damage that an
        operator could still repair (a file that is there but does not check out)."""
        found = self.snapshot()
        if found.damage is None:
            return dict(found.records)
        if os.path.lexists(self.path):
            raise TokenStoreDamaged(
                f"{found.damage}. Nothing was changed: repair it or restore it from a backup "
                f"(or move it away and issue new tokens: every token it held then stops "
                "working)"
            )
        return {}  # gone: a new file, and the tokens it held stay unusable

    def add(self, record: TokenRecord) -> None:
        with self._lock.hold():
            records = self._writable()
            if record.id in records:
                raise InvalidInput(f"token {record.id} exists already")
            mark_tokens_issued(self.root)  # first: from here on the server stays closed
            records[record.id] = record
            self._save(records)

    def find(self, token_id: str) -> TokenRecord | None:
        return self.snapshot().find(token_id)

    def all(self) -> list[TokenRecord]:
        return self.snapshot().in_order()

    def revoke(self, token_id: str, at: datetime) -> TokenRecord | None:
        with self._lock.hold():
            records = self._writable()
            record = records.get(token_id)
            if record is None:
                return None
            if record.active:
                record = replace(record, revoked_at=at)
                records[token_id] = record
                self._save(records)
            return record

    def issued(self) -> bool:
        return self.snapshot().issued

    def mark_issued(self) -> None:
        mark_tokens_issued(self.root)


def parse_token_file(raw: object) -> tuple[dict[str, TokenRecord], str | None]:
    """The records of a token file's JSON, and what is wrong with it (None: nothing). A
    damaged record is left out of the records, and makes the whole file damaged."""
    if not isinstance(raw, dict) or set(raw) != {"version", "tokens"}:
        return {}, 'not a token file (an object with "version" and "tokens")'
    if raw["version"] != FILE_VERSION:
        return {}, f"version {raw['version']!r} is not {FILE_VERSION}"
    items = raw["tokens"]
    if not isinstance(items, list):
        return {}, '"tokens" is not a list'
    records: dict[str, TokenRecord] = {}
    damage = None
    for number, item in enumerate(items, start=1):
        try:
            record = TokenRecord.from_json(item)
        except (ValueError, TypeError) as exc:
            damage = damage or f"token record {number} is damaged ({exc})"
            continue
        if record.id in records:
            damage = damage or f"token {record.id} is in the file twice"
            continue
        records[record.id] = record
    return records, damage
