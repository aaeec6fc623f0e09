"""HTTP to a SGLang server through `requests`, with whole-request deadlines and one-line errors.

A socket timeout bounds each read, not the request: a server that sends one byte a second would hold a
reader forever. So every request here has a deadline for all of it (connecting, sending, the headers and
the whole body): a watchdog shuts the request's socket down when the deadline passes, which ends a blocked
read at once. Replies are read up to MAX_REPLY_BYTES.

Connection failures and 502/503/504 are retried (backoff) within the deadline, a timeout is not (the
request may be running: resending would double the wait). Every failure is a `ServerError` naming the URL,
what was sent and what came back, never a traceback. What a reply holds is checked by its reader
(server/replies.py).
"""

from __future__ import annotations

import socket
import sys
import threading
import time

from ..boundary import BadInput, Refused, parse_json

MAX_REPLY_BYTES = 256 << 20
RETRY_STATUS = (502, 503, 504)
_local = threading.local()  # the deadline of the request this thread is making


class ServerError(Refused):
    pass


class ServerTimeout(ServerError):
    """No complete answer within the deadline: the request may still be running on the server (a caller whose
    request changes the server reads its state before saying what happened)."""


class _Deadline:
    """Shuts down the sockets of the connections a request used once `seconds` have passed."""

    def __init__(self, seconds: float):
        self.at = time.monotonic() + seconds
        self.fired = False
        self._conns: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True

    def left(self) -> float:
        return self.at - time.monotonic()

    def attach(self, conn) -> None:
        with self._lock:
            self._conns.append(conn)
            if self.fired:
                _shut(conn)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for c in self._conns:
                _shut(c)

    def __enter__(self):
        _local.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc):
        with self._lock:
            self._timer.cancel()
            self._conns.clear()
        _local.deadline = None
        return False


def _shut(conn) -> None:
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _watched(cls):
    """A urllib3 connection class whose requests register with the calling thread's deadline."""

    class Watched(cls):
        def request(self, *a, **kw):
            d = getattr(_local, "deadline", None)
            if d is not None:
                d.attach(self)
            return super().request(*a, **kw)

    Watched.__name__ = f"Watched{cls.__name__}"
    return Watched


def _session(pool_maxsize: int):
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Pool(HTTPConnectionPool):
        ConnectionCls = _watched(HTTPConnection)

    class TlsPool(HTTPSConnectionPool):
        ConnectionCls = _watched(HTTPSConnection)

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *a, **kw):
            super().init_poolmanager(*a, **kw)
            self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": TlsPool}

    s = requests.Session()
    for scheme in ("http://", "https://"):
        s.mount(scheme, Adapter(max_retries=0, pool_maxsize=pool_maxsize))
    return s


class _Retry(Exception):
    def __init__(self, error: ServerError):
        self.error = error


