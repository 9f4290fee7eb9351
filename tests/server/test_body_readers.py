"""Every request body pigeon reads, it reads through ``server.limits.read_buffer``: one
growing buffer, counted against its limit as it arrives. The operations page's forms were
read by hand instead (bytes joined a chunk at a time: quadratic, 0.8 s of the event loop
for a 256 KiB sign-in form sent a byte at a time). A scan of the whole package, so that a
new route cannot read a body another way unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

import pigeon

SOURCE = Path(pigeon.__file__).parent
READER = "server/limits.py"  # read_buffer: the one reader of a request's body
# Starlette's readers of a whole body: each is unbounded and joins what it reads.
WHOLE_BODY = frozenset({"body", "form", "json"})


def body_reads(tree: ast.AST) -> list[int]:
    """Lines that read a request's body themselves: ``async for ... in x.stream()``, or
    ``await x.body()`` / ``x.form()`` / ``x.json()``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFor):
            call = node.iter
            func = call.func if isinstance(call, ast.Call) else None
            if isinstance(func, ast.Attribute) and func.attr == "stream":
                lines.append(node.lineno)
        elif isinstance(node, ast.Await) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr in WHOLE_BODY:
                lines.append(node.lineno)
    return lines


def test_the_scan_finds_each_way_of_reading_a_body() -> None:
    source = """
async def a(request):
    async for chunk in request.stream():
        pass
    await request.body()
    await request.form()
    await request.json()
    response.json()  # httpx's, not awaited: a reply, not a request
"""
    assert body_reads(ast.parse(source)) == [3, 5, 6, 7]


def test_only_read_buffer_reads_a_request_body() -> None:
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        lines = body_reads(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[relative] = lines
    assert set(found) == {READER}, found
