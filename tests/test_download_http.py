"""The resumable downloader against a real HTTP server on 127.0.0.1."""

import hashlib
import io
import json
import os
import re
import tarfile
import time

import pytest

from bertprep.errors import DataError, redact
from bertprep.stages.download.http import MAX_TEXT, Limits, SourceDownloads, fetch, fetch_text
from stand_in_servers import StandInServer, ok, one_line_error, run_cli

PAYLOAD = os.urandom(3 * (1 << 20) + 12345)  # several read chunks
MD5 = hashlib.md5(PAYLOAD).hexdigest()


@pytest.fixture
def server():
    with StandInServer() as s:
        s.add_file("files/blob.bin", PAYLOAD)
        yield s


def test_fetch_verifies_size_and_checksums(server, tmp_path):
    dest = str(tmp_path / "blob.bin")
    got = fetch(server.url + "/files/blob.bin", dest, size=len(PAYLOAD), checksums={"md5": MD5})
    assert open(dest, "rb").read() == PAYLOAD
    assert got.sha256 == hashlib.sha256(PAYLOAD).hexdigest() and got.checksums == {"md5": MD5}
    assert got.resumed_at == 0 and got.attempts == 1
    assert sorted(os.listdir(tmp_path)) == ["blob.bin"]


def test_dropped_connection_is_resumed_with_range(server, tmp_path):
    half = len(PAYLOAD) // 2
    server.drop_after["/files/blob.bin"] = half
    got = fetch(server.url + "/files/blob.bin", str(tmp_path / "blob.bin"), checksums={"md5": MD5}, backoff=0.01)
    assert got.attempts == 2
    assert open(tmp_path / "blob.bin", "rb").read() == PAYLOAD
    gets = [r for r in server.requests if r[0] == "GET"]
    assert gets == [("GET", "/files/blob.bin", None), ("GET", "/files/blob.bin", f"bytes={half}-")]


def test_a_resume_answered_in_pieces_is_fetched_to_the_end(server, tmp_path):
    """A server (or a proxy) that answers a resume's Range with a 206 of a piece (`Content-Range: bytes
    1048576-1114111/N`) was taken at its word for the rest: the piece arrived whole, so the download counted as
    complete, and without a published checksum the short file was kept as the download, exit 0. The pieces
    are now asked for one after another, spending no attempt: retries=1 is enough for the 33 here."""
    half, piece = 1 << 20, 1 << 16
    server.drop_after["/files/blob.bin"] = half
    server.range_pieces["/files/blob.bin"] = piece
    got = fetch(server.url + "/files/blob.bin", str(tmp_path / "blob.bin"), retries=1, backoff=0.01)
    assert open(tmp_path / "blob.bin", "rb").read() == PAYLOAD and got.attempts == 2
    ranges = [r[2] for r in server.requests if r[0] == "GET"]
    assert ranges == [None, *(f"bytes={start}-" for start in range(half, len(PAYLOAD), piece))]


def test_interrupted_run_resumes_on_the_next_run(server, tmp_path):
    dest = str(tmp_path / "blob.bin")
    server.drop_after["/files/blob.bin"] = 1 << 20
    with pytest.raises(DataError, match="rerun to resume at byte 1,048,576"):
        fetch(server.url + "/files/blob.bin", dest, checksums={"md5": MD5}, retries=0)
    assert not os.path.exists(dest) and os.path.getsize(dest + ".part") == 1 << 20
    got = fetch(server.url + "/files/blob.bin", dest, checksums={"md5": MD5})
    assert got.resumed_at == 1 << 20 and open(dest, "rb").read() == PAYLOAD
    assert server.requests[-1] == ("GET", "/files/blob.bin", "bytes=1048576-")
    assert sorted(os.listdir(tmp_path)) == ["blob.bin"]


