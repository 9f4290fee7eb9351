"""HTTP spoken on a raw socket, for what no client library sends: a head whose body never
follows, a Content-Length that lies."""

from __future__ import annotations

import socket


def read_response(conn: socket.socket) -> str:
    """One HTTP response read off a raw socket: head and body, as long as its
    Content-Length says, or (chunks and all) until the server closes the connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        assert more, data
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    if b"content-length: " not in head.lower():
        while more := conn.recv(65536):
            body += more
        return (head + b"\r\n\r\n" + body).decode("latin-1")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        more = conn.recv(65536)
        assert more, data
        body += more
    return (head + b"\r\n\r\n" + body).decode("latin-1")
