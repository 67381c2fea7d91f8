"""A loopback HTTP proxy in front of the test Hub (harness/hub.py), written
for the tests only: it adds the two failures olah cannot make from a local
mirror, a gated repository and a download cut halfway.

Gated: a request under a gated repository's file routes (`/ORG/NAME/resolve/
...`) without `Authorization: Bearer TOKEN` gets the Hub's documented answer,
401 with `X-Error-Code: GatedRepo`, which huggingface_hub raises as
GatedRepoError; with the token it is forwarded. Its API routes stay open, as
on the Hub, where a gated repository's card and file list are public.

Cut: a GET of a file named in `cut` (in any repository) announces the whole
file in Content-Length and closes the connection after half its bytes. The
half is a point in the file, not in each answer: a resumed request (Range)
gets nothing past it either, so the download fails as a server that keeps
dying there would make it fail, rather than completing on the retry.

Everything else, HEAD included, is forwarded as it is, one upstream
connection per request; `Location` headers naming the upstream are
rewritten to the proxy.

`mirror_front` is the same proxy with the repositories' folder, which
`running_hub` puts in front of olah itself: olah 0.5.4, offline with local
mirrors, answers an unknown revision or file as an unknown repository (401
RepoNotFound, or a 500), and `/api/models/ORG/NAME` without a revision as
well. Where the repository is published, the front answers those as the Hub
does (404 RevisionNotFound, 404 EntryNotFound; the default branch).
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from harness.hub_git import BRANCH, has_file, repository_path, resolve

GATED_MESSAGE = (
    "Access to model {repo_id} is restricted. You must have access to it and be"
    " authenticated to access it. Please log in."
)
# Not forwarded in either direction (RFC 9110, 7.6.1), or set here anew.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "date",
        "server",
    }
)
CHUNK_BYTES = 64 * 1024
UPSTREAM_TIMEOUT_S = 60.0
RANGE_START = re.compile(r"bytes=(\d+)-")
# The API routes that name a revision after the repository.
REVISION_ROUTES = ("revision", "tree", "paths-info")


@dataclass(frozen=True)
class Route:
    """What a request asks of one model repository."""

    repo_id: str
    # None: /api/models/ORG/NAME, the default branch.
    revision: str | None
    # The file a resolve route asks for; None for the API.
    file: str | None


def parse_route(path: str) -> Route | None:
    """The model repository a Hub request path is about, if it is one of
    the routes the proxy looks at."""
    parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(path).path.split("/")[1:]]
    if parts[:2] == ["api", "models"] and len(parts) >= 4:
        repo_id = f"{parts[2]}/{parts[3]}"
        if len(parts) == 4:
            return Route(repo_id, None, None)
        if len(parts) >= 6 and parts[4] in REVISION_ROUTES:
            return Route(repo_id, parts[5], None)
        return None
    if parts[:1] == ["models"]:
        parts = parts[1:]
    if len(parts) >= 5 and parts[2] == "resolve":
        return Route(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
    return None


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


@dataclass(frozen=True)
class FrontRules:
    upstream: str
    gated: dict[str, str]
    cut: frozenset[str]
    # The repositories' folder, where the front corrects olah's answers.
    mirrors: Path | None = None

    def refusal(self, route: Route, authorization: str | None) -> Refusal | None:
        """The Hub's error answer to `route`, where the proxy gives one."""
        token = self.gated.get(route.repo_id)
        if route.file is not None and token is not None and authorization != f"Bearer {token}":
            message = GATED_MESSAGE.format(repo_id=route.repo_id)
            return Refusal(401, "GatedRepo", message)
        if self.mirrors is None or route.revision is None:
            return None
        repository = repository_path(route.repo_id, self.mirrors)
        if not (repository / "HEAD").exists():
            return None
        commit = resolve(repository, route.revision)
        if commit is None:
            return Refusal(404, "RevisionNotFound", f"Invalid rev id: {route.revision}")
        if route.file is not None and not has_file(repository, commit, route.file):
            message = f'{route.file} does not exist on "{route.revision}"'
            return Refusal(404, "EntryNotFound", message)
        return None

    def rewritten(self, path: str, route: Route | None) -> str:
        """`path`, or for a published repository's info without a revision,
        the same on the default branch (olah resolves none offline)."""
        if self.mirrors is None or route is None or route.revision is not None:
            return path
        if not (repository_path(route.repo_id, self.mirrors) / "HEAD").exists():
            return path
        split = urllib.parse.urlsplit(path)
        return split._replace(path=f"{split.path}/revision/{BRANCH}").geturl()

    def is_cut(self, method: str, route: Route | None) -> bool:
        return (
            method == "GET"
            and route is not None
            and route.file is not None
            and route.file.rsplit("/", 1)[-1] in self.cut
        )