def test_an_interrupted_download_keeps_no_secret_in_its_resume_file(server, tmp_path):
    """The `.part.json` left for a resume held the URL as given, `http://alice:S3cret@HOST/...?token=T0kEnT0kEn`,
    on disk until the download completed (for ever, if it never did). It holds the redacted URL, and still resumes."""
    dest = str(tmp_path / "blob.bin")
    server.drop_after["/files/blob.bin"] = 1 << 20
    url = server.url.replace("http://", "http://alice:S3cret@") + "/files/blob.bin?token=T0kEnT0kEn"
    with pytest.raises(DataError, match="rerun to resume at byte 1,048,576"):
        fetch(url, dest, checksums={"md5": MD5}, retries=0)
    kept = open(dest + ".part.json").read()
    assert "S3cret" not in kept and "T0kEnT0kEn" not in kept, kept
    got = fetch(url, dest, checksums={"md5": MD5})
    assert got.resumed_at == 1 << 20 and open(dest, "rb").read() == PAYLOAD
    assert server.authorizations[-1] == ("/files/blob.bin", "Basic YWxpY2U6UzNjcmV0")  # still sent


def test_server_without_range_support_restarts_from_zero(server, tmp_path):
    server.ignore_range.add("/files/blob.bin")
    server.drop_after["/files/blob.bin"] = 1000
    got = fetch(server.url + "/files/blob.bin", str(tmp_path / "blob.bin"), checksums={"md5": MD5}, backoff=0.01)
    assert got.attempts == 2 and open(tmp_path / "blob.bin", "rb").read() == PAYLOAD


def test_checksum_mismatch_deletes_the_download(server, tmp_path):
    dest = str(tmp_path / "blob.bin")
    with pytest.raises(DataError, match="md5 mismatch: expected 0+ \\(published\\), got " + MD5):
        fetch(server.url + "/files/blob.bin", dest, checksums={"md5": "0" * 32})
    assert os.listdir(tmp_path) == []


def test_size_mismatch_is_an_error(server, tmp_path):
    with pytest.raises(DataError, match="size mismatch"):
        fetch(server.url + "/files/blob.bin", str(tmp_path / "b"), size=len(PAYLOAD) + 1)
    assert os.listdir(tmp_path) == []


def test_404_fails_at_once_without_retrying(server, tmp_path):
    with pytest.raises(DataError, match="missing.bin: HTTP 404"):
        fetch(server.url + "/files/missing.bin", str(tmp_path / "m"), backoff=5)
    assert len(server.requests) == 1 and os.listdir(tmp_path) == []


def test_unreachable_server_is_retried_then_fails(tmp_path):
    with StandInServer() as s:
        url = s.url + "/x"
    with pytest.raises(DataError, match="cannot connect.*gave up after 3 attempts"):
        fetch(url, str(tmp_path / "x"), retries=2, backoff=0.01)


def test_manifest_skips_a_complete_file(server, tmp_path):
    url = server.url + "/files/blob.bin"
    downloads = SourceDownloads(str(tmp_path), "test")
    entry = downloads.get(url, "blob.bin", checksums={"md5": MD5})
    assert entry["md5"] == MD5 and entry["verified"] == ["md5"] and entry["bytes"] == len(PAYLOAD)
    before = len(server.requests)
    again = SourceDownloads(str(tmp_path), "test").get(url, "blob.bin", checksums={"md5": MD5})
    assert again == entry and len(server.requests) == before
    # a truncated file no longer matches its entry and is fetched again
    with open(tmp_path / "blob.bin", "r+b") as f:
        f.truncate(10)
    SourceDownloads(str(tmp_path), "test").get(url, "blob.bin", checksums={"md5": MD5})
    assert len(server.requests) == before + 1 and os.path.getsize(tmp_path / "blob.bin") == len(PAYLOAD)


# -- a connection that stalls or trickles: closed, resumed with Range, and given up on after the retries ----


def test_a_stalled_connection_is_resumed_with_range(server, tmp_path):
    server.stall_after["/files/blob.bin"] = [1 << 20, 1]  # 1 MiB, then silence on the first request
    started = time.monotonic()
    got = fetch(server.url + "/files/blob.bin", str(tmp_path / "blob.bin"), checksums={"md5": MD5}, backoff=0.01,
                limits=Limits(stall=0.5))
    assert time.monotonic() - started < 10
    assert got.attempts == 2 and open(tmp_path / "blob.bin", "rb").read() == PAYLOAD
    gets = [r for r in server.requests if r[0] == "GET"]
    assert gets == [("GET", "/files/blob.bin", None), ("GET", "/files/blob.bin", f"bytes={1 << 20}-")]


