"""HTTP to a SGLang server through `requests`, with bounded waits and one-line errors.

Connection failures and 502/503/504 are retried (backoff), a read timeout is not (the request may be
running: resending would double the wait). Every failure is a `ServerError` naming the URL, what was
sent and what came back, never a traceback.
"""
from __future__ import annotations

import time

from .cli_common import CliError


class ServerError(CliError):
    pass


class Server:
    def __init__(self, url: str, timeout: float = 300.0, retries: int = 3):
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        if not url.startswith(("http://", "https://")):
            raise ServerError(f"--url {url!r}: not an http(s) URL (e.g. http://127.0.0.1:30000)")
        self.url, self.timeout = url.rstrip("/"), timeout
        self.session = requests.Session()
        retry = Retry(total=retries, connect=retries, read=0, status=retries, backoff_factor=0.5,
                      status_forcelist=(502, 503, 504), allowed_methods=None, raise_on_status=False)
        self.session.mount("http://", HTTPAdapter(max_retries=retry, pool_maxsize=256))
        self.session.mount("https://", HTTPAdapter(max_retries=retry, pool_maxsize=256))
        self.probe = requests.Session()  # /health polling retries in its own loop, within its deadline

    def request(self, method: str, path: str, payload=None, timeout: float | None = None, quiet_404=False,
                text=False):
        """The reply's JSON (its text with text=True: SGLang's /start_profile answers "Start profiling.")."""
        import requests

        where = f"{method} {self.url}{path}"
        t = self.timeout if timeout is None else timeout
        try:
            r = self.session.request(method, self.url + path, json=payload, timeout=(min(t, 10.0), t))
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as e:
            if not isinstance(e, requests.exceptions.ReadTimeout) and "Read timed out" not in str(e):
                raise ServerError(f"{where}: cannot connect ({_short(e)}); is the server running at {self.url}?") from None
            raise ServerError(f"{where}: no answer within {t:g} s (the server accepts connections but does not "
                              f"reply: overloaded, hung, or still starting? see its log; --timeout sets the wait)") from None
        except requests.exceptions.RequestException as e:
            raise ServerError(f"{where}: {_short(e)}") from None
        if r.status_code == 404 and quiet_404:
            return None
        if r.status_code >= 400:
            raise ServerError(f"{where}: HTTP {r.status_code}: {r.text.strip()[:300]}")
        if text:
            return r.text
        try:
            return r.json() if r.content else {}
        except ValueError:
            raise ServerError(f"{where}: the reply is not JSON: {r.text.strip()[:200]!r}") from None

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw)

    def post(self, path: str, payload: dict, **kw):
        return self.request("POST", path, payload, **kw)

    def server_info(self) -> dict | None:
        """GET /get_server_info (/server_info before 0.5.23); None when the server answers neither."""
        for path in ("/get_server_info", "/server_info"):
            info = self.get(path, timeout=min(self.timeout, 30.0), quiet_404=True)
            if info is not None:
                return info
        return None

    def wait_healthy(self, wait_s: float, poll_s: float = 1.0) -> float:
        """Poll GET /health until it answers 200; ServerError naming the last failure after `wait_s` seconds."""
        import requests

        t0, last = time.monotonic(), "no attempt"
        while True:
            left = wait_s - (time.monotonic() - t0)
            try:
                r = self.probe.get(self.url + "/health", timeout=(min(max(left, 0.1), 5.0), max(left, 0.1)))
                if r.status_code == 200:
                    return time.monotonic() - t0
                last = f"HTTP {r.status_code}"
            except requests.exceptions.ReadTimeout:
                last = "connected but no answer (hung or still starting)"
            except requests.exceptions.ConnectionError as e:
                last = f"cannot connect ({_short(e)})"
            if time.monotonic() - t0 + poll_s > wait_s:
                raise ServerError(f"GET {self.url}/health: not healthy within {wait_s:g} s: {last} "
                                  f"(--wait-for-server sets the wait)")
            time.sleep(poll_s)


def _short(e: BaseException) -> str:
    s = str(e)
    for marker in ("Caused by ", "Failed to establish a new connection: "):
        if marker in s:
            s = s.split(marker, 1)[1]
    return s.strip("()'\" ")[:200]
