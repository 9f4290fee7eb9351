"""A batch on the wire: its body read (``read_batch``: decoded, a refusal returned, not
raised, each entry read into an ``OperationRequest`` as the single request's route would
read it, or its permanent refusal), and the answer spliced from the stored texts and sent
in slices.
``pigeon.server.app``, the FastAPI and the Django batch views put these around an
``Intake``; a single request's reading and rendering are ``pigeon.server.messages``'.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from starlette.responses import Response, StreamingResponse

from pigeon.core import strictjson
from pigeon.core.strictjson import JsonRefused, TooManyItems
from pigeon.core.wire import MAX_BATCH, unquote_etag
from pigeon.server import contract
from pigeon.server.fingerprint import InvalidIdempotencyKey, check_key
from pigeon.server.identifiers import (
    MAX_ENTITY_LENGTH,
    MAX_ETAG_LENGTH,
    MAX_METHOD_LENGTH,
    MAX_OPERATION_ID_LENGTH,
    MAX_PATH_LENGTH,
    InvalidIdentifier,
    is_token,
    path_problem,
    token,
)
from pigeon.server.intake import OperationRequest
from pigeon.server.messages import bad_json, bad_request, read_clock
from pigeon.server.results import OpResult

_ENTRY_TOKENS = (
    ("id", MAX_OPERATION_ID_LENGTH),
    ("entity", MAX_ENTITY_LENGTH),
    ("if_match", MAX_ETAG_LENGTH),
)


# Paths already read (a batch's creates share one): at most 1024 of at most 256 characters.
_PATHS: dict[str, tuple[str, str | None]] = {}


def _entry_path(path: str) -> tuple[str, str | None]:
    """A batch entry's path as the single-operation route sees it (ASGI gives it
    percent-decoded, the query apart, which handlers never see): the same operation must
    reach the same entity, and have the same fingerprint, alone or in a batch. And why it
    is refused (``path_problem``: the rule every request's path meets, ``PathCheck``)."""
    known = _PATHS.get(path)
    if known is None:
        raw = urlsplit(path).path
        decoded = unquote(raw)
        known = decoded, path_problem(decoded, raw)
        if len(path) <= 256:
            if len(_PATHS) >= 1024:
                _PATHS.clear()
            _PATHS[path] = known
    return known


# What the published BatchOperation asks beyond the checks of ``parse_batch_entry``: no
# other field, a method, and text or null in each optional field those checks read only
# when it is truthy (a 0, a false or a list is neither). An entry that holds to these is
# inside the schema, whose check (~4.5 us an entry, a third of reading a batch) runs for
# any other one; tests/server/test_contract_rules.py holds the two to the same verdicts.
_ENTRY_FIELDS = frozenset(contract.BATCH_OPERATION["properties"])
_TEXT_OR_NULL = (str, type(None))


def _text_or_null(entry: dict[str, Any]) -> bool:
    """Text or null (or nothing) in "id", "type", "entity" and "if_match" (each spelled
    out: a loop over them cost twice as much, on every entry)."""
    get = entry.get
    return (
        type(get("id")) in _TEXT_OR_NULL
        and type(get("type")) in _TEXT_OR_NULL
        and type(get("entity")) in _TEXT_OR_NULL
        and type(get("if_match")) in _TEXT_OR_NULL
    )


def _tokens(entry: dict[str, Any], index: int) -> tuple[str | None, str | None, str | None]:
    """The entry's operation id, entity and If-Match, each None when not given ("" or
    null), or ``InvalidIdentifier``. The entity names the effect in the ledger, whose
    index on it PostgreSQL cannot fill with a few KB: refused here, not failed there on
    every resend."""
    op_id, entity, if_match = entry.get("id"), entry.get("entity"), entry.get("if_match")
    if not (op_id or entity or if_match):  # most entries give none of them
        return None, None, None
    # The edge gives an id and an entity with every entry: told valid at a glance, as
    # `token` would (its error labels, formatted for each value, were half the cost).
    if (
        _given_token(op_id, MAX_OPERATION_ID_LENGTH)
        and _given_token(entity, MAX_ENTITY_LENGTH)
        and _given_token(if_match, MAX_ETAG_LENGTH)
    ):
        return op_id or None, entity or None, if_match or None
    op_id, entity, if_match = (  # one of them refused: ``token`` says why, naming it
        token(value, f"operations[{index}].{name}", limit) if value else None
        for value, (name, limit) in zip((op_id, entity, if_match), _ENTRY_TOKENS, strict=True)
    )
    return op_id, entity, if_match


def _given_token(value: object, limit: int) -> bool:
    """Not given (falsy), or what ``token(value, ..., limit)`` returns unchanged."""
    return not value or is_token(value, limit)


def parse_batch_entry(entry: object, index: int) -> OperationRequest | OpResult:
    """One entry of a batch (see ``pigeon.core.wire``), or its permanent refusal."""
    if not isinstance(entry, dict):
        return bad_request("bad-batch-entry", f"operations[{index}] is not an object")
    try:
        key = check_key(entry.get("idempotency_key"))
    except InvalidIdempotencyKey as exc:
        return bad_request("bad-idempotency-key", f"operations[{index}]: {exc}")
    method, path = entry.get("method"), entry.get("path")
    if (
        not isinstance(method, str)
        or not isinstance(path, str)
        or not path.startswith("/")
        or len(method) > MAX_METHOD_LENGTH
        or len(path) > MAX_PATH_LENGTH
    ):
        return bad_request(
            "bad-batch-entry",
            f"operations[{index}] needs a string method and an absolute path "
            f"(at most {MAX_METHOD_LENGTH} and {MAX_PATH_LENGTH} characters)",
        )
    path, problem = _entry_path(path)
    if problem is not None:
        return bad_request("bad-path", f"operations[{index}]: {problem}")
    clock = read_clock(entry.get("clock"))
    if isinstance(clock, OpResult):
        return clock
    try:
        op_id, entity, if_match = _tokens(entry, index)
    except InvalidIdentifier as exc:
        return bad_request("bad-batch-entry", str(exc))
    if not (method and entry.keys() <= _ENTRY_FIELDS and _text_or_null(entry)):
        refused = contract.entry_refusal(entry, index)  # the published BatchOperation
        if refused is not None:
            return bad_request("bad-batch-entry", refused)
    # In OperationRequest's order (method, path, body, key, operation_id, clock, if_match,
    # entity); no operation id given: the key, as for one request.
    return OperationRequest(
        method.upper(),
        path,
        entry.get("body"),
        key,
        op_id or key,
        clock or None,
        unquote_etag(if_match) if if_match else None,
        entity,
    )


_RESULT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_STRING: Callable[[str], str] = json.encoder.encode_basestring  # _RESULT's, for one string
_RESULTS_AT_ONCE = 64  # results written as one text, then encoded: few copies, few calls


def results_json(ids: Sequence[object], results: list[OpResult]) -> bytearray:
    """The batch's answer, ``{"results": [...]}``, with each result's body spliced in as
    the JSON text it already is (its stored text): decoding a thousand bodies only to
    encode them again doubled the memory and the time of a large batch's answer. Empties
    ``results`` as it goes, so each result's text is let go of once it is encoded."""
    out = bytearray(b'{"results":[')
    results.reverse()
    texts: list[str] = []
    for n, op_id in enumerate(ids):
        if not results:
            break
        result = results.pop()
        # What _RESULT writes of {"id", "status", "replayed", "headers"}, written here a
        # piece at a time: encoding a dict per result took twice as long.
        shown = "null" if op_id is None else _STRING(op_id) if type(op_id) is str else None
        headers = ",".join(
            f"{_STRING(name)}:{_STRING(value)}" for name, value in dict(result.headers).items()
        )
        texts.append(
            f'{"," if n else ""}{{"body":{result.body_text or "null"},'
            f'"id":{_RESULT.encode(op_id) if shown is None else shown},'
            f'"status":{int.__repr__(result.status)},'
            f'"replayed":{"true" if result.replayed else "false"},"headers":{{{headers}}}}}'
        )
        del result
        if len(texts) == _RESULTS_AT_ONCE:
            out += "".join(texts).encode("utf-8")
            texts.clear()
    out += "".join(texts).encode("utf-8")
    out += b"]}"
    return out


_SLICE = 64 << 10


def sent_in_slices(body: bytearray) -> Response:
    """A large JSON answer sent a slice at a time: handed over whole, it was copied whole
    twice more on the way out (the HTTP framing, then the transport's buffer)."""
    if len(body) <= _SLICE:
        return Response(bytes(body), media_type="application/json")

    async def slices() -> AsyncIterator[bytes]:
        for start in range(0, len(body), _SLICE):
            yield bytes(body[start : start + _SLICE])

    headers = {"content-length": str(len(body))}
    return StreamingResponse(slices(), headers=headers, media_type="application/json")


# A batch read: its entries' ids (each given back as it came only when it is one, a
# string: the answer's schema says so) and operations (each parsed, or its refusal).
Batch = tuple[list[str | None], list[OperationRequest | OpResult]]


def read_batch(held: list[Any]) -> Batch | OpResult:
    """The batch whose body is ``held``'s one item (its only reference: the bytes go as
    soon as they are text), or the refusal of the whole body. The entries are decoded
    one by one and counted at each, so a body of millions of tiny entries is refused at
    the ``MAX_BATCH + 1``-th. Tens of milliseconds for 16 MiB: never on an event loop."""
    payload = _decoded(held)
    if isinstance(payload, TooManyItems):
        detail = f"more than {MAX_BATCH} operations, at most {MAX_BATCH}"
        return bad_request("batch-too-large", detail)
    if isinstance(payload, JsonRefused):
        return bad_json("the batch body", payload)
    if not isinstance(payload, dict) or not isinstance(payload.get("operations"), list):
        return bad_request("bad-batch", 'a batch is {"operations": [...]}')
    entries: list[Any] = payload.pop("operations")
    del payload
    ids = [_entry_id(entry) for entry in entries]
    return ids, [parse_batch_entry(entry, i) for i, entry in enumerate(entries)]


def _entry_id(entry: object) -> str | None:
    op_id = entry.get("id") if isinstance(entry, dict) else None
    return op_id if isinstance(op_id, str) else None


def _decoded(held: list[Any]) -> Any:
    """``loads_members`` of the batch, with a refusal returned rather than raised: its
    traceback's frames hold the body's text (16 MiB), and an exception handed from the
    worker thread to the event loop lived on until the garbage collector found it (each
    refused 16 MiB batch kept 16 MiB more, bench/memory_bench.py)."""
    try:
        return strictjson.loads_members(held.pop(), member="operations", max_items=MAX_BATCH)
    except JsonRefused as exc:
        return exc.with_traceback(None)
