"""`--stall-timeout` bounds the hub sources' requests too (wikipedia, bookcorpus, squad --from-hub, glue, a hub
model), against a real socket on 127.0.0.1 that accepts every connection and never answers, the stand-in hub
trickling its files, and the real huggingface_hub."""

import concurrent.futures
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import early_waits
from stand_in_servers import REPO, StandInServer, ok, parquet_bytes, run_cli, silent_endpoint

HUB_SOURCES = {
    "wikipedia": ["wikipedia"],
    "bookcorpus": ["bookcorpus"],
    "squad --from-hub": ["squad", "--from-hub", "--version", "1.1"],
    "glue": ["glue", "--tasks", "CoLA"],
}


def hub_env(endpoint, hf_home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "BERTPREP_"))}
    env.update(HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=str(REPO), HF_ENDPOINT=endpoint, HF_HOME=str(hf_home))
    return env


def run_all_at_once(argvs, env, limit):
    """name -> (exit code, stderr, seconds it took): each of `argvs` (name -> bertprep arguments) run at once, each
    killed after `limit` seconds (exit None)."""
    return run_commands_at_once({name: (argv, env) for name, argv in argvs.items()}, limit)


def run_commands_at_once(commands, limit):
    """run_all_at_once of `commands`, name -> (bertprep arguments, environment): each its own environment, and
    each its own time (waited for in a thread of its own: one waited for after another would count the
    other's)."""
    started = time.monotonic()

    def run(argv, env):
        process = subprocess.Popen([sys.executable, "-m", "bertprep", *map(str, argv)], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _out, err = process.communicate(timeout=max(1, limit - (time.monotonic() - started)))
            return process.returncode, err, time.monotonic() - started
        except subprocess.TimeoutExpired:
            return None, "", time.monotonic() - started
        finally:  # none is left running if it did not end in time
            process.kill()
            process.communicate()

    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        futures = {name: pool.submit(run, *command) for name, command in commands.items()}
        return {name: future.result() for name, future in futures.items()}


# The runs that wait through backoffs (our own between the hub's busy answers, a minute in all; huggingface_hub's
# own between attempts of a file, about 30 s each): one after another they held a test worker two minutes doing
# nothing, at once still one, so they start at once when the session starts (tests/early_waits.py), and each test
# reads its own.


def hub_waits(folder):
    """name -> [exit code, stderr, seconds it took, what else the test needs]: the module's long waits, run at
    once: "busy" (a hub whose API answers 503 with Retry-After: 3600), "hub model" and "vocab" (a hub that
    never answers)."""
    root = Path(folder)
    with StandInServer() as server, silent_endpoint() as endpoint:
        server.add_hub_dataset("nyu-mll/glue", cola_files())
        server.fail_with["/api/datasets/nyu-mll/glue/revision/main"] = [(503, {"Retry-After": "3600"}), 100]
        corpus = root / "corpus.txt"
        corpus.write_text("One sentence here.\nAnother one there.\n\nA second document.\n")
        commands = {
            "busy": (["download", "glue", "--tasks", "CoLA", "--workdir", root / "busy", "--quiet"],
                     hub_env(server.url, root / "hf-busy")),
            "hub model": (["download", "pretrained", "--model", "someone/bert-tiny", "--workdir", root / "model",
                           "--stall-timeout", "1", "--quiet"], hub_env(endpoint, root / "hf-model")),
            "vocab": (["create", "--input", corpus, "--vocab", "someone/bert-tiny", "--out", root / "out"],
                      {**hub_env(endpoint, root / "hf-vocab"), "BERTPREP_STORE_READ_TIMEOUT": "1"}),
        }
        runs = run_commands_at_once(commands, 120)
        asked = [path for method, path, _range in server.requests if path.endswith("/revision/main")]
        extra = {"busy": {"endpoint": server.url, "asked": asked}, "hub model": {"endpoint": endpoint},
                 "vocab": {}}
    return {name: [*run, extra[name]] for name, run in runs.items()}


early_waits.register("hub_waits", "waits", hub_waits)


@pytest.fixture(scope="module")
def waits():
    return early_waits.result("hub_waits")


def test_a_hub_that_never_answers_ends_each_hub_dataset_within_the_stall_timeout(tmp_path):
    """huggingface_hub asked the repository's revision with no timeout: each of these waited for ever."""
    with silent_endpoint() as endpoint:
        argvs = {name: ["download", *argv, "--workdir", tmp_path / name.split()[0], "--stall-timeout", "1",
                        "--quiet"] for name, argv in HUB_SOURCES.items()}
        runs = run_all_at_once(argvs, hub_env(endpoint, tmp_path / "hf"), limit=60)
    for name, (code, stderr, took) in runs.items():
        assert code == 1 and stderr.count("\n") == 1 and "Traceback" not in stderr, (name, code, stderr)
        assert stderr.startswith("bertprep download: error: ") and f"not reachable at {endpoint} " in stderr, stderr
        assert took < 20, (name, took)


@pytest.mark.heavy  # huggingface_hub's own 7 attempts of a file and its 23 s of backoff between them
def test_a_hub_that_never_answers_ends_a_hub_model_within_the_stall_timeout(waits):
    """--stall-timeout was not applied: 10 s, then 6 attempts of 60 s and backoff, 6.6 minutes."""
    code, stderr, took, seen = waits["hub model"]
    endpoint = seen["endpoint"]
    assert code == 1, (code, stderr)
    assert stderr == ("bertprep download: error: someone/bert-tiny/config.json: not reachable at "
                      f"{endpoint} and not in the cache (timed out)\n")  # under --quiet none of the hub's retries
    assert took < 60, took


def test_a_hub_that_trickles_its_files_still_succeeds_within_the_stall_timeout(tmp_path):
    """The stall limit bounds each wait for a byte, not the transfer: files that take three times as long as
    --stall-timeout to arrive, a byte every 2 ms, are downloaded and verified."""
    with StandInServer() as server:
        files = {f"cola/{split}-00000-of-00001.parquet": parquet_bytes({"sentence": [f"{split} a", f"{split} b"],
                                                                       "label": [0, 1], "idx": [0, 1]})
                 for split in ("train", "validation", "test")}
        commit = server.add_hub_dataset("nyu-mll/glue", files)
        for path in files:
            server.trickle[f"/datasets/nyu-mll/glue/resolve/{commit}/{path}"] = [0.002, 1]
        started = time.monotonic()
        summary = ok(run_cli("download", "glue", "--tasks", "CoLA", "--workdir", tmp_path / "w", "--stall-timeout",
                             "1", "--json", "--quiet", server=server, hf_home=tmp_path / "hf"))
        took = time.monotonic() - started
    assert sorted(summary["files"]) == ["CoLA/dev.tsv", "CoLA/test.tsv", "CoLA/train.tsv"]
    assert all(count == 0 for count in [entry[1] for entry in server.trickle.values()])  # each was trickled
    assert took > 1.5, took


def test_a_hub_connection_ends_at_the_deadline_and_its_file_resumes(tmp_path):
    """--deadline bounded none of the hub's connections: one that trickled a byte inside every --stall-timeout held
    its file for as long as the hub kept it up. Each now ends at the deadline, and huggingface_hub asks for the file
    again (with Range from its last whole 10 MB chunk; this file has none), as our own downloads resume: the file
    arrives whole and verified."""
    with StandInServer() as server:
        files = cola_files(rows=40)
        commit = server.add_hub_dataset("nyu-mll/glue", files)
        trickled = f"/datasets/nyu-mll/glue/resolve/{commit}/cola/train-00000-of-00001.parquet"
        server.trickle[trickled] = [0.002, 1]  # the first connection: 2 ms a byte, beyond the 1 s deadline
        summary = ok(run_cli("download", "glue", "--tasks", "CoLA", "--workdir", tmp_path / "w", "--deadline", "1",
                             "--json", "--quiet", server=server, hf_home=tmp_path / "hf"))
        asked = [(method, byte_range) for method, path, byte_range in server.requests if path == trickled]
    assert len(files["cola/train-00000-of-00001.parquet"]) > 1000  # more than 2 s of trickle
    assert sorted(summary["files"]) == ["CoLA/dev.tsv", "CoLA/test.tsv", "CoLA/train.tsv"]
    assert asked == [("HEAD", None), ("GET", None), ("GET", None)], asked  # the trickled GET ended at the deadline
    assert (tmp_path / "w/download/glue/CoLA/train.tsv").read_text().count("\n") == 40


def test_a_hub_file_that_stalls_on_every_attempt_is_named(tmp_path):
    """`nyu-mll/glue@main at URL: timed out` named the repository only, not the file that stalled (the others came)."""
    with StandInServer() as server:
        commit = server.add_hub_dataset("nyu-mll/glue", cola_files())
        server.stall_after[f"/datasets/nyu-mll/glue/resolve/{commit}/cola/train-00000-of-00001.parquet"] = [10, 100]
        result = run_cli("download", "glue", "--tasks", "CoLA", "--workdir", tmp_path / "w", "--stall-timeout", "1",
                         "--quiet", server=server, hf_home=tmp_path / "hf")
        endpoint = server.url
    assert result.stderr == (f"bertprep download: error: nyu-mll/glue@main/cola/train-00000-of-00001.parquet at "
                             f"{endpoint}: timed out\n") and result.returncode == 1


def cola_files(rows=1):
    return {f"cola/{split}-00000-of-00001.parquet": parquet_bytes({"sentence": [f"{split} {i}" for i in range(rows)],
                                                                  "label": [0] * rows, "idx": list(range(rows))})
            for split in ("train", "validation", "test")}


def test_quiet_shows_none_of_the_hubs_retries(tmp_path):
    """huggingface_hub's warnings of each retry ("HTTP Error 503 thrown while requesting HEAD …", "Retrying in 1s
    [Retry 1/5].") were printed under --quiet, which shows no note of our own retries."""
    with StandInServer() as server:
        commit = server.add_hub_dataset("nyu-mll/glue", cola_files())
        server.fail_with[f"/datasets/nyu-mll/glue/resolve/{commit}/cola/train-00000-of-00001.parquet"] = [(503, {}), 2]
        result = run_cli("download", "glue", "--tasks", "CoLA", "--workdir", tmp_path / "w", "--quiet", server=server,
                         hf_home=tmp_path / "hf")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result.stderr
    assert (tmp_path / "w/download/glue/CoLA/train.tsv").read_text() == "hub\t0\t*\ttrain 0\n"


def test_the_hubs_retry_lines_never_show_an_endpoints_password(tmp_path):
    """Without --quiet, huggingface_hub's own retry lines were printed as it wrote them: "HTTP Error 503 thrown
    while requesting GET http://alice:S3cret@127.0.0.1:PORT/datasets/...", the endpoint's password and all."""
    with StandInServer() as server:
        commit = server.add_hub_dataset("nyu-mll/glue", cola_files())
        server.fail_with[f"/datasets/nyu-mll/glue/resolve/{commit}/cola/train-00000-of-00001.parquet"] = [(503, {}), 2]
        url = server.url
        result = run_cli("download", "glue", "--tasks", "CoLA", "--workdir", tmp_path / "w", "--base-url",
                         url.replace("http://", "http://alice:S3cret@"), server=server, hf_home=tmp_path / "hf")
    assert result.returncode == 0 and "Retry 1/5" in result.stderr, result.stderr  # the hub's lines are still shown
    assert "S3cret" not in result.stdout + result.stderr and f"{url}/datasets/" in result.stderr, result.stderr
    assert (tmp_path / "w/download/glue/CoLA/train.tsv").read_text() == "hub\t0\t*\ttrain 0\n"


@pytest.mark.parametrize("asks", [{"Retry-After": "3600"}, {"RateLimit": '"api";r=0;t=3600',
                                                            "RateLimit-Policy": '"fixed window";"api";q=500;w=3600'}],
                         ids=["retry-after", "ratelimit"])
def test_a_hub_that_asks_to_wait_an_hour_is_retried_within_the_stall_timeout(tmp_path, asks):
    """huggingface_hub slept what a 429 asked (Retry-After or the RateLimit reset) plus 1 s before it retried: an
    hour per retry."""
    with StandInServer() as server:
        commit = server.add_hub_dataset("nyu-mll/glue", cola_files())
        server.fail_with[f"/datasets/nyu-mll/glue/resolve/{commit}/cola/train-00000-of-00001.parquet"] = [(429, asks),
                                                                                                            3]
        env = hub_env(server.url, tmp_path / "hf")
        [(code, stderr, took)] = run_all_at_once({"glue": ["download", "glue", "--tasks", "CoLA", "--workdir",
                                                           tmp_path / "w", "--stall-timeout", "2", "--quiet"]},
                                                 env, limit=60).values()
        assert server.fail_with[next(iter(server.fail_with))][1] == 0  # each 429 was answered
    assert (code, stderr) == (0, ""), (code, stderr)
    assert (tmp_path / "w/download/glue/CoLA/train.tsv").read_text() == "hub\t0\t*\ttrain 0\n"
    assert took < 20, took  # two waits of 2 s


def test_a_hub_that_answers_its_first_request_busy_is_asked_again(tmp_path):
    """snapshot_download asks a dataset's revision once: one 503 ended `download glue` (`not reachable … (Got:
    HfHubHTTPError: Server error '503 Service Unavailable' …)`), where our own downloads retry a busy server."""
    with StandInServer() as server:
        server.add_hub_dataset("nyu-mll/glue", cola_files())
        server.fail_with["/api/datasets/nyu-mll/glue/revision/main"] = [(503, {}), 1]
        server.fail_with["/api/datasets/nyu-mll/glue/tree/" + server.hub[("nyu-mll/glue", "main")]["commit"]] = [
            (429, {}), 1]  # its own retries (huggingface_hub's) take this one
        result = run_cli("download", "glue", "--tasks", "CoLA", "--workdir", tmp_path / "w", "--quiet", server=server,
                         hf_home=tmp_path / "hf")
        asked = [path for method, path, _range in server.requests if path.endswith("/revision/main")]
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert len(asked) == 2 and (tmp_path / "w/download/glue/CoLA/train.tsv").read_text() == "hub\t0\t*\ttrain 0\n"


@pytest.mark.heavy  # 7 attempts, 63 s of backoff between them
def test_a_hub_that_stays_busy_ends_in_one_line_after_seven_attempts(waits):
    code, stderr, took, seen = waits["busy"]
    assert code == 1 and stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"bertprep download: error: nyu-mll/glue@main: not reachable at {seen['endpoint']} and "
                             "not in the cache (") and stderr.endswith("; gave up after 7 attempts)\n")
    assert len(seen["asked"]) == 7 and took < 63 + 30, took