def test_a_trickle_past_the_deadline_is_resumed_with_range(server, tmp_path):
    server.trickle["/files/blob.bin"] = [0.02, 1]  # a byte every 20 ms on the first request: never a stall
    got = fetch(server.url + "/files/blob.bin", str(tmp_path / "blob.bin"), checksums={"md5": MD5}, backoff=0.01,
                limits=Limits(stall=0.5, deadline=0.4))
    assert got.attempts == 2 and open(tmp_path / "blob.bin", "rb").read() == PAYLOAD
    first, second = [r for r in server.requests if r[0] == "GET"]
    assert first[2] is None
    resumed_at = int(second[2][len("bytes="):-1])
    assert 1 <= resumed_at <= 200  # what trickled in before the deadline was kept


def test_a_trickle_that_never_ends_fails_in_one_line_after_the_retries(server, tmp_path):
    server.trickle["/files/blob.bin"] = [0.02, 99]
    url = server.url + "/files/blob.bin"
    started = time.monotonic()
    with pytest.raises(DataError) as error:
        fetch(url, str(tmp_path / "blob.bin"), retries=2, backoff=0.01, limits=Limits(stall=0.5, deadline=0.3))
    assert time.monotonic() - started < 10
    message = str(error.value)
    have = os.path.getsize(tmp_path / "blob.bin.part")
    assert "\n" not in message and message == (
        f"{url}: still transferring after the 0.3 s deadline, at byte {have:,} "
        f"(gave up after 3 attempts; rerun to resume at byte {have:,})")
    ranges = [r[2] for r in server.requests if r[0] == "GET"]
    assert len(ranges) == 3 and ranges[0] is None
    assert [int(r[len("bytes="):-1]) for r in ranges[1:]] == sorted(int(r[len("bytes="):-1]) for r in ranges[1:])
    assert not os.path.exists(tmp_path / "blob.bin")


def test_headers_trickled_past_the_deadline_end_the_connection(server, tmp_path):
    """A server that sends its status line, then header lines a byte every 0.3 s (never a stall), is cut at
    the deadline as a trickled body is; only http.client's 100-header limit times the stall bounded it."""
    server.trickle_headers["/files/blob.bin"] = [0.3, 99]
    url = server.url + "/files/blob.bin"
    started = time.monotonic()
    with pytest.raises(DataError) as error:
        fetch(url, str(tmp_path / "blob.bin"), retries=1, backoff=0.01, limits=Limits(stall=1, deadline=1.5))
    assert time.monotonic() - started < 6  # two connections of 1.5 s each
    assert str(error.value) == (f"{url}: still receiving the headers after the 1.5 s deadline "
                                "(gave up after 2 attempts; rerun to resume at byte 0)")
    assert len([r for r in server.requests if r[0] == "GET"]) == 2 and not os.path.exists(tmp_path / "blob.bin")


def test_a_connection_closed_inside_the_headers_is_a_failed_attempt(server, tmp_path):
    """Closed before the blank line that ends the headers, a response was taken whole by http.client (headers cut
    short, a body of no bytes to the close): fetch wrote an empty file and called the download complete."""
    server.cut_headers["/files/blob.bin"] = [b"Content-Type: application/octet-stream\r\nX-Half", 1]
    url = server.url + "/files/blob.bin"
    with pytest.raises(DataError) as error:
        fetch(url, str(tmp_path / "blob.bin"), retries=0)
    assert str(error.value) == (f"{url}: connection failed (HTTPException: the connection closed inside the "
                                "headers) (gave up after 1 attempts; rerun to resume at byte 0)")
    assert not os.path.exists(tmp_path / "blob.bin")
    server.cut_headers["/files/blob.bin"] = [b"X-Half", 1]  # a retry takes the whole file
    fetched = fetch(url, str(tmp_path / "blob.bin"), retries=1, backoff=0.01)
    assert fetched.attempts == 2 and (tmp_path / "blob.bin").read_bytes() == server.files["/files/blob.bin"]


def test_a_stall_that_never_ends_names_the_stall(server, tmp_path):
    server.stall_after["/files/blob.bin"] = [1000, 99]
    url = server.url + "/files/blob.bin"
    with pytest.raises(DataError) as error:
        fetch(url, str(tmp_path / "blob.bin"), retries=1, backoff=0.01, limits=Limits(stall=0.3))
    # the second attempt asked for byte 1,000 on and got nothing more before the stall timeout
    assert str(error.value) == (f"{url}: no byte for 0.3 s at byte 2,000 "
                                "(gave up after 2 attempts; rerun to resume at byte 2,000)")


