"""The dream idle check's marks on PostgreSQL (`stores.dream_state.workload`): one row of
`dk_idle_mark` per agent found idle (migration 7), checked for a whole batch of agents
in one statement without opening any agent's store.

The state a mark rests on is what every write changes:
- the agent's counter row in `dk_memory_agent`: every long-term write (entry, vector,
  purge, erase) raises `feed_seq` in its own transaction, and its `xmin` (the
  transaction that wrote the row version) tells a row made again after a whole-agent
  forget from the one before, even at the same `feed_seq`;
- the agent's documents the passes read (ledgers, cluster state, settings): every write,
  append, delete or rename changes the set of (name, seq, written_at) rows, and the
  aggregate is exact, not a sample. The conversation log's documents are left out (a
  rotated log can hold thousands of rows): the live log is looked at every time, and
  any turn in it means work;
- the settings the counts depend on (`settings_key`).
Read in one statement (one snapshot), before the agent's store is read, so a write
committed in between changes the state and the mark written from the older read never
holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

import psycopg

from dreamkeeper.core.dream_payloads import DreamWork
from dreamkeeper.core.models import as_utc
from dreamkeeper.stores.contract.idle_marks import IdleCheck
from dreamkeeper.stores.conversation.conversation_log import LOG
from dreamkeeper.stores.postgres.database import Database

# Per agent of the batch, in order: the counter row (feed_seq, xmin; NULL: no store
# yet), the documents' aggregate, whether turns wait in the live log, and the mark.
_CHECK = """
SELECT q.agent_id, a.feed_seq, a.xmin::text, d.docs,
       EXISTS (
           SELECT 1 FROM dreamkeeper_documents l
           WHERE l.agent_id = q.agent_id AND l.name = %(log)s AND length(l.data) > 0
       ),
       m.state, m.until, m.live, m.held_back
FROM unnest(%(agents)s::text[]) WITH ORDINALITY AS q(agent_id, n)
LEFT JOIN dk_memory_agent a ON a.agent_id = q.agent_id
LEFT JOIN dk_idle_mark m ON m.agent_id = q.agent_id
LEFT JOIN LATERAL (
    SELECT md5(string_agg(name || '/' || seq || '/' || written_at, ',' ORDER BY name, seq))
        AS docs
    FROM dreamkeeper_documents
    WHERE agent_id = q.agent_id AND name NOT LIKE 'conversation-log/%%'
) d ON true
ORDER BY q.n
"""

_MARK = """
INSERT INTO dk_idle_mark AS m (agent_id, state, until, live, held_back)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (agent_id) DO UPDATE SET state = EXCLUDED.state, until = EXCLUDED.until,
    live = EXCLUDED.live, held_back = EXCLUDED.held_back
"""


class PostgresIdleMarks:
    def __init__(self, db: Database) -> None:
        self.db = db

    def check(self, agent_ids: Sequence[str], as_of: datetime, settings: str) -> list[IdleCheck]:
        """Per agent, in order: the state key now (None: the agent has no store yet, so
        no mark) and its work (none) when its mark holds as of `as_of`, else None."""
        rows = self.db.fetch(_CHECK, {"agents": list(agent_ids), "log": LOG})
        found: list[IdleCheck] = []
        for agent_id, seq, xmin, docs, waiting, state, until, live, held_back in rows:
            if seq is None:
                found.append((None, None))
                continue
            key = hashlib.sha256(repr((settings, int(seq), xmin, docs)).encode()).hexdigest()
            holds = (
                state == key
                and not waiting
                and (until is None or as_utc(as_of) < until)
                and live is not None
            )
            work = DreamWork(agent_id=agent_id, live=live, held_back=held_back) if holds else None
            found.append((key, work))
        return found

    def mark(self, agent_id: str, state: str, until: datetime | None, work: DreamWork) -> None:
        """Record the agent idle on `state` until `until`. Nothing when the agent's store
        went meanwhile (a whole-agent forget): there is nothing left to mark."""
        try:
            with self.db.transaction() as conn:
                conn.execute(_MARK, (agent_id, state, until, work.live, work.held_back))
        except psycopg.errors.ForeignKeyViolation:
            return
