"""Redis Streams: one stream per topic (``<prefix><topic>``), each entry carrying the
outbox message id, topic, payload (JSON), creation time and outbox row id.

Dedup: a Lua script sets a marker ``<prefix>seen:<message id>`` (``SET NX EX``) and adds
the entry in the same atomic step, so a re-publication after a crash adds nothing, for
as long as the marker lives (``dedup``, 7 days by default: keep it longer than a row can
stay published-but-unmarked, which is seconds). Entry ids are Redis's own (``*``).

Why not the outbox id as the entry id (``XADD stream <id>-0``, a repeat refused as
"equal or smaller")? On PostgreSQL identity values are handed out at insert, not at
commit: a transaction that commits late makes a row with a *smaller* id visible after a
larger one was published, and Redis would refuse it exactly as it refuses a duplicate:
the row would be lost, or the relay stuck on it. The marker tells the two apart.

The confirmation is the script's reply: the entry is in the primary's memory (with
``appendonly yes`` and ``appendfsync always`` on disk as well; Redis's own settings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pigeon.jobs.publishers import OPTIONS, strip_query, url_options

if TYPE_CHECKING:
    from pigeon.jobs.publishers.messages import Message

# KEYS: stream, marker for each message; ARGV[1]: marker lifetime, then 5 per message.
# Returns how many entries were added (the rest were repeats).
_XADD_ONCE = """
local added = 0
for i = 1, #KEYS, 2 do
  local a = 2 + (i - 1) / 2 * 5
  if redis.call('SET', KEYS[i + 1], '1', 'NX', 'EX', ARGV[1]) then
    redis.call('XADD', KEYS[i], '*', 'message_id', ARGV[a], 'topic', ARGV[a + 1],
               'payload', ARGV[a + 2], 'created_at', ARGV[a + 3], 'outbox_id', ARGV[a + 4])
    added = added + 1
  end
end
return added
"""

DEFAULT_PREFIX = "pigeon:"
DEFAULT_DEDUP = 7 * 86400


class RedisStreamPublisher:
    """Publishes to ``<prefix><topic>``; a message id seen within ``dedup_seconds`` is
    dropped by Redis itself (the script's marker)."""

    def __init__(
        self, client: Any, *, prefix: str = DEFAULT_PREFIX, dedup_seconds: int = DEFAULT_DEDUP
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.dedup_seconds = dedup_seconds
        self._script = client.register_script(_XADD_ONCE)

    def publish(self, message: Message) -> None:
        self.publish_many([message])

    def publish_many(self, messages: Sequence[Message]) -> int:
        """All in one script call: atomic, so either every entry is added (or found to be
        a repeat) or, on a broken connection, the call is repeated whole, in order."""
        keys: list[str] = []
        args: list[Any] = [self.dedup_seconds]
        for m in messages:
            keys += [self.prefix + m.topic, f"{self.prefix}seen:{m.id}"]
            args += [m.id, m.topic, m.body(), repr(m.created_at), "" if m.seq is None else m.seq]
        added = int(self._script(keys=keys, args=args))
        return len(messages) - added

    def close(self) -> None:
        self.client.close()


def from_url(url: str) -> RedisStreamPublisher:
    """``redis://[user:password@]host[:port][/db][?prefix=pigeon:&dedup=SECONDS]``."""
    import redis

    options = url_options(url, OPTIONS["redis"])
    client = redis.Redis.from_url(
        strip_query(url), socket_timeout=5, socket_connect_timeout=3, health_check_interval=30
    )
    return RedisStreamPublisher(
        client,
        prefix=options.get("prefix", DEFAULT_PREFIX),
        dedup_seconds=options.get("dedup", DEFAULT_DEDUP),
    )