class _FrontServer(ThreadingHTTPServer):
    rules: FrontRules
    url: str


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _FrontServer

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: object) -> None:
        """Silent: the tests read the client's errors, not an access log."""

    def _handle(self) -> None:
        rules = self.server.rules
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        route = parse_route(self.path)
        refusal = None if route is None else rules.refusal(route, self.headers.get("Authorization"))
        if refusal is not None:
            self._refuse(refusal)
            return
        cut = rules.is_cut(self.command, route)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if cut:
            # The proxy answers the range itself, from the whole file.
            headers = {k: v for k, v in headers.items() if k.lower() != "range"}
        target = urllib.parse.urlsplit(rules.upstream)
        upstream = http.client.HTTPConnection(
            target.hostname or "127.0.0.1", target.port, timeout=UPSTREAM_TIMEOUT_S
        )
        try:
            path = rules.rewritten(self.path, route)
            upstream.request(self.command, path, body=body, headers=headers)
            response = upstream.getresponse()
            if cut and response.status == 200:
                self._send_cut(response)
            else:
                self._relay(response)
        finally:
            upstream.close()

    def _refuse(self, refusal: Refusal) -> None:
        payload = json.dumps({"error": refusal.message}).encode()
        self.send_response(refusal.status)
        self.send_header("X-Error-Code", refusal.code)
        self.send_header("X-Error-Message", refusal.message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _send_headers(self, response: http.client.HTTPResponse, skip: set[str]) -> None:
        for name, value in response.getheaders():
            lowered = name.lower()
            if lowered in HOP_BY_HOP or lowered in skip:
                continue
            if lowered == "location" and value.startswith(self.server.rules.upstream):
                value = self.server.url + value[len(self.server.rules.upstream) :]
            self.send_header(name, value)

    def _relay(self, response: http.client.HTTPResponse) -> None:
        self.send_response(response.status, response.reason)
        announced = response.getheader("Content-Length")
        bodiless = self.command == "HEAD" or response.status in (204, 304)
        chunked = announced is None and not bodiless
        self._send_headers(response, set())
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if bodiless:
            return
        while chunk := response.read1(CHUNK_BYTES):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _send_cut(self, response: http.client.HTTPResponse) -> None:
        whole = response.read()
        half = len(whole) // 2
        match = RANGE_START.match(self.headers.get("Range", ""))
        start = int(match.group(1)) if match else 0
        self.send_response(206 if start else 200)
        self._send_headers(response, {"content-length", "content-range"})
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(whole) - 1}/{len(whole)}")
        self.send_header("Content-Length", str(len(whole) - start))
        self.end_headers()
        self.wfile.write(whole[start:half])
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def _serving(rules: FrontRules) -> Iterator[str]:
    server = _FrontServer(("127.0.0.1", 0), _Handler)
    server.rules = rules
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="hub-front", daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def hub_front(
    upstream: str, gated: dict[str, str] | None = None, cut: set[str] | None = None
) -> Iterator[str]:
    """The proxy on a free loopback port in front of `upstream` (the
    endpoint `running_hub` yields); yields its URL, for HF_ENDPOINT.
    `gated`: repo id -> the token that opens it; `cut`: file names whose
    downloads break halfway."""
    rules = FrontRules(upstream.rstrip("/"), dict(gated or {}), frozenset(cut or ()))
    with _serving(rules) as url:
        yield url


@contextmanager
def mirror_front(upstream: str, mirrors: Path) -> Iterator[str]:
    """The proxy in front of olah at `upstream`, answering for the
    repositories under `mirrors` what olah answers unlike the Hub."""
    with _serving(FrontRules(upstream.rstrip("/"), {}, frozenset(), mirrors)) as url:
        yield url
