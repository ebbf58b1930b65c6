"""The explorer's local HTTP server: the page, its assets and a small JSON API over one ``Session``.

Standard library only (``http.server.ThreadingHTTPServer``). It binds to 127.0.0.1 on a free port
the system picks, and every URL it answers starts with the session's random token
(``/<token>/``: the page; ``/<token>/assets/<file>``; ``/<token>/api/<verb>``), so another local
user's program or a web page cannot drive it without the URL that ``lockstep explore`` printed.
A request whose ``Host`` header is not this server's loopback address and port (a DNS-rebinding
page that resolved its own name to 127.0.0.1) is refused with 403 before anything else, as is a
POST whose ``Origin`` is another site. Answers carry a Content-Security-Policy that lets the page
load only its own files and talk only to this server, and ``no-store``.

The API (JSON in, JSON out; an error is ``{"error": message}`` with 400, 403, 404, 405, 409 or 413, and
500 for lockstep's own failure, which never prints a traceback on the terminal):

- ``GET api/state``: ``{"document": ...}`` (``lockstep.explore.session``).
- ``POST api/take`` ``{"at": cursor, "action": name, "arguments": {name: value}}``, ``api/back``,
  ``api/forward``, ``api/jump`` ``{"step": n}``, ``api/reset``: the new ``{"document": ...}``.
  A ``take`` at a cursor that has moved is 409.
- ``POST api/export``: the steps so far written as a trace file into the export folder;
  ``{"file": path, "text": its content, "document": ...}``.
"""

from __future__ import annotations

import hmac
import json
import secrets
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lockstep.explore.page import ASSETS, asset, live_page
from lockstep.explore.session import Session, SessionError, StaleRequest
from lockstep.traces.output import OutputError

LOOPBACK = "127.0.0.1"
MAX_BODY = 64 * 1024  # bytes of a request body
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
VERBS = ("take", "back", "forward", "jump", "reset", "export")


class RequestRefused(Exception):
    """A request answered with an error status and message."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ExplorerServer(ThreadingHTTPServer):
    """Serves one session on 127.0.0.1 (``port`` 0: a free port the system picks)."""

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, session: Session, export_directory: Path, port: int = 0) -> None:
        self.session = session
        self.export_directory = export_directory
        self.token = secrets.token_urlsafe(24)
        super().__init__((LOOPBACK, port), ExplorerHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/{self.token}/"

    def allowed_hosts(self) -> tuple[str, ...]:
        return (f"{LOOPBACK}:{self.port}", f"localhost:{self.port}")

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection the browser dropped mid-answer: nothing to report (socketserver would print a traceback)."""


class ExplorerHandler(BaseHTTPRequestHandler):
    """One request: the Host and token checked, then the page, an asset or an API verb."""

    server: ExplorerServer
    protocol_version = "HTTP/1.1"
    server_version = "lockstep-explore"
    sys_version = ""

    def log_message(self, format: str, *arguments: Any) -> None:
        """Requests are not logged (the terminal is the user's)."""

    # ------------------------------------------------------------------------------------ answers
    def _send(self, status: HTTPStatus, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", POLICY)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: HTTPStatus, payload: Any) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def _refuse(self, status: HTTPStatus, message: str) -> None:
        self._json(status, {"error": message})

    # ------------------------------------------------------------------------------------- checks
    def _route(self) -> list[str]:
        """The path after the token, as parts (``RequestRefused`` for a foreign host or a wrong token)."""
        host = self.headers.get("Host", "")
        if host not in self.server.allowed_hosts():
            raise RequestRefused(
                HTTPStatus.FORBIDDEN, f"this explorer answers only at {self.server.allowed_hosts()[0]}"
            )
        parts = urlsplit(self.path).path.split("/")
        token = parts[1] if len(parts) > 1 else ""
        if not hmac.compare_digest(token.encode("utf-8", "replace"), self.server.token.encode("ascii")):
            raise RequestRefused(HTTPStatus.FORBIDDEN, "no such session: use the URL lockstep explore printed")
        return parts[2:]

    def _body(self) -> dict[str, Any]:
        origin = self.headers.get("Origin")
        if origin is not None and origin not in {f"http://{host}" for host in self.server.allowed_hosts()}:
            raise RequestRefused(HTTPStatus.FORBIDDEN, "a request from another site")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "Content-Length is not a number") from None
        if length > MAX_BODY or length < 0:
            raise RequestRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a request body is at most {MAX_BODY} bytes")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "the request body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "the request body must be a JSON object")
        return body

    # ----------------------------------------------------------------------------------- methods
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        try:
            parts = self._route()
            if parts == []:
                self._send(HTTPStatus.MOVED_PERMANENTLY, b"", "text/plain", {"Location": f"/{self.server.token}/"})
            elif parts == [""]:
                self._send(HTTPStatus.OK, live_page().encode("utf-8"), ASSETS["explore.html"])
            elif len(parts) == 2 and parts[0] == "assets" and parts[1] in ASSETS:
                self._send(HTTPStatus.OK, *asset(parts[1]))
            elif parts == ["api", "state"]:
                self._json(HTTPStatus.OK, {"document": self.server.session.document()})
            elif len(parts) == 2 and parts[0] == "api" and parts[1] in VERBS:
                raise RequestRefused(HTTPStatus.METHOD_NOT_ALLOWED, f"api/{parts[1]} takes a POST")
            else:
                raise RequestRefused(HTTPStatus.NOT_FOUND, "no such page")
        except RequestRefused as refused:
            self._refuse(refused.status, str(refused))
        except Exception as error:  # lockstep's own bug: an answer, not a traceback on the user's terminal
            self._refuse(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {type(error).__name__}: {error}")

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_POST(self) -> None:  # noqa: N802
        try:
            parts = self._route()
            if len(parts) != 2 or parts[0] != "api" or parts[1] not in VERBS:
                raise RequestRefused(HTTPStatus.NOT_FOUND, "no such API call")
            body = self._body()
            self._json(HTTPStatus.OK, self._call(parts[1], body))
        except RequestRefused as refused:
            self._refuse(refused.status, str(refused))
        except Exception as error:  # lockstep's own bug: an answer, not a traceback on the user's terminal
            self._refuse(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {type(error).__name__}: {error}")

    def _call(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        session = self.server.session
        answer: dict[str, Any] = {}
        try:
            if verb == "take":
                at, action, arguments = body.get("at"), body.get("action"), body.get("arguments", {})
                if isinstance(at, bool) or not isinstance(at, int) or not isinstance(action, str):
                    raise SessionError('take needs {"at": the page\'s step, "action": a name, "arguments": {...}}')
                session.take(at, action, arguments)
            elif verb == "back":
                session.back()
            elif verb == "forward":
                session.forward()
            elif verb == "jump":
                session.jump(body.get("step"))  # type: ignore[arg-type]  # checked by jump
            elif verb == "reset":
                session.reset()
            else:
                written = session.export(self.server.export_directory)
                answer = {"file": str(written), "text": written.read_text(encoding="utf-8")}
        except StaleRequest as error:
            raise RequestRefused(HTTPStatus.CONFLICT, str(error)) from None
        except (SessionError, OutputError) as error:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, str(error)) from None
        except OSError as error:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"{error.filename or ''}: {error.strerror or error}") from None
        return {**answer, "document": session.document()}
