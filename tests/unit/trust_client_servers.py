"""Loopback servers for the client tests: one answering whatever JSON (or bytes) a test sets per route, and
one that trickles its reply a byte at a time and never finishes it. Real sockets, served from threads."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Replies:
    """A server answering `routes[path]` (an object sent as JSON, or bytes sent as they are) with 200; 404
    for other paths. Each POST body is kept in `posts`."""

    def __init__(self, routes: dict | None = None, port: int = 0):
        self.routes = dict(routes or {})
        self.posts: list = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self):
                path = self.path.split("?")[0]
                if path not in outer.routes:
                    data, code = b'{"detail": "Not Found"}', 404
                else:
                    out = outer.routes[path]
                    out = out(outer.posts[-1] if outer.posts else None) if callable(out) else out
                    data, code = (out if isinstance(out, bytes) else json.dumps(out).encode()), 200
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._reply()

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts.append(json.loads(raw or b"{}"))
                self._reply()

        class Srv(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 64

            def handle_error(self, request, client_address):  # a client that gave up: expected here
                pass

        self.httpd = Srv(("127.0.0.1", port), H)
        # a short poll: shutdown() waits for it, once per server (0.5 s by default, thousands of servers a run)
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Trickle:
    """Accepts every connection, reads the request, then sends a reply one byte every `every_s` seconds
    that never ends (headers that go on forever). Paths in `healthy` get a normal 200 {} instead."""

    def __init__(self, every_s: float = 0.2, healthy: tuple = ()):
        self.every_s, self.healthy = every_s, healthy
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            conn.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            path = head.split(b" ", 2)[1].decode()
            if path in self.healthy:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}")
                return self._serve(conn)  # keep-alive: the next request on this connection
            reply = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 10**6
            for i in range(len(reply)):
                if self.stop.is_set():
                    return
                conn.sendall(reply[i : i + 1])
                time.sleep(self.every_s)
        except OSError:
            return
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


def in_thread(fn, *args, limit_s: float):
    """fn(*args) in a daemon thread: (returned, seconds), or (None, limit_s) when it has not returned after
    `limit_s` (a hang; the thread is left behind)."""
    out = {}
    t0 = time.monotonic()
    th = threading.Thread(target=lambda: out.setdefault("rc", fn(*args)), daemon=True)
    th.start()
    th.join(limit_s)
    return out.get("rc"), time.monotonic() - t0
