"""An agent's documents in PostgreSQL (`stores.documents.AgentDocuments`): rows of
`dreamkeeper_documents`, a document being its rows in `seq` order.

`write` replaces a document's rows with one row in one transaction; `append` inserts one
row, so an append is atomic — a crash leaves the row or nothing, never half a line — and
concurrent appends never contend on a lock. A row that does not end with a newline (one
written by hand, or bytes appended without it) is terminated when the document is read,
as the file backend terminates a torn tail before the next append. `rename` moves the
rows with one UPDATE: an append that commits after it lands in a fresh document under
the old name, so the conversation log's rotation loses nothing and reads nothing twice.
"""

from __future__ import annotations

from datetime import datetime

from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import faults
from dreamkeeper.stores.documents import check_name, check_prefix
from dreamkeeper.stores.postgres.database import Database


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
    def __init__(self, db: Database, agent_id: str) -> None:
        self.db = db
        self.agent_id = validate_agent_id(agent_id)

    def read(self, name: str, *, max_bytes: int | None = None) -> bytes | None:
        check_name(name)
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT data FROM dreamkeeper_documents WHERE agent_id = %s AND name = %s "
                "ORDER BY seq",
                (self.agent_id, name),
            ).fetchall()
        if not rows:
            return None
        data = join_rows([bytes(r[0]) for r in rows])
        return data if max_bytes is None else data[: max_bytes + 1]

    def write(self, name: str, data: bytes) -> None:
        check_name(name)
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM dreamkeeper_documents WHERE agent_id = %s AND name = %s",
                (self.agent_id, name),
            )
            faults.crash_point(faults.ROWS_HALF_WRITTEN)
            conn.execute(
                "INSERT INTO dreamkeeper_documents (agent_id, name, data) VALUES (%s, %s, %s)",
                (self.agent_id, name, bytes(data)),
            )

    def append(self, name: str, data: bytes) -> None:
        check_name(name)
        if not data:
            return
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO dreamkeeper_documents (agent_id, name, data) VALUES (%s, %s, %s)",
                (self.agent_id, name, bytes(data)),
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