def test_the_command_line_takes_the_limits(server, tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as archive:
        data = os.urandom(100_000)  # incompressible, so the archive is large enough to stall halfway
        info = tarfile.TarInfo("books_large_p1.txt")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    tarball = buffer.getvalue()
    server.add_file("bc/bookcorpus.tar.bz2", tarball)
    server.stall_after["/bc/bookcorpus.tar.bz2"] = [len(tarball) // 2, 1]
    work = tmp_path / "w"
    ok(run_cli("download", "bookcorpus", "--tarball", "--md5", hashlib.md5(tarball).hexdigest(), "--workdir", work,
               "--base-url", server.url + "/bc", "--stall-timeout", "0.5", "--quiet"))
    gets = [r for r in server.requests if r[0] == "GET"]
    assert gets == [("GET", "/bc/bookcorpus.tar.bz2", None),
                    ("GET", "/bc/bookcorpus.tar.bz2", f"bytes={len(tarball) // 2}-")]
    assert (work / "download/bookcorpus/bookcorpus.tar.bz2").read_bytes() == tarball
    stall = "--stall-timeout: expected a number of seconds above 0 and at most 1e+09, got"
    deadline = "--deadline: expected a number of seconds (0 for none) of at most 1e+09, got"
    for source, flags, expected in (("squad", ["--stall-timeout", "0"], f"{stall} 0"),
                                    ("squad", ["--deadline", "-1"], f"{deadline} -1"),
                                    ("squad", ["--stall-timeout", "inf"], f"{stall} inf"),  # an OverflowError
                                    ("glue", ["--deadline", "-7"], f"{deadline} -7")):  # the hub's: not checked
        line = one_line_error(run_cli("download", source, "--workdir", work, *flags), code=2)
        assert line.endswith(expected)


def test_the_download_options_check_the_limits_once_naming_the_fields():
    """From Python the limits are named as Limits' fields, as other options errors name theirs: `--stall-timeout`
    named a flag Python has not."""
    from bertprep.errors import UsageError
    from bertprep.stages.download import download
    from bertprep.stages.download.squad import SquadOptions

    with pytest.raises(UsageError, match=r"^Limits.stall: expected a number of seconds above 0 and at most 1e\+09, "
                                         r"got 0$"):
        SquadOptions(limits=Limits(stall=0))
    with pytest.raises(UsageError, match=r"^Limits.stall: expected a number of seconds above 0 and at most 1e\+09, "
                                         r"got nan$"):
        download("squad", limits=Limits(stall=float("nan")))
    with pytest.raises(UsageError, match=r"^Limits.deadline: expected a number of seconds \(0 for none\) of at most "
                                         r"1e\+09, got -1$"):
        download("squad", limits=Limits(deadline=-1))
    with pytest.raises(UsageError,
                       match="^unknown download source 'squad2'; known: wikipedia, bookcorpus, squad, glue, "
                             "pretrained$"):
        download("squad2")


@pytest.mark.parametrize("source, fields", [("wikipedia", {}), ("wikipedia", {"dump": "latest"}), ("bookcorpus", {}),
                                            ("glue", {}), ("squad", {"from_hub": True}),
                                            ("pretrained", {"model": "bert-base-uncased"})])
@pytest.mark.parametrize("limits, expected", [
    (Limits(stall=-1), "Limits.stall: expected a number of seconds above 0 and at most 1e+09, got -1"),
    (Limits(stall=float("inf")), "Limits.stall: expected a number of seconds above 0 and at most 1e+09, got inf"),
    (Limits(deadline=-7), "Limits.deadline: expected a number of seconds (0 for none) of at most 1e+09, got -7")],
    ids=["stall -1", "stall inf", "deadline -7"])
def test_every_source_checks_its_limits_before_any_request(server, tmp_path, source, fields, limits, expected):
    """The hub's sources (and Wikipedia without --dump) took any limits from Python and went on to the network,
    where the command line refuses them for every source."""
    from bertprep.errors import UsageError
    from bertprep.stages.download import download

    with pytest.raises(UsageError, match=f"^{re.escape(expected)}$"):
        download(source, workdir=tmp_path / "w", base_url=server.url, limits=limits, **fields)
    with pytest.raises(UsageError, match=f"^{re.escape(expected)}$"):
        fetch(server.url + "/files/blob.bin", str(tmp_path / "blob.bin"), limits=limits)
    assert server.requests == [] and os.listdir(tmp_path) == []


# ---------------------------------------------------------------- hostile servers and mirrors


def test_a_mirror_with_a_password_is_sent_basic_auth_and_the_password_is_never_kept(server, tmp_path):
    """urllib looked the host up as "alice:S3cret@127.0.0.1" and failed after a minute of retries; the URL, secret
    and all, was what manifests recorded and notes printed."""
    url = server.url.replace("http://", "http://alice:S3cret@") + "/files/blob.bin"
    downloads = SourceDownloads(str(tmp_path / "d"), "test")
    entry = downloads.get(url, "blob.bin", checksums={"md5": MD5})
    assert open(tmp_path / "d" / "blob.bin", "rb").read() == PAYLOAD
    assert server.authorizations == [("/files/blob.bin", "Basic YWxpY2U6UzNjcmV0")]  # base64 of alice:S3cret
    assert "S3cret" not in (tmp_path / "d" / "manifest.json").read_text() and "S3cret" not in str(entry)
    assert downloads.is_complete("blob.bin", url)  # the manifest's redacted URL still names this download


def test_a_mirror_url_with_secret_parameters_of_any_name_is_never_printed(server, tmp_path):
    """Only parameters named exactly token=, key=, secret=, ... were redacted: a mirror's `?access_key=...` or
    `&client_secret=...` (underscored names, as many signed URLs have them) were printed whole in the error line."""
    base = server.url + "/squad?access_key=AcCeSsKeY123&client_secret=ClIeNtSeCrEt&private-token=PrIvTok"
    result = run_cli("download", "squad", "--workdir", tmp_path / "w", "--version", "1.1", "--base-url", base,
                     "--eval-base-url", base)
    line = one_line_error(result)
    assert line.endswith("HTTP 404 Not Found") and "access_key=***" in line, line
    for secret in ("AcCeSsKeY123", "ClIeNtSeCrEt", "PrIvTok"):
        assert secret not in result.stdout + result.stderr, result.stderr


def test_a_signed_mirror_url_takes_the_file_names_into_its_path_and_its_query_is_never_kept(server, tmp_path):
    """`--base-url http://HOST/bc?token=T0kEnT0kEn`, a signed mirror's URL, was joined as text: the file name went
    into the query (`/bc?token=T0kEnT0kEn/bookcorpus.tar.bz2`), the directory itself was asked for, and the error
    read `http://HOST/bc?token=*** HTTP 404 Not Found`, no file named. The name joins the path, the query follows
    it to the server, and no line or file the run writes holds the token."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as archive:
        info = tarfile.TarInfo("books_large_p1.txt")
        info.size = 6
        archive.addfile(info, io.BytesIO(b"a\nb\nc\n"))
    server.add_file("bc/bookcorpus.tar.bz2", buffer.getvalue())
    work = tmp_path / "w"
    result = run_cli("download", "bookcorpus", "--tarball", "--md5", hashlib.md5(buffer.getvalue()).hexdigest(),
                     "--workdir", work, "--base-url", server.url + "/bc/?token=T0kEnT0kEn", "--json")
    summary = ok(result)
    assert server.queries == [("/bc/bookcorpus.tar.bz2", "token=T0kEnT0kEn")]
    assert summary["documents"] == 1 and "T0kEnT0kEn" not in result.stdout + result.stderr
    manifest = json.loads((work / "download/bookcorpus/manifest.json").read_text())
    assert manifest["files"]["bookcorpus.tar.bz2"]["url"] == server.url + "/bc/bookcorpus.tar.bz2?token=***"
    assert not [path for path in work.rglob("*") if path.is_file() and b"T0kEnT0kEn" in path.read_bytes()]
    line = one_line_error(run_cli("download", "squad", "--workdir", work, "--version", "1.1",
                                  "--base-url", server.url + "/squad?token=T0kEnT0kEn"))
    assert line.endswith(f"{server.url}/squad/train-v1.1.json?token=***: HTTP 404 Not Found"), line


def test_a_python_caller_reads_a_download_error_without_the_mirror_secrets(server, tmp_path):
    """The command line redacted the error line as it printed it; `bertprep.download` raised the DataError with
    `http://alice:S3cret@HOST/squad/train-v1.1.json: HTTP 404 Not Found` (or `?token=T0kEnT0kEn`) in its message,
    what a caller's log or traceback then shows."""
    import bertprep
    with_password = server.url.replace("http://", "http://alice:S3cret@") + "/squad"
    for base, secret in ((with_password, "S3cret"), (server.url + "/squad?token=T0kEnT0kEn", "T0kEnT0kEn")):
        with pytest.raises(DataError, match="HTTP 404 Not Found") as failure:
            bertprep.download("squad", workdir=str(tmp_path / "w"), squad_version="1.1", base_url=base)
        assert secret not in str(failure.value) and secret not in repr(failure.value), failure.value


def test_the_repr_of_a_source_options_object_carries_no_mirror_secret():
    """`repr(SquadOptions(base_url="http://alice:S3cret@mirror/squad"))`, what a caller's log line or a traceback's
    locals print, showed the password, and `eval_base_url=...?token=...` the token."""
    import bertprep
    options = [bertprep.SquadOptions(base_url="http://alice:S3cret@mirror/squad",
                                     eval_base_url="https://mirror/eval?token=T0kEnT0kEn"),
               bertprep.PretrainedOptions(model="uncased_L-12_H-768_A-12", base_url="http://alice:S3cret@mirror/"),
               bertprep.GlueOptions(base_url="http://alice:S3cret@mirror"),
               bertprep.WikipediaOptions(base_url="http://alice:S3cret@mirror"),
               bertprep.BookcorpusOptions(base_url="http://alice:S3cret@mirror")]
    for option in options:
        shown = repr(option)
        assert "S3cret" not in shown and "T0kEnT0kEn" not in shown and "base_url='http://mirror" in shown, shown
        assert str(option) == shown and option.base_url.startswith("http://alice:S3cret@")  # the value is kept


def test_a_password_holding_an_at_sign_is_redacted_whole(server, tmp_path):
    """A password with a raw `@` (`alice:p@ssW0rd@host`, which the request splits at its last `@`) was redacted
    up to its first `@` only: the error named `http://ssW0rd@127.0.0.1:PORT/...`, half the password."""
    url = server.url.replace("http://", "http://alice:p@ssW0rd@") + "/files/none.bin"
    with pytest.raises(DataError, match="HTTP 404 Not Found") as failure:
        fetch(url, str(tmp_path / "none.bin"), retries=0)
    assert "ssW0rd" not in str(failure.value) and str(failure.value).startswith(server.url + "/files/none.bin: ")
    assert redact('Invalid bucket name "KEY:p@ssW0rd@bucket"') == 'Invalid bucket name "***@bucket"'  # no scheme


def test_basic_auth_is_not_carried_to_another_host_by_a_redirect(server, tmp_path):
    with StandInServer() as other:
        other.add_file("elsewhere/blob.bin", PAYLOAD)
        server.redirects["/files/moved.bin"] = other.url + "/elsewhere/blob.bin"
        url = server.url.replace("http://", "http://alice:S3cret@") + "/files/moved.bin"
        fetch(url, str(tmp_path / "blob.bin"), checksums={"md5": MD5})
    assert server.authorizations == [("/files/moved.bin", "Basic YWxpY2U6UzNjcmV0")]
    assert other.authorizations == [("/elsewhere/blob.bin", None)]


def test_a_redirect_loop_is_one_line(server, tmp_path):
    server.redirects["/files/a"] = server.url + "/files/b"
    server.redirects["/files/b"] = server.url + "/files/a"
    with pytest.raises(DataError) as failure:
        fetch(server.url + "/files/a", str(tmp_path / "a"))
    assert "\n" not in str(failure.value) and "HTTP 302" in str(failure.value)


def test_a_content_length_that_is_no_number_is_one_line(server, tmp_path):
    server.headers["/files/blob.bin"] = {"Content-Length": "12abc"}
    with pytest.raises(DataError, match=r"/files/blob.bin: the server's Content-Length '12abc' is not a number of "
                                        r"bytes$"):
        fetch(server.url + "/files/blob.bin", str(tmp_path / "blob.bin"))


def test_a_checksum_list_that_is_not_utf8_names_its_line(server, tmp_path):
    sums = tmp_path / "latin1.md5"
    sums.write_bytes(f"{MD5}  blob.bin\n".encode() + b"0" * 32 + b"  caf\xe9.json\n")
    line = one_line_error(run_cli("download", "squad", "--workdir", tmp_path / "w", "--checksums", sums), code=2)
    assert line.endswith(f"{sums}:2: expected '<md5> <file name>' in UTF-8, found bytes that are not UTF-8")


def test_a_checksum_list_saved_with_a_bom_and_crlf_is_read(tmp_path):
    """A list saved by PowerShell's Out-File or Notepad starts with a UTF-8 BOM: its first line, a well-formed
    `<md5>  <name>`, was refused as `LIST:1: expected '<md5> <file name>'`."""
    from bertprep.stages.download.http import read_checksum_list

    sums = tmp_path / "sums.md5"
    sums.write_bytes(b"\xef\xbb\xbf" + f"{MD5}  squad/train-v1.1.json\r\n{'A' * 32} *dev-v1.1.json\r\n".encode())
    assert read_checksum_list(str(sums), "md5") == {"train-v1.1.json": MD5, "dev-v1.1.json": "a" * 32}


def test_a_full_disk_names_the_file_it_could_not_write(server, tmp_path):
    """Under a file-size limit (EFBIG, as ENOSPC takes the same path) the error was "File too large", no path; the
    partial file stays, so a rerun resumes."""
    code = ("import resource, sys; from bertprep.stages.download.http import fetch; "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY)); "
            "from bertprep.errors import DataError\n"
            f"try: fetch({server.url + '/files/blob.bin'!r}, sys.argv[1])\n"
            "except DataError as exc: print(exc)")
    import subprocess
    import sys
    dest = tmp_path / "blob.bin"
    result = subprocess.run([sys.executable, "-c", code, str(dest)], capture_output=True, text=True)
    assert re.fullmatch(f"{re.escape(str(dest))}.part: cannot write at byte [0-9,]+ \\(File too large\\); free space "
                        "and rerun to resume", result.stdout.strip()), (result.stdout, result.stderr)
    assert 0 < os.path.getsize(f"{dest}.part") <= 1 << 20