class Server:
    def __init__(self, url: str, timeout: float = 300.0, retries: int = 3, timeout_flag: str = "--timeout"):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ServerError(f"--url {url!r}: not an http(s) URL (e.g. http://127.0.0.1:30000)")
        self.url, self.timeout, self.retries, self.flag = url.rstrip("/"), timeout, retries, timeout_flag
        self.session = _session(256)
        self.probe = _session(2)  # /health polling retries in its own loop, within its deadline

    def where(self, method: str, path: str) -> str:
        return f"{method} {self.url}{path}"

    def request(
        self,
        method: str,
        path: str,
        payload=None,
        timeout: float | None = None,
        quiet_404=False,
        text=False,
        ok_status: tuple = (),
    ):
        """The reply's JSON (its text with text=True: SGLang's /start_profile answers "Start profiling.");
        all of it within `timeout` seconds (default: the server's). `ok_status`: error statuses whose JSON reply
        is returned like a 200's (SGLang answers a refused weight update with 400 and its reasons)."""
        t = self.timeout if timeout is None else timeout
        with _Deadline(t) as d:
            attempt = 0
            while True:
                try:
                    status, body = self._once(self.session, method, path, payload, d, t)
                    break
                except _Retry as r:
                    attempt += 1
                    pause = 0.5 * 2 ** (attempt - 1)
                    if attempt > self.retries or d.left() < pause + 0.05:
                        raise r.error from None
                    time.sleep(pause)
        where = self.where(method, path)
        if status == 404 and quiet_404:
            return None
        if status >= 400 and status not in ok_status:
            raise ServerError(f"{where}: HTTP {status}: {_text(body)[:300]}")
        if text:
            return _text(body)

        try:
            return parse_json(body, where, "reply", expect=None) if body.strip() else {}
        except BadInput:
            raise ServerError(f"{where}: the reply is not JSON: {_text(body).strip()[:200]!r}") from None

    def _once(self, session, method: str, path: str, payload, d: _Deadline, t: float) -> tuple[int, bytes]:
        """(status, body) of one attempt; _Retry for what may be retried, ServerError otherwise."""
        import requests

        where = self.where(method, path)
        late = ServerTimeout(
            f"{where}: no complete answer within {t:g} s (the server accepts connections but "
            f"does not finish its reply: overloaded, hung, or still starting? see its log; "
            f"{self.flag} sets the wait)"
        )
        left = d.left()
        if left <= 0:
            raise late
        try:
            r = session.request(method, self.url + path, json=payload, timeout=(min(left, 10.0), left), stream=True)
            with r:
                body = _read_capped(r, where)
        except ServerError:
            raise
        except requests.exceptions.RequestException as e:
            if d.fired or isinstance(e, requests.exceptions.ReadTimeout) or "Read timed out" in str(e):
                raise late from None
            if _is_connect_error(e):
                raise _Retry(
                    ServerError(f"{where}: cannot connect ({_short(e)}); is the server running at {self.url}?")
                ) from None
            raise ServerError(f"{where}: {_short(e)}") from None
        if d.fired:
            raise late
        if r.status_code in RETRY_STATUS:
            raise _Retry(ServerError(f"{where}: HTTP {r.status_code}: {_text(body)[:300]}"))
        return r.status_code, body

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw)

    def post(self, path: str, payload: dict, **kw):
        return self.request("POST", path, payload, **kw)

    def server_info(self):
        """GET /get_server_info (/server_info before 0.5.23); None when the server answers neither. What
        it holds is checked by replies.server_args."""
        for path in ("/get_server_info", "/server_info"):
            info = self.get(path, timeout=min(self.timeout, 30.0), quiet_404=True)
            if info is not None:
                return info
        return None

    def wait_healthy(
        self, wait_s: float, poll_s: float = 1.0, flag: str = "--wait-for-server", probe_s: float = 5.0
    ) -> float:
        """Poll GET /health until it answers 200, all within `wait_s` seconds, each probe within `probe_s`;
        one line says it waits when the first probe fails; ServerError naming the last failure after that."""
        import requests

        t0, last, said = time.monotonic(), "no attempt", False
        while True:
            left = wait_s - (time.monotonic() - t0)
            with _Deadline(min(left, probe_s)) as d:
                try:
                    r = self.probe.get(
                        self.url + "/health",
                        stream=True,
                        timeout=(min(max(left, 0.1), probe_s), max(min(left, probe_s), 0.1)),
                    )
                    with r:
                        _read_capped(r, self.where("GET", "/health"), 1 << 16)
                    if r.status_code == 200 and not d.fired:
                        return time.monotonic() - t0
                    last = f"HTTP {r.status_code}" if not d.fired else "connected but no complete answer"
                except requests.exceptions.RequestException as e:
                    last = (
                        f"cannot connect ({_short(e)})"
                        if _is_connect_error(e) and not d.fired
                        else "connected but no complete answer (hung or still starting)"
                    )
                except ServerError as e:
                    last = str(e)
            if time.monotonic() - t0 + poll_s > wait_s:
                raise ServerError(
                    f"GET {self.url}/health: not healthy within {wait_s:g} s: {last} ({flag} sets the wait)"
                )
            if not said:
                print(
                    f"waiting up to {wait_s:g} s for {self.url} to answer GET /health ({last})",
                    file=sys.stderr,
                    flush=True,
                )
                said = True
            time.sleep(poll_s)


def _read_capped(r, where: str, cap: int = MAX_REPLY_BYTES) -> bytes:
    chunks, n = [], 0
    for chunk in r.iter_content(1 << 16):
        n += len(chunk)
        if n > cap:
            raise ServerError(f"{where}: the reply is larger than {cap >> 20} MiB; is this a SGLang server?")
        chunks.append(chunk)
    return b"".join(chunks)


def _is_connect_error(e: BaseException) -> bool:
    import requests
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

    if isinstance(e, requests.exceptions.ConnectTimeout):
        return True
    reason = getattr(e.args[0], "reason", None) if e.args else None
    return isinstance(reason, (ConnectTimeoutError, NewConnectionError)) or "Failed to establish" in str(e)


def _text(body: bytes) -> str:
    return body.decode("utf-8", "replace").strip()


def _short(e: BaseException) -> str:
    s = str(e)
    for marker in ("Caused by ", "Failed to establish a new connection: "):
        if marker in s:
            s = s.split(marker, 1)[1]
    return s.strip("()'\" ")[:200]
