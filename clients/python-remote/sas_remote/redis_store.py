"""`RedisStore`: the records in Redis (`pip install sas-remote[redis]`).

Each record is one JSON string under `<prefix><operation ID>`, kept for `ttl_seconds` after its
last write. `add` is `SET ... NX EX`: the first writer wins. `swap` and `remove` are short Lua
scripts that compare the stored record's version and write in the same step, so no other
client's write can fall between the check and the write.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sas_remote.store import Record

_SWAP = """
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if cjson.decode(current)['version'] ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1
"""

_REMOVE = """
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if cjson.decode(current)['version'] ~= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


class RedisStore:
    """Records in Redis through `client` (a `redis.Redis`), each kept `ttl_seconds` (7 days by
    default: longer than the scheduler retries one operation) after its last write."""

    def __init__(self, client: Any, *, prefix: str = "sas-remote:", ttl_seconds: int = 7 * 24 * 3600) -> None:
        self._client = client
        self._prefix = prefix
        self._ttl = int(ttl_seconds)
        self._swap = client.register_script(_SWAP)
        self._remove = client.register_script(_REMOVE)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        import redis  # the optional extra: imported only by a remote that uses this store

        return cls(redis.Redis.from_url(url), **options)

    def _name(self, key: str) -> str:
        return self._prefix + key

    @staticmethod
    def _dump(record: Record) -> str:
        return json.dumps(dataclasses.asdict(record), separators=(",", ":"))

    def get(self, key: str) -> Record | None:
        raw = self._client.get(self._name(key))
        if raw is None:
            return None
        return Record(**json.loads(raw))

    def add(self, record: Record) -> bool:
        return bool(self._client.set(self._name(record.key), self._dump(record), nx=True, ex=self._ttl))

    def swap(self, old: Record, new: Record) -> bool:
        return bool(self._swap(keys=[self._name(old.key)], args=[old.version, self._dump(new), self._ttl]))

    def remove(self, old: Record) -> bool:
        return bool(self._remove(keys=[self._name(old.key)], args=[old.version]))
