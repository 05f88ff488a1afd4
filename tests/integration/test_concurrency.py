"""The concurrency strategies (`concurrency`, `promotion`, `reactivation`, `groups`): the
same server behaviour whether the threads are Leader/Followers (LIFO or condvar promotion;
connections reactivated edge-triggered in user space, the default, or one-shot with
epoll_ctl; one group per CPU, the default, or one group of all the threads),
Half-Sync/Half-Async or Thread-per-Connection.

Every behaviour is checked once per strategy; the tests whose names hold "concurrent",
"pipelin", "shutdown" or "classes" run again under ThreadSanitizer (make test-tsan)."""
import json
import os
import re
import signal
import time

import pytest

from conftest import scaled, wait_until, wait_closed

GET = "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"

STRATEGIES = [
    pytest.param("concurrency leader_followers;\n", id="leader_followers"),
    pytest.param("concurrency leader_followers;\npromotion condvar;\n",
                 id="leader_followers_condvar"),
    pytest.param("concurrency leader_followers;\nreactivation oneshot;\ngroups 1;\n",
                 id="leader_followers_oneshot_one_group"),
    pytest.param("concurrency half_sync_half_async;\n", id="half_sync_half_async"),
    pytest.param("concurrency thread_per_connection;\n", id="thread_per_connection"),
]


@pytest.fixture(params=STRATEGIES)
def strategy(request):
    """The configuration lines that select one strategy."""
    return request.param


@pytest.fixture
def site(docroot):
    """25 small files with distinct bodies, and a class's directory."""
    for i in range(25):
        (docroot / f"f{i}.txt").write_bytes(b"file %d " % i * (i + 1))
    (docroot / "api").mkdir()
    (docroot / "api" / "x.txt").write_text("api")
    return docroot


def body_of(i):
    return b"file %d " % i * (i + 1)


def get(path, close=False):
    extra = "Connection: close\r\n" if close else ""
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode()


def threads_named(pid, pattern):
    """Names of the process's threads matching the regular expression (/proc/PID/task)."""
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        except (FileNotFoundError, ProcessLookupError):  # the thread ended since the listing
            continue
        if re.fullmatch(pattern, comm):
            names.append(comm)
    return names


# ---------------------------------------------------------------- every strategy


def test_static_file_is_served(start_server, site, connect, strategy):
    s = start_server(site, strategy)
    c = connect(s)
    c.send(get("/f3.txt"))
    st, headers, body, head = c.read_response()
    assert st == 200, head
    assert body == body_of(3)


def test_keepalive_connection_serves_many_requests(start_server, site, connect, strategy):
    s = start_server(site, strategy)
    c = connect(s)
    for i in range(300):
        c.send(get(f"/f{i % 25}.txt"))
        st, _, body, head = c.read_response()
        assert st == 200, head
        assert body == body_of(i % 25)
    assert not c.is_closed(0.2)


def test_pipelined_requests_are_answered_in_order(start_server, site, connect, strategy):
    s = start_server(site, strategy)
    c = connect(s)
    order = [(i * 7) % 25 for i in range(100)]
    c.send(b"".join(get(f"/f{i}.txt") for i in order))
    for i in order:
        st, _, body, head = c.read_response(timeout=10)
        assert st == 200, head
        assert body == body_of(i), i


def test_concurrent_connections_each_get_their_own_bodies(start_server, site, connect,
                                                          strategy):
    """200 connections open at once, each asking for its own files in 5 rounds (each
    round's 200 requests sent before any response is read), the last with
    Connection: close."""
    n_conns, rounds = 200, 5
    s = start_server(site, strategy)
    clients = [connect(s, timeout=20) for _ in range(n_conns)]
    for r in range(rounds):
        last = r == rounds - 1
        for k, c in enumerate(clients):
            c.send(get(f"/f{(k + r) % 25}.txt?c={k}", close=last))
        for k, c in enumerate(clients):
            st, _, body, head = c.read_response(timeout=20)
            assert st == 200, (k, r, head)
            assert body == body_of((k + r) % 25), (k, r)
    for c in clients:
        assert c.is_closed(5)


def test_cgi_response_is_streamed(start_server, site, connect, strategy, tmp_path):
    """A script's output (more than one pipe's read) arrives whole, twice on one
    connection, and a static request after it is served on the same connection."""
    cgi = tmp_path / "cgi"
    cgi.mkdir()
    script = cgi / "seq"
    script.write_text("#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\nexec seq 1 30000\n")
    script.chmod(0o755)
    want = b"".join(b"%d\n" % i for i in range(1, 30001))
    s = start_server(site, strategy + f'cgi /cgi-bin/ "{cgi}";\n')
    c = connect(s, timeout=10)
    for _ in range(2):
        c.send(get("/cgi-bin/seq"))
        st, _, body, head = c.read_response(timeout=10)
        assert st == 200, head
        assert body == want
    c.send(get("/f1.txt"))
    assert c.read_response()[2] == body_of(1)


CLASSES = "class api { threads 1; match path /api/; }\n"


