"""A real HTTP server on 127.0.0.1 standing in for the Hugging Face hub and
for the Wikimedia dump, SQuAD, GLUE and BookCorpus hosts.

It serves in-memory files with the behaviour the downloaders depend on:
`Range` requests (206 with `Content-Range`), `HEAD`, `ETag`, 404s, a
connection dropped halfway through a body (once per path, to test resume),
a body that stops arriving or trickles in and header lines that trickle in
(to test the stall timeout and the deadline), and the handful of hub
endpoints `huggingface_hub` calls
(docs/reference-facts.md, "Sources: the hub's endpoints"):

    GET  /api/datasets/{repo}/revision/{rev}           (and /api/datasets/{repo}: its main revision)
    GET  /api/datasets/{repo}/tree/{rev}[/{dir}]      (?recursive=...)
    HEAD /datasets/{repo}/resolve/{rev}/{file}         X-Repo-Commit, ETag, Content-Length
    GET  /datasets/{repo}/resolve/{rev}/{file}         404 + X-Error-Code: EntryNotFound if missing

Every request is logged in `requests` so tests can assert what was asked.
"""

import contextlib
import hashlib
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parents[1]


class StandInServer:
    def __init__(self):
        self.files = {}  # "/path" -> bytes
        self.hub = {}  # (repo, revision) -> {"commit": str, "files": {path: bytes}}
        self.hub_models = {}  # (repo, revision) -> {"commit": str, "files": {path: bytes}}
        self.drop_after = {}  # "/path" -> bytes sent before the connection is cut (once)
        self.ignore_range = set()  # paths served whole even when a Range is asked
        self.range_pieces = {}  # "/path" -> the most bytes a 206 answer holds (a server sending a file in pieces)
        # "/path" -> [bytes sent, then no more while the client waits; how many requests get this]
        self.stall_after = {}
        # "/path" -> [seconds between single bytes of the body; how many requests get this]
        self.trickle = {}
        # "/path" -> [seconds between single bytes of header lines after the status line; how many requests get this]
        self.trickle_headers = {}
        # "/path" -> [header bytes sent after the status line before the connection is closed; how many requests]
        self.cut_headers = {}
        self.stopping = threading.Event()  # ends stalled and trickling responses
        self.requests = []  # (method, path, Range header or None)
        self.authorizations = []  # (path, Authorization header or None) of each request
        self.queries = []  # (path, query string) of each request that has one (a signed mirror's ?token=)
        self.headers = {}  # "/path" -> {header: value} sent instead of the computed ones (a bad Content-Length)
        self.redirects = {}  # "/path" -> the Location of a 302 answered to it
        self.served_instead = {}  # "/path" -> the body a GET sends instead of the file's (its ETag still the file's)
        # "/path" -> [(status, {header: value}) answered instead of the file; how many requests get this]
        self.fail_with = {}
        self._lock = threading.Lock()
        self._httpd = None

    # -- content -------------------------------------------------------------

    def add_file(self, path, data):
        self.files["/" + path.lstrip("/")] = bytes(data)

    def add_hub_dataset(self, repo, files, revision="main"):
        """Publish `files` ({path: bytes}) as dataset `repo` at `revision`."""
        commit = hashlib.sha1(repr((repo, revision, sorted(files))).encode()).hexdigest()
        self.hub[(repo, revision)] = {"commit": commit, "files": dict(files)}
        return commit

    def add_hub_model(self, repo, files, revision="main"):
        """Publish `files` ({path: bytes}) as model `repo` (e.g. bert-base-uncased) at `revision`."""
        commit = hashlib.sha1(repr(("model", repo, revision, sorted(files))).encode()).hexdigest()
        self.hub_models[(repo, revision)] = {"commit": commit, "files": dict(files)}
        return commit

    # -- lifecycle -------------------------------------------------------------

    @property
    def url(self):
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self):
        server = self

        class Handler(_Handler):
            stand_in = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def log(self, method, path, range_header):
        with self._lock:
            self.requests.append((method, path, range_header))

    def take_drop(self, path):
        with self._lock:
            return self.drop_after.pop(path, None)

    def take(self, table, path):
        """The first value of table[path] while its count lasts (one request fewer each time), else None."""
        with self._lock:
            entry = table.get(path)
            if entry is None or entry[1] <= 0:
                return None
            entry[1] -= 1
            return entry[0]

    def hub_tree(self, repo, revision):
        entry = self.hub.get((repo, revision))
        if entry is None:
            # a commit hash resolves to the revision it names
            entry = next((e for e in self.hub.values() if e["commit"] == revision), None)
        return entry


def _is_lfs(path):
    return not path.endswith((".md", ".json", ".gitattributes", ".py"))