def test_a_checksum_list_that_is_not_utf8_too_large_or_cut_short_is_one_line_or_fetched_again(server, tmp_path):
    """fetch_text, which reads the dump's md5 list, ended `download wikipedia --dump` with a UnicodeDecodeError
    traceback on a body that is not UTF-8 (a compressed or binary answer), read any body whole into memory (the
    dump itself served at the list's URL), and took a body cut short of its Content-Length for the whole list."""
    server.add_file("enwiki/latest/enwiki-latest-md5sums.txt", b"\xff\xfe<garbled>\n")
    line = one_line_error(run_cli("download", "wikipedia", "--dump", "latest", "--workdir", tmp_path / "w",
                                  "--base-url", server.url))
    assert line.endswith(f"{server.url}/enwiki/latest/enwiki-latest-md5sums.txt: expected a UTF-8 text file (a "
                         "checksum list), got byte 0xff at offset 0, which is not UTF-8"), line
    server.add_file("big.txt", b"x" * (MAX_TEXT + 1))
    with pytest.raises(DataError, match=f"^{re.escape(server.url)}/big.txt: expected a short text file \\(a "
                                        f"checksum list\\), got more than {MAX_TEXT:,} bytes$"):
        fetch_text(server.url + "/big.txt")
    listing = "".join(f"{index:032x}  file-{index}.bz2\n" for index in range(100)).encode()
    server.add_file("md5sums.txt", listing)
    server.drop_after["/md5sums.txt"] = 100
    assert fetch_text(server.url + "/md5sums.txt", backoff=0.01) == listing.decode()
    assert [r for r in server.requests if r[1] == "/md5sums.txt"] == [("GET", "/md5sums.txt", None)] * 2


