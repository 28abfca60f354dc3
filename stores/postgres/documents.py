"""An agent's documents in PostgreSQL (`stores.contract.documents.AgentDocuments`): rows of
`dreamkeeper_documents`, a document being its rows in `seq` order.

`write` replaces a document's rows with one row in one transaction; `append` inserts one
row, so an append is atomic — a crash leaves the row or nothing, never half a line — and
concurrent appends never contend on a lock. A row that does not end with a newline (one
written by hand, or bytes appended without it) is terminated when the document is read,
as the file backend terminates a torn tail before the next append. `rename` moves the
rows with one UPDATE: an append that commits after it lands in a fresh document under
the old name, so the conversation log's rotation loses nothing and reads nothing twice.

With a sealer (`stores.postgres.sealing`) every row is sealed with the agent's current data
key, named in the row (`key_id`). The row is inserted only while that key is still the
current one (checked in the inserting statement): a writer that held on to a key a
forget has re-keyed away from asks again, so a re-key converges.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.documents import check_name, check_prefix
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.sealing import DOCUMENT, Sealing, without_key

SEAL_ATTEMPTS = 3

# A row sealed with `key_id`, inserted only while that key is the agent's current one.
_INSERT_SEALED = """
INSERT INTO dreamkeeper_documents (agent_id, name, data, key_id)
SELECT %(agent)s, %(name)s, %(data)s, k.key_id FROM dreamkeeper_agent_keys k
WHERE k.agent_id = %(agent)s AND k.key_id = %(key)s AND k.current
"""


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def join_rows(rows: list[bytes]) -> bytes:
    """A document's rows as one byte string: a row without its final newline is
    terminated when another follows (never glued to the next record)."""
    out = bytearray()
    for data in rows:
        if out and not out.endswith(b"\n"):
            out += b"\n"
        out += data
    return bytes(out)


class PostgresDocuments:
    def __init__(self, db: Database, agent_id: str, *, sealing: Sealing | None = None) -> None:
        self.db = db
        self.agent_id = validate_agent_id(agent_id)
        self.sealing = sealing

    def read(self, name: str, *, max_bytes: int | None = None) -> bytes | None:
        check_name(name)
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT data, key_id FROM dreamkeeper_documents WHERE agent_id = %s "
                "AND name = %s ORDER BY seq",
                (self.agent_id, name),
            ).fetchall()
        if not rows:
            return None
        data = join_rows([self._opened(data, key_id) for data, key_id in rows])
        return data if max_bytes is None else data[: max_bytes + 1]

    def _opened(self, data: bytes, key_id: str | None) -> bytes:
        if key_id is None:
            return bytes(data)
        if self.sealing is None:
            raise without_key(self.db, "no payload key is configured")
        return self.sealing.open(self.agent_id, key_id, DOCUMENT, data)

    def _insert(self, conn: psycopg.Connection, name: str, data: bytes) -> bool:
        """One row of `name`; False when the key it was sealed with is no longer the
        agent's current one (nothing inserted: seal again with the current key)."""
        sealing = self.sealing
        if sealing is None:
            conn.execute(
                "INSERT INTO dreamkeeper_documents (agent_id, name, data) VALUES (%s, %s, %s)",
                (self.agent_id, name, bytes(data)),
            )
            return True
        key = sealing.current(self.agent_id)
        sealed = sealing.seal(self.agent_id, key, DOCUMENT, bytes(data))
        done = conn.execute(
            _INSERT_SEALED,
            {"agent": self.agent_id, "name": name, "data": sealed, "key": key.key_id},
        )
        if done.rowcount == 1:
            return True
        sealing.forget_current(self.agent_id)
        return False

    def write(self, name: str, data: bytes) -> None:
        check_name(name)
        for _ in range(SEAL_ATTEMPTS):
            with self.db.transaction() as conn:
                conn.execute(
                    "DELETE FROM dreamkeeper_documents WHERE agent_id = %s AND name = %s",
                    (self.agent_id, name),
                )
                faults.crash_point(faults.ROWS_HALF_WRITTEN)
                if self._insert(conn, name, data):
                    return
                conn.rollback()
        raise psycopg.errors.ForeignKeyViolation(
            f"the data key of agent {self.agent_id} kept changing while {name} was written"
        )

    def append(self, name: str, data: bytes) -> None:
        check_name(name)
        if not data:
            return
        for _ in range(SEAL_ATTEMPTS):
            with self.db.transaction() as conn:
                if self._insert(conn, name, data):
                    return
        raise psycopg.errors.ForeignKeyViolation(
            f"the data key of agent {self.agent_id} kept changing while {name} was appended"
        )

    def names(self, prefix: str) -> list[str]:
        folder, start = check_prefix(prefix)
        base = "/".join(folder) + "/" if folder else ""
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT DISTINCT name FROM dreamkeeper_documents "
                "WHERE agent_id = %s AND name LIKE %s ESCAPE '\\' "
                "AND strpos(substr(name, %s), '/') = 0 ORDER BY name",
                (self.agent_id, _like_escape(base + start) + "%", len(base) + 1),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def delete(self, name: str) -> bool:
        check_name(name)
        with self.db.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM dreamkeeper_documents WHERE agent_id = %s AND name = %s",
                (self.agent_id, name),
            )
            return cur.rowcount > 0

    def rename(self, name: str, to: str) -> bool:
        check_name(name)
        check_name(to)
        if name == to:
            return self.written(name) is not None
        with self.db.transaction() as conn:
            moved = conn.execute(
                "SELECT 1 FROM dreamkeeper_documents WHERE agent_id = %s AND name = %s LIMIT 1",
                (self.agent_id, name),
            ).fetchone()
            if moved is None:
                return False
            conn.execute(
                "DELETE FROM dreamkeeper_documents WHERE agent_id = %s AND name = %s",
                (self.agent_id, to),
            )
            cur = conn.execute(
                "UPDATE dreamkeeper_documents SET name = %s WHERE agent_id = %s AND name = %s",
                (to, self.agent_id, name),
            )
            return cur.rowcount > 0

    def written(self, name: str) -> datetime | None:
        check_name(name)
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT max(written_at) FROM dreamkeeper_documents "
                "WHERE agent_id = %s AND name = %s",
                (self.agent_id, name),
            ).fetchone()
        return None if row is None or row[0] is None else row[0]

    def location(self, name: str) -> str:
        check_name(name)
        return f"{self.db.location} (agent {self.agent_id}, document {name})"