@pytest.mark.parametrize("source", ["glue", "pretrained"])
def test_a_hub_that_redirects_in_a_loop_is_one_line(tmp_path, source):
    """httpx2.TooManyRedirects is no OSError nor huggingface_hub's HTTP error: it was a 40-line traceback."""
    with StandInServer() as server:
        server.add_hub_dataset("nyu-mll/glue", cola_files())
        server.add_hub_model("someone/bert-tiny", {"config.json": b"{}", "vocab.txt": b"[PAD]\n"})
        loop = {"glue": "/api/datasets/nyu-mll/glue/revision/main",
                "pretrained": "/someone/bert-tiny/resolve/main/config.json"}[source]
        server.redirects[loop] = loop
        argv = {"glue": ["glue", "--tasks", "CoLA"], "pretrained": ["pretrained", "--model", "someone/bert-tiny"]}
        result = run_cli("download", *argv[source], "--workdir", tmp_path / "w", "--quiet", server=server,
                         hf_home=tmp_path / "hf")
        endpoint = server.url
    what = {"glue": "nyu-mll/glue@main", "pretrained": "someone/bert-tiny/config.json"}[source]
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"bertprep download: error: {what} at {endpoint}: Exceeded "), result.stderr
    assert "redirects" in result.stderr


@pytest.mark.heavy  # huggingface_hub's own 7 attempts of a file and its 23 s of backoff between them
def test_a_checkpoint_named_by_hub_id_from_a_hub_that_never_answers_ends_within_the_store_timeout(tmp_path):
    """`trainer checkpoint inspect <hub id>` (and --init-checkpoint <hub id>) called snapshot_download outside
    `bounded_hub`: a hub that never answered held it for ever (still waiting after 90 s), and the hub's own retry
    lines named the endpoint, password and all. It waits as a vocab named by hub id does, and says one line."""
    with silent_endpoint() as endpoint:
        env = {**hub_env(endpoint.replace("http://", "http://alice:S3cret@"), tmp_path / "hf"),
               "BERTPREP_STORE_READ_TIMEOUT": "1"}
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "trainer", "checkpoint", "inspect", "someone/bert-tiny"],
                                env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
        took = time.monotonic() - started
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("trainer checkpoint: error: someone/bert-tiny: not a directory and not found on "
                                    "the Hugging Face hub or in its cache ("), result.stderr
    assert "S3cret" not in result.stderr and took < 60, (took, result.stderr)


def test_a_vocab_named_by_hub_id_from_a_hub_that_never_answers_ends_within_the_store_timeout(waits):
    """`--vocab <hub id>` fetched vocab.txt with huggingface_hub's own timeouts and retries: 6.6 minutes, whatever
    BERTPREP_STORE_READ_TIMEOUT said; and without --quiet huggingface_hub's retry warnings came before the error."""
    code, stderr, took, _ = waits["vocab"]
    assert code == 1 and stderr.count("\n") == 1, (code, stderr)
    assert stderr.startswith("bertprep create: error: someone/bert-tiny: not a vocab file and not resolvable as a "
                             "hub model id ("), stderr
    assert took < 60, took