SIGN_IN_PAGE = b"\xef\xbb\xbf\n  <!DOCTYPE html>\n<html><body>Your link has expired: sign in again</body></html>\n"


def test_an_html_page_served_with_200_for_a_file_is_named_as_one(server, tmp_path):
    """A mirror's error or sign-in page served with 200 (an expired signed URL, a missing file) failed only as
    `md5 mismatch: expected ... (published), got ...`, which reads as a mirror that republished the file, and as
    `no md5 for enwiki-20240101-pages-articles.xml.bz2` in the dump's md5 list. Each now says what came."""
    server.add_file("squad/train-v1.1.json", SIGN_IN_PAGE)
    line = one_line_error(run_cli("download", "squad", "--version", "1.1", "--workdir", tmp_path / "w",
                                  "--base-url", server.url + "/squad"))
    assert line.endswith(f"got {hashlib.md5(SIGN_IN_PAGE).hexdigest()} (an HTML page: the server's error or sign-in "
                         "page, not the file?); the download was deleted"), line
    server.add_file("enwiki/20240101/enwiki-20240101-md5sums.txt", SIGN_IN_PAGE)
    line = one_line_error(run_cli("download", "wikipedia", "--dump", "20240101", "--workdir", tmp_path / "w",
                                  "--base-url", server.url))
    assert line.endswith("no md5 for enwiki-20240101-pages-articles.xml.bz2 (an HTML page: the server's error or "
                         "sign-in page, not the file?)"), line
    server.add_file("files/blob.md5", MD5.encode() + b"  <html>.bin\n")  # a line naming <html> is no page
    with pytest.raises(DataError, match=r"md5 mismatch: expected 0+ \(published\), got [0-9a-f]+; the download"):
        fetch(server.url + "/files/blob.md5", str(tmp_path / "blob.md5"), checksums={"md5": "0" * 32})