class _Handler(BaseHTTPRequestHandler):
    stand_in = None
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_HEAD(self):
        self._dispatch(head=True)

    def do_GET(self):
        self._dispatch(head=False)

    def _dispatch(self, head):
        path = urlsplit(self.path).path
        self.stand_in.log(self.command, path, self.headers.get("Range"))
        with self.stand_in._lock:
            self.stand_in.authorizations.append((path, self.headers.get("Authorization")))
            if urlsplit(self.path).query:
                self.stand_in.queries.append((path, urlsplit(self.path).query))
        delay = self.stand_in.take(self.stand_in.trickle_headers, path)
        if delay is not None:
            return self._trickle_headers(delay)
        cut = self.stand_in.take(self.stand_in.cut_headers, path)
        if cut is not None:  # the header section never ends: no blank line, then the connection closes
            self.wfile.write(b"HTTP/1.1 200 OK\r\n" + cut)
            self.close_connection = True
            return None
        failure = self.stand_in.take(self.stand_in.fail_with, path)
        if failure is not None:  # a busy or failing server: 429, 503 (with a Retry-After, say)
            return self._send_json(failure[0], {"error": "stand-in failure"}, failure[1], head=head)
        if path in self.stand_in.redirects:
            self.send_response(302)
            self.send_header("Location", self.stand_in.redirects[path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        parts = [unquote(p) for p in path.split("/")[1:]]
        if parts[:2] == ["api", "datasets"] and len(parts) >= 6:
            return self._hub_api(parts[2] + "/" + parts[3], parts[4], parts[5:])
        if parts[:2] == ["api", "datasets"] and len(parts) == 4:  # the repo's info (HfFileSystem asks first)
            return self._hub_api(parts[2] + "/" + parts[3], "revision", ["main"])
        if parts[:1] == ["datasets"] and len(parts) >= 6 and parts[3] == "resolve":
            return self._hub_resolve(parts[1] + "/" + parts[2], parts[4], "/".join(parts[5:]), head)
        for (repo, revision), entry in self.stand_in.hub_models.items():  # /{repo}/resolve/{revision}/{file}
            prefix = f"/{repo}/resolve/{revision}/"
            if path.startswith(prefix):
                return self._hub_file(entry, path[len(prefix):], path, head)
        data = self.stand_in.files.get(path)
        if data is None:
            return self._send_json(404, {"error": f"{path} not found"})
        return self._send_body(path, data, head, {"ETag": '"%s"' % hashlib.md5(data).hexdigest()})

    def _trickle_headers(self, delay):
        """The status line, then header lines a byte at a time, `delay` seconds apart: never a stall, never an
        end (until the client hangs up, or 30 s)."""
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        self._trickle(itertools.cycle(b"X-Slow: 1\r\n"), delay)

    def _trickle(self, data, delay):
        """The bytes of `data` one at a time, `delay` seconds apart, until the client hangs up (or 30 s)."""
        ends = time.monotonic() + 30
        try:
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                if self.stand_in.stopping.wait(delay) or time.monotonic() > ends:
                    break
        except OSError:  # the client closed the connection
            pass
        self.close_connection = True

    # -- hub -----------------------------------------------------------------

    def _hub_api(self, repo, kind, rest):
        if kind == "revision":
            entry = self.stand_in.hub_tree(repo, "/".join(rest))
            if entry is None:
                return self._send_json(404, {"error": "Revision Not Found"}, {"X-Error-Code": "RevisionNotFound"})
            siblings = [{"rfilename": p} for p in sorted(entry["files"])]
            return self._send_json(
                200,
                {"id": repo, "sha": entry["commit"], "private": False, "gated": False, "disabled": False,
                 "siblings": siblings, "tags": [], "downloads": 0, "likes": 0,
                 "lastModified": "2024-01-01T00:00:00.000Z"},
            )
        if kind == "tree":
            entry = self.stand_in.hub_tree(repo, rest[0])
            if entry is None:
                return self._send_json(404, {"error": "Revision Not Found"}, {"X-Error-Code": "RevisionNotFound"})
            prefix = "/".join(rest[1:]).strip("/")
            recursive = "recursive=true" in self.path.lower() or "recursive=1" in self.path.lower()
            return self._send_json(200, _tree_listing(entry["files"], prefix, recursive))
        return self._send_json(404, {"error": "unknown endpoint"})

    def _hub_resolve(self, repo, revision, filename, head):
        entry = self.stand_in.hub_tree(repo, revision)
        if entry is None:
            return self._send_json(404, {"error": "Revision Not Found"}, {"X-Error-Code": "RevisionNotFound"})
        return self._hub_file(entry, filename, f"/datasets/{repo}/resolve/{revision}/{filename}", head)

    def _hub_file(self, entry, filename, path, head):
        data = entry["files"].get(filename)
        if data is None:
            return self._send_json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"}, head=head)
        etag = hashlib.sha256(data).hexdigest() if _is_lfs(filename) else _git_blob_id(data)
        headers = {"X-Repo-Commit": entry["commit"], "ETag": f'"{etag}"'}
        return self._send_body(path, data, head, headers)

    # -- bodies --------------------------------------------------------------

    def _send_json(self, status, obj, headers=None, head=False):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _send_body(self, path, data, head, headers):
        data = self.stand_in.served_instead.get(path, data)
        start, end = 0, len(data)
        status = 200
        range_header = self.headers.get("Range")
        if range_header and path not in self.stand_in.ignore_range:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header.strip())
            if match:
                start = int(match.group(1))
                end = min(len(data), int(match.group(2)) + 1) if match.group(2) else len(data)
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
                end = min(end, start + self.stand_in.range_pieces.get(path, end))
        self.send_response(status)
        self.send_header("Content-Length", self.stand_in.headers.get(path, {}).get("Content-Length", str(end - start)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if head:
            return
        stall = self.stand_in.take(self.stand_in.stall_after, path)
        if stall is not None:
            # Send part of the body, then nothing: the connection stays open until the client gives up.
            self.wfile.write(data[start:start + stall])
            self.wfile.flush()
            self.stand_in.stopping.wait(30)
            self.close_connection = True
            return
        delay = self.stand_in.take(self.stand_in.trickle, path)
        if delay is not None:
            self._trickle(data[start:end], delay)
            return
        drop = self.stand_in.take_drop(path)
        if drop is not None:
            # Send part of the body, then cut the connection as a failing network would.
            self.wfile.write(data[start:start + drop])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(data[start:end])


def _git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tree_listing(files, prefix, recursive):
    entries, dirs = [], set()
    for path in sorted(files):
        if prefix and not path.startswith(prefix + "/"):
            continue
        rest = path[len(prefix) + 1:] if prefix else path
        if "/" in rest and not recursive:
            dirs.add((prefix + "/" if prefix else "") + rest.split("/")[0])
            continue
        if recursive:
            parts = path.split("/")
            for i in range(len(prefix.split("/")) if prefix else 0, len(parts) - 1):
                dirs.add("/".join(parts[: i + 1]))
        data = files[path]
        entry = {"type": "file", "oid": _git_blob_id(data), "size": len(data), "path": path}
        if _is_lfs(path):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        entries.append(entry)
    listing = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)]
    return listing + entries


# -- an endpoint that never answers -------------------------------------------------------


@contextlib.contextmanager
def silent_endpoint():
    """http://127.0.0.1:<port>: accepts every connection and never answers a byte."""
    server = socket.create_server(("127.0.0.1", 0))
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(socket.timeout, OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        server.close()


# -- fixtures the stand-in serves ----------------------------------------------------


def parquet_bytes(columns):
    """A parquet file (bytes) holding `columns` ({name: list})."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer, row_group_size=1000)
    return buffer.getvalue()


def wiki_dump_xml(pages):
    """A MediaWiki export document; `pages` are dicts with title, id, ns, text and optional redirect."""
    from xml.sax.saxutils import escape

    out = ['<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">',
           "<siteinfo><sitename>Wikipedia</sitename><namespaces><namespace key=\"0\" /></namespaces></siteinfo>"]
    for page in pages:
        redirect = f'<redirect title="{escape(page["redirect"])}" />' if page.get("redirect") else ""
        out.append(
            f"<page><title>{escape(page['title'])}</title><ns>{page.get('ns', 0)}</ns><id>{page['id']}</id>{redirect}"
            f"<revision><id>{page['id']}0</id>"
            f"<text xml:space=\"preserve\">{escape(page['text'])}</text></revision></page>"
        )
    out.append("</mediawiki>")
    return "\n".join(out).encode("utf-8")


# -- running the real CLI against the stand-in -----------------------------------------


def run_cli(*args, **settings):
    """Run `python -m bertprep ARGS`; returns CompletedProcess (text). The hub is the stand-in."""
    return _run([sys.executable, "-m", "bertprep", *map(str, args)], **settings)


def run_python(code, **settings):
    """Run Python `code` in a fresh interpreter (huggingface_hub reads HF_ENDPOINT and HF_HOME when imported) with
    run_cli's environment and `settings`; returns CompletedProcess (text)."""
    return _run([sys.executable, "-c", code], **settings)


def _run(argv, env=None, hf_home=None, server=None, offline=False, cwd=REPO):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "BERTPREP_"))}
    full_env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONPATH=str(REPO))
    if server is not None:
        full_env["HF_ENDPOINT"] = server.url
    if hf_home is not None:
        full_env["HF_HOME"] = str(hf_home)
    if offline:
        full_env["HF_HUB_OFFLINE"] = "1"
    full_env.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=300)


def same_apart_from_workdir(summary, workdir, other, other_workdir):
    """Whether two download summaries agree once each one's work directory is left out of its paths."""
    def relative(value, root):
        return json.loads(json.dumps(value).replace(json.dumps(str(root))[1:-1], "WORKDIR"))

    return relative(dict(summary), workdir) == relative(dict(other), other_workdir)


def ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return json.loads(result.stdout) if result.stdout.lstrip().startswith("{") else result.stdout


def one_line_error(result, code=1):
    assert result.returncode == code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr, result.stderr
    return lines[-1]


def looks_complete(directory):
    """Files that a reader could take for finished output (no .part names, nothing in a .partial/ staging directory)."""
    found = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if d != ".partial"]
        for name in names:
            if not (name.endswith((".part", ".part.json")) or name.startswith(".tmp-")):
                found.append(os.path.relpath(os.path.join(root, name), directory))
    return sorted(found)
