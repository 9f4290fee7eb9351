"""Operation ids and idempotency keys: valid RFC 9562 UUIDs, canonical text, distinct."""

from __future__ import annotations

import time
import uuid

from pigeon.core.ids import uuid4, uuid7


def test_uuid7_is_a_canonical_version_7_uuid_carrying_the_time() -> None:
    before = time.time_ns() // 1_000_000
    text = uuid7()
    after = time.time_ns() // 1_000_000
    value = uuid.UUID(text)
    assert str(value) == text  # canonical lower-case 8-4-4-4-12 form
    assert value.version == 7 and value.variant == uuid.RFC_4122
    assert before <= value.int >> 80 <= after


def test_uuid7_sorts_by_millisecond() -> None:
    first = uuid7()
    time.sleep(0.002)
    assert uuid7()[:13] > first[:13]


def test_uuid4_is_a_canonical_random_version_4_uuid() -> None:
    keys = [uuid4() for _ in range(2000)]
    assert len(set(keys)) == len(keys)
    for text in keys:
        value = uuid.UUID(text)
        assert str(value) == text
        assert value.version == 4 and value.variant == uuid.RFC_4122
    # Every one of the 122 random bits takes both values somewhere in 2000 keys.
    fixed = (0xF << 76) | (0b11 << 62)
    ones = 0
    zeros = 0
    for text in keys:
        v = uuid.UUID(text).int
        ones |= v
        zeros |= ~v
    assert ones & zeros & ~fixed & ((1 << 128) - 1) == ((1 << 128) - 1) & ~fixed


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    import os

    uuid4()  # the pool holds unused random bytes now, which the child inherits
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.write(write, (uuid4() + uuid7()).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 200).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = uuid4() + uuid7()
    assert len(child) == len(parent) == 72
    assert child[:36] != parent[:36]  # the keys
    assert child[50:] != parent[50:]  # the random part of the ids
