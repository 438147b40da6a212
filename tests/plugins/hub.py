"""A stand-in for the Hugging Face Hub's file API on 127.0.0.1, for `invoke model.pull` tests: exactly the routes
huggingface_hub 1.33's `snapshot_download(repo, revision=<commit>, local_dir=...)` uses, with the headers it
reads (huggingface_hub `file_download.py`: `get_hf_file_metadata`, `http_get`; `hf_api.py`: `list_repo_tree`,
`repo_info`; `utils/_http.py`: `hf_raise_for_status`).

- `GET /api/models/{repo}/revision/{rev}`: repo info (`sha`, `siblings`), for a branch name resolved to the commit;
- `GET /api/models/{repo}/tree/{rev}?recursive=...`: the file listing (`type`, `path`, `size`, `oid` = git blob
  id, `lfs` = {`oid`: SHA-256, `size`, `pointerSize`} for LFS files), one page (no `Link` header);
- `HEAD|GET /{repo}/resolve/{rev}/{path}`: `X-Repo-Commit`, `ETag` (the git blob id; for LFS files also
  `X-Linked-Etag` = the SHA-256 and `X-Linked-Size`), `Content-Length`, `Accept-Ranges`; a `Range: bytes=N-`
  GET is answered 206 with `Content-Range`.
Unknown repositories, revisions and files answer 404 with the `X-Error-Code` huggingface_hub maps to its errors.

Faults, per (repo, path): `cut_once` sends half the body the first time and closes the connection (the client
resumes with a Range request); `corrupt` serves bytes whose hash is not the etag (same length), `corrupt_once`
the first time only; `fail_once` answers the first GET with that status. `log` records (method, repo, path, Range header) of every file request.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from huggingface_hub.utils.sha import git_hash

POINTER_SIZE = 134


@dataclass
class Repo:
    commit: str
    files: dict[str, bytes]

    def is_lfs(self, path: str) -> bool:
        return path.endswith(".safetensors")


@dataclass
class StandInHub:
    repos: dict[str, Repo]
    cut_once: set[tuple[str, str]] = field(default_factory=set)
    corrupt: set[tuple[str, str]] = field(default_factory=set)
    corrupt_once: set[tuple[str, str]] = field(default_factory=set)
    fail_once: dict[tuple[str, str], int] = field(default_factory=dict)
    log: list[tuple[str, str, str, str | None]] = field(default_factory=list)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StandInHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def gets(self, repo: str | None = None) -> list[tuple[str, str | None]]:
        """(path, Range) of every GET of a file, in order."""
        return [(path, rng) for method, name, path, rng in self.log if method == "GET" and repo in (None, name)]

    def take(self, faults: set | dict, key: tuple[str, str]):
        with self._lock:
            if isinstance(faults, dict):
                return faults.pop(key, None)
            if key in faults:
                faults.discard(key)
                return True
            return False


_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<kind>revision|tree)/(?P<rev>[^/?]+)$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


def _handler(hub: StandInHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            self._route(head=False)

        def do_HEAD(self) -> None:
            self._route(head=True)

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _error(self, code: str, head: bool = False) -> None:
            self._send(404, json.dumps({"error": code}).encode(), {"X-Error-Code": code,
                                                                   "Content-Type": "application/json"}, head)

        def _repo(self, name: str, rev: str, head: bool) -> Repo | None:
            repo = hub.repos.get(name)
            if repo is None:
                self._error("RepoNotFound", head)
                return None
            if rev not in (repo.commit, "main"):
                self._error("RevisionNotFound", head)
                return None
            return repo

        def _route(self, head: bool) -> None:
            path = urlsplit(self.path).path
            api = _API.match(path)
            if api and not head:
                repo = self._repo(api["repo"], unquote(api["rev"]), head)
                if repo is not None:
                    self._api(api["repo"], api["kind"], repo)
                return
            resolve = _RESOLVE.match(path)
            if resolve:
                repo = self._repo(resolve["repo"], unquote(resolve["rev"]), head)
                if repo is not None:
                    self._file(resolve["repo"], repo, unquote(resolve["path"]), head)
                return
            self._send(404, b"not found", head=head)

        def _api(self, name: str, kind: str, repo: Repo) -> None:
            if kind == "revision":
                body = {"id": name, "sha": repo.commit, "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
            else:
                body = []
                for path, content in sorted(repo.files.items()):
                    entry = {"type": "file", "path": path, "size": len(content), "oid": git_hash(content)}
                    if repo.is_lfs(path):
                        entry["lfs"] = {"oid": hashlib.sha256(content).hexdigest(), "size": len(content),
                                        "pointerSize": POINTER_SIZE}
                    body.append(entry)
            self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

        def _file(self, name: str, repo: Repo, path: str, head: bool) -> None:
            content = repo.files.get(path)
            if content is None:
                self._error("EntryNotFound", head)
                return
            rng = self.headers.get("Range")
            hub.log.append(("HEAD" if head else "GET", name, path, rng))
            headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{git_hash(content)}"', "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}
            if repo.is_lfs(path):
                headers["X-Linked-Etag"] = f'"{hashlib.sha256(content).hexdigest()}"'
                headers["X-Linked-Size"] = str(len(content))
            if head:
                self._send(200, content, headers, head=True)
                return
            status = hub.take(hub.fail_once, (name, path))
            if status:
                self._send(status, b"stand-in failure", {"Content-Type": "text/plain"})
                return
            if (name, path) in hub.corrupt or hub.take(hub.corrupt_once, (name, path)):
                content = content[:-1] + bytes([content[-1] ^ 0xFF])  # a data byte: sizes and header still agree
            start = 0
            if rng:
                start = int(re.fullmatch(r"bytes=(\d+)-", rng.strip())[1])
                headers["Content-Range"] = f"bytes {start}-{len(content) - 1}/{len(content)}"
            body = content[start:]
            if hub.take(hub.cut_once, (name, path)):
                self.send_response(206 if rng else 200)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # SHUT_RDWR: the client reads a short body
                return
            self._send(206 if rng else 200, body, headers)

    return Handler
