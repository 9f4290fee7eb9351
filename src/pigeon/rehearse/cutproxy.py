"""A TCP proxy in front of the app's broker whose connections the rehearsal can cut:
``cut()`` closes every connection through it and refuses new ones until ``restore()``,
so that, as far as the relay can tell, the broker is gone and then back."""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit


class CutProxy:
    """Listens on loopback; forwards each connection to ``(host, port)``."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._cut = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="rehearse-cut-proxy", daemon=True).start()

    @classmethod
    def before(cls, url: str, default_port: int) -> CutProxy:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or default_port)

    def url_for(self, url: str) -> str:
        """``url`` with its host and port this proxy's (its credentials kept)."""
        parts = urlsplit(url)
        auth = parts.netloc.rpartition("@")[0]
        return parts._replace(netloc=f"{auth + '@' if auth else ''}127.0.0.1:{self.port}").geturl()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.listener.close()
