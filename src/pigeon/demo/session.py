"""A realistic offline editing session on notes, and the state it must leave behind.

Pure code: the session is drawn from a seeded RNG, and `expected_state` applies the RAW
session to a model server. Whatever the queue coalesced, whatever the network did, the
real server must end in exactly this state.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

_WORDS = (
    "milk", "eggs", "call mum", "book dentist", "fix bike", "water plants", "pay rent",
    "renew passport", "buy stamps", "email Anna", "draft report", "back up photos",
    "walk dog", "order paint",
)  # fmt: skip


@dataclass(frozen=True)
class Edit:
    type: str  # create / update / delete
    entity: str  # note:<id>
    payload: dict[str, Any]


def offline_session(operations: int, notes: int, *, seed: int = 0) -> list[Edit]:
    """`operations` edits on at most `notes` notes: mostly typing, a few deletions.

    Every edit is legal for the state it is made in (no update of a deleted note), as a
    real editor would produce.
    """
    rng = random.Random(seed)
    alive: dict[str, dict[str, Any]] = {}
    made = 0
    edits: list[Edit] = []
    while len(edits) < operations:
        roll = rng.random()
        if not alive or (roll < 0.15 and made < notes):
            made += 1
            entity = f"note:{seed}-{made}"
            body = {"title": f"Note {made}", "body": rng.choice(_WORDS)}
            alive[entity] = body
            edits.append(Edit("create", entity, dict(body)))
        elif roll < 0.93 or len(alive) < 2:
            entity = rng.choice(sorted(alive))
            body = dict(alive[entity])
            body["body"] = f"{body['body']} {rng.choice(_WORDS)}"
            alive[entity] = body
            edits.append(Edit("update", entity, dict(body)))
        else:
            entity = rng.choice(sorted(alive))
            del alive[entity]
            edits.append(Edit("delete", entity, {}))
    return edits


def expected_state(edits: list[Edit]) -> dict[str, dict[str, Any]]:
    """The notes a server holds after applying `edits` one by one, keyed by note id."""
    state: dict[str, dict[str, Any]] = {}
    for edit in edits:
        note_id = edit.entity.split(":", 1)[1]
        if edit.type == "delete":
            state.pop(note_id, None)
        else:
            state[note_id] = {"title": edit.payload["title"], "body": edit.payload["body"]}
    return state
