"""schemathesis hooks of the contract test (tests/server/test_fuzz.py): what the document
says in words because no JSON Schema can, taught to the generator.

- An ``Idempotency-Key`` is made once per operation by the client: a generated key that
  is valid is replaced by a fresh one, so that two generated requests never share a key
  (the second would be answered 422 key-reused, rightly).
- ``x-pigeon-path-id``: the body's id, when given, is the path's.
- ``format: yjs-update``: the base64 of a Yjs update (`pigeon.reference.crdt`).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any
from urllib.parse import unquote

import jsonschema
import schemathesis
from hypothesis import strategies as st
from pycrdt import Doc, Text

from pigeon.core.wire import IDEMPOTENCY_KEY
from pigeon.server import contract

_KEY = contract.HEADERS[IDEMPOTENCY_KEY]


def _update(content: str) -> str:
    doc = Doc()
    doc["t"] = text = Text()
    text += content
    return base64.b64encode(doc.get_update()).decode("ascii")


schemathesis.openapi.format("yjs-update", st.sampled_from(["a", "bb", "c d"]).map(_update))


_KEY_VALID = jsonschema.Draft202012Validator(_KEY).is_valid
# A body id the document allows; one it does not (a negative case's) is left as it is.
_ID_VALID = jsonschema.Draft202012Validator(
    {"anyOf": [contract.RESOURCE_ID, contract.INTEGER_ID]}
).is_valid


def prepare(case: Any) -> None:
    """A generated request as a client that follows the words of the document sends it."""
    headers = case.headers
    if (
        headers
        and isinstance(headers.get(IDEMPOTENCY_KEY), str)
        and _KEY_VALID(headers[IDEMPOTENCY_KEY])
    ):
        headers[IDEMPOTENCY_KEY] = uuid.uuid4().hex
    same = case.operation.definition.raw.get("x-pigeon-path-id")
    params = case.path_parameters or {}
    body = case.body
    if same and isinstance(body, dict) and _ID_VALID(body.get(same)) and same in params:
        body[same] = unquote(str(params[same]))  # the case holds it percent-encoded


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """The same for the schemathesis command line (SCHEMATHESIS_HOOKS=contract_hooks)."""
    prepare(case)