def test_a_base_url_that_is_no_url_to_download_from_is_a_usage_error(tmp_path):
    """`--base-url mirror.local/squad` (no scheme) and `http://[::1` ended with a ValueError traceback; `s3://bucket`
    and `http://` (no host) were retried for a minute, then `cannot connect (unknown url type: s3)`, exit 1. The
    flags, the sources' environment variables too, are checked before anything is asked: exit 2."""
    expected = "expected a URL such as https://host/path (http, https, ftp, file), but"
    for source, flag, value, problem in (
            ("squad", "--base-url", "mirror.local/squad", "it has no scheme"),
            ("squad", "--base-url", "http://[::1", "it does not parse (Invalid IPv6 URL)"),
            ("squad", "--eval-base-url", "s3://bucket/eval?token=T0kEnT0kEn", "its scheme is s3:"),
            ("pretrained", "--base-url", "http://", "it names no host"),
            ("glue", "--base-url", "hub.example", "it has no scheme")):
        more = ["--model", "bert-base-uncased"] if source == "pretrained" else []
        result = run_cli("download", source, "--workdir", tmp_path / "w", flag, value, *more)
        shown = value.replace("T0kEnT0kEn", "***")
        assert one_line_error(result, code=2).endswith(f": error: {flag} {shown}: {expected} {problem}")
    result = run_cli("download", "squad", "--workdir", tmp_path / "w", env={"BERTPREP_SQUAD_URL": "mirror/squad"})
    assert one_line_error(result, code=2).endswith(f": error: $BERTPREP_SQUAD_URL mirror/squad: {expected} it has no "
                                                   "scheme")
    assert not (tmp_path / "w" / "download" / "squad" / "v1.1").exists()


@pytest.mark.parametrize("source, flags", [("glue", ["--tasks", "MRPC"]), ("squad", ["--from-hub"]), ("wikipedia", []),
                                           ("bookcorpus", []), ("pretrained", ["--model", "bert-base-uncased"])])
def test_a_hub_endpoint_with_a_query_is_a_usage_error(server, tmp_path, source, flags):
    """A hub endpoint given as a signed mirror's URL, `--base-url http://HOST/?token=T`, had the hub client's paths
    appended after its query, so every request asked for the root: `nyu-mll/glue@main: not reachable at
    http://HOST/?token=*** and not in the cache (... 404 ...)`, exit 1, and for pretrained `not a BERT model at ...`.
    It is refused before any request."""
    result = run_cli("download", source, *flags, "--workdir", tmp_path / "w", "--base-url",
                     server.url + "/?token=T0kEnT0kEn")
    assert one_line_error(result, code=2).endswith(f": error: --base-url {server.url}/?token=***: a hub endpoint takes "
                                                   "no query or fragment (the hub's paths are appended to it); give a "
                                                   "hub token in HF_TOKEN")
    assert server.requests == []
