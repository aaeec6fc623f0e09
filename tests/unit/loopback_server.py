"""A loopback HTTP server answering as a SGLang server would, for the swap client and refresh --swap tests."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    """GET /get_server_info answers `info()`; POST /update_weights_from_disk answers `update(body)` -> (status,
    JSON); each POST body is kept, and each GET's path (`gets`). A client that hung up before the answer (its
    timeout) is no error here."""

    def __init__(self, info, update):
        self.info, self.update, self.posts, self.gets = info, update, [], []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, obj):
                data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                outer.gets.append(self.path)
                if self.path == "/get_server_info":
                    self._send(200, outer.info())
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                outer.posts.append(body)
                self._send(*outer.update(body))

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self.httpd = Quiet(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()  # shutdown() waits a poll
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
