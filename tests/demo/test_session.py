from hypothesis import given
from hypothesis import strategies as st

from pigeon.demo.session import expected_state, offline_session


@given(st.integers(1, 300), st.integers(1, 40), st.integers(0, 10**6))
def test_session_is_legal_and_deterministic(ops: int, notes: int, seed: int) -> None:
    edits = offline_session(ops, notes, seed=seed)
    assert len(edits) == ops
    assert edits == offline_session(ops, notes, seed=seed)
    alive: set[str] = set()
    created: set[str] = set()
    for edit in edits:
        if edit.type == "create":
            assert edit.entity not in created  # a note is created once
            created.add(edit.entity)
            alive.add(edit.entity)
        else:
            assert edit.entity in alive  # never edits or deletes a note that is gone
            if edit.type == "delete":
                alive.remove(edit.entity)
    assert len(created) <= max(notes, 1)
    assert {f"note:{k}" for k in expected_state(edits)} == alive
