"""Long waits begun when a test session starts, so that no test worker sits through them.

Some tests wait on purpose: commands that retry a busy hub through a minute of backoff, or run out a stall timeout
against an endpoint that never answers. The CPU is idle meanwhile, and on a 2-core machine an idle test worker is
half the machine: the hub-limit tests' waits held one for a minute in every suite. A wait registered here
(`register(name, fixture, function)`, at a test module's import) runs in a thread of one process of the session,
begun once its collection is finished (tests/conftest.py), where a selected test asks for `fixture`; that fixture
reads the result (`result(name)`) from a file in a folder all the session's processes share, waiting for it
(bounded), on whichever worker its tests run. The function is the test's own code, run as it was; only when it
starts changes, so each command it times still counts its own seconds. One process runs the waits: the last xdist
worker, or the only process without xdist.
"""

import json
import os
import threading
import time

SHARED_FOLDER_VARIABLE = "BERTPREP_TEST_EARLY_WAITS"  # set by the session's first process (tests/conftest.py)
WAITS = {}  # name -> (the fixture that reads it, function(folder) -> a JSON value)
_threads = []


def register(name, fixture, function):
    WAITS[name] = (fixture, function)


def runs_the_waits(config):
    """Whether this process is the one that runs the session's waits."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    return worker is None or worker == f"gw{int(os.environ['PYTEST_XDIST_WORKER_COUNT']) - 1}"


def start(session):
    """Begin, each in a thread, the registered waits that a selected test's fixtures ask for."""
    if not runs_the_waits(session.config):
        return
    asked = {fixture for item in session.items for fixture in getattr(item, "fixturenames", ())}
    for name, (fixture, function) in WAITS.items():
        if fixture in asked:
            thread = threading.Thread(target=_run, args=(name, function), name=f"early wait {name}", daemon=True)
            thread.start()
            _threads.append(thread)


def _run(name, function):
    folder = os.path.join(os.environ[SHARED_FOLDER_VARIABLE], name)
    os.makedirs(folder, exist_ok=True)
    try:
        outcome = {"result": function(folder)}
    except Exception as exc:  # said to the test that reads it
        outcome = {"error": f"{type(exc).__name__}: {exc}"}
    path = _result_path(name)
    with open(path + ".partial", "w", encoding="utf-8") as file:
        json.dump(outcome, file)
    os.replace(path + ".partial", path)


def _result_path(name):
    return os.path.join(os.environ[SHARED_FOLDER_VARIABLE], f"{name}.json")


def result(name, limit_s=300):
    """The wait `name`'s result, once its file is there (at most `limit_s` seconds from now)."""
    path, deadline = _result_path(name), time.monotonic() + limit_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the early wait {name!r} left no result in {limit_s} s ({path})")
        time.sleep(0.2)
    with open(path, encoding="utf-8") as file:
        outcome = json.load(file)
    if "error" in outcome:
        raise RuntimeError(f"the early wait {name!r} failed: {outcome['error']}")
    return outcome["result"]


def finish(limit_s=300):
    """Wait for this process's waits to end (a worker that ended first would orphan their commands)."""
    for thread in _threads:
        thread.join(limit_s)