def test_requests_moving_between_classes_keep_their_order(start_server, site, connect,
                                                          strategy):
    """A connection's requests alternate between the default class and another one: the
    connection moves between the classes' groups (and, per connection, threads), one at a
    time and pipelined."""
    s = start_server(site, strategy + CLASSES)
    c = connect(s)
    paths = ["/api/x.txt", "/f2.txt", "/f2.txt", "/api/x.txt", "/api/x.txt", "/f4.txt"] * 5
    want = {"/api/x.txt": b"api", "/f2.txt": body_of(2), "/f4.txt": body_of(4)}
    for p in paths:
        c.send(get(p))
        st, _, body, head = c.read_response()
        assert st == 200, head
        assert body == want[p], p
    c.send(b"".join(get(p) for p in paths))
    for p in paths:
        st, _, body, head = c.read_response(timeout=10)
        assert st == 200, head
        assert body == want[p], p


def test_idle_connection_is_closed_at_keepalive_timeout(start_server, site, connect,
                                                        strategy):
    s = start_server(site, strategy + "keepalive_timeout 1s;\n")
    c = connect(s)
    c.send(get("/f0.txt"))
    assert c.read_response()[0] == 200
    elapsed = wait_closed(c, 6)
    assert elapsed is not None, "idle keep-alive connection not closed within 6 s"
    assert elapsed >= 0.5, elapsed


def test_shutdown_with_connections_open_is_prompt_and_clean(start_server, site, strategy):
    """SIGTERM with idle keep-alive connections open (some with their last response still
    unread): every one is closed, and the process exits 0 well before shutdown_timeout
    (60 s)."""
    s = start_server(site, strategy + "shutdown_timeout 60s;\n")
    idle = [s.connect() for _ in range(20)]
    for k, c in enumerate(idle):
        c.send(get("/f5.txt"))
        if k % 2:
            assert c.read_response()[2] == body_of(5)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    for c in idle:
        assert wait_closed(c, scaled(10)) is not None
    assert s.proc.wait(scaled(20)) == 0, s.error_log()
    assert time.monotonic() - t0 < scaled(10)
    for c in idle:
        c.close()
    assert "exit" in s.error_log()


NAMES = {"leader_followers": "Leader/Followers", "half_sync_half_async": "Half-Sync/Half-Async",
         "thread_per_connection": "Thread-per-Connection"}


def chosen(strategy):
    return re.search(r"concurrency (\w+);", strategy).group(1)


def test_startup_line_names_the_strategy(start_server, site, strategy):
    s = start_server(site, strategy)
    assert wait_until(lambda: f"({NAMES[chosen(strategy)]}" in s.error_log()), s.error_log()
    if "condvar" in strategy:
        assert "condvar promotion" in s.error_log()


def test_status_names_each_groups_strategy_and_counts_its_threads(start_server, site, connect,
                                                                  strategy):
    """`threads 4` (the fixture's) and the class's 1: plus the I/O thread in
    Half-Sync/Half-Async; one acceptor plus a thread per connection (this one, at least)
    in Thread-per-Connection."""
    s = start_server(site, strategy + CLASSES + "handler /status status;\n")
    c = connect(s)
    c.send(get("/status?format=json"))
    groups = {g["name"]: g for g in json.loads(c.read_response()[2])["groups"]}
    assert {g["strategy"] for g in groups.values()} == {NAMES[chosen(strategy)]}
    threads = (groups["default"]["threads"], groups["api"]["threads"])
    if chosen(strategy) == "leader_followers":
        assert threads == (4, 1)
    elif chosen(strategy) == "half_sync_half_async":
        assert threads == (5, 2)
    else:
        assert threads[0] >= 2 and threads[1] == 1


# ---------------------------------------------------------------- one strategy each


def test_half_sync_half_async_runs_an_io_thread_beside_the_workers(start_server, site):
    s = start_server(site, "concurrency half_sync_half_async;\n")
    assert wait_until(lambda: len(threads_named(s.proc.pid, r"default-\d+")) == 4)
    # Each thread names itself as it starts, which may be after "listening on" is logged.
    assert wait_until(lambda: threads_named(s.proc.pid, r"default-io") == ["default-io"])


def test_thread_per_connection_gives_each_connection_a_thread(start_server, site, connect):
    """Threads named default-cN appear with connections and leave when they close; one
    thread (default-0) accepts."""
    s = start_server(site, "concurrency thread_per_connection;\n")
    # Each thread names itself as it starts, which may be after "listening on" is logged.
    assert wait_until(lambda: threads_named(s.proc.pid, r"default-\d+") == ["default-0"])
    clients = [connect(s) for _ in range(10)]
    for c in clients:
        c.send(get("/f0.txt"))
        assert c.read_response()[0] == 200
    assert wait_until(lambda: len(threads_named(s.proc.pid, r"default-c\d+")) == 10)
    for c in clients:
        c.send(get("/f0.txt", close=True))
        assert c.read_response()[0] == 200
        assert c.is_closed(5)
    assert wait_until(lambda: threads_named(s.proc.pid, r"default-c\d+") == [])
