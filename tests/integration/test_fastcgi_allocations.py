"""A FastCGI keep-alive request allocates nothing once warm: the counting library of
test_allocations.py (tests/alloc_counter.c, LD_PRELOAD) in lfhttpd only, in front of a
real PHP-FPM pool (not counted: other processes). The application's connections are kept
(`keepalive` and `fastcgi_keep_conn on`), and a state keeps its buffer between requests,
so after the warm-up neither a connection nor a buffer is new."""
import os

import pytest

from conftest import BY_DESIGN, SANITIZED, Server, check_clean_exit
from fastcgi_harness import fpm, php_root, with_conf_files  # noqa: F401
from test_allocations import alloc_counter, allocations

REQ = b"GET /hello.php HTTP/1.1\r\nHost: t\r\n\r\n"
BIG_REQ = (b"GET /hello.php HTTP/1.1\r\nHost: t\r\n" +
           b"".join(b"X-Big-%d: %s\r\n" % (i, b"b" * 2600) for i in range(3)) + b"\r\n")


def counted_server(tmp_path, fpm, kept, variable=False):
    """(lfhttpd, counter file): every *.php of the test scripts passed to the pool, on
    connections kept (an upstream block with `keepalive` and `fastcgi_keep_conn on`) or
    on a new connection each (`fastcgi_pass unix:...` as Debian's snippet has it); with
    `variable`, through `fastcgi_pass $up;`, $up set to the block's name or the address."""
    if SANITIZED:
        pytest.skip("the sanitizers replace malloc, so there is nothing to count " + BY_DESIGN)
    lib = alloc_counter()
    root = php_root(tmp_path)
    with open(os.path.join(root, "hello.php"), "w") as f:
        f.write("<?php echo 'hello';\n")
    d = tmp_path / "lf"
    with_conf_files(d)
    counter = tmp_path / "allocs"
    passing = ("fastcgi_pass php; fastcgi_keep_conn on;" if kept
               else f"fastcgi_pass unix:{fpm.sock};")
    if variable:
        passing = ("set $up php; fastcgi_pass $up; fastcgi_keep_conn on;" if kept
                   else f"set $up unix:{fpm.sock}; fastcgi_pass $up;")
    conf = (f"threads 2;\naccess_log off;\nkeepalive_requests 0;\n"
            f"upstream php {{ server unix:{fpm.sock}; keepalive 4; }}\n"
            f"server {{\n  listen 127.0.0.1:0;\n  root {root};\n"
            f"  location ~ \\.php$ {{ {passing} include fastcgi.conf; }}\n}}\n")
    return Server(d, None, conf=conf,
                  env={"LD_PRELOAD": lib, "LFHTTPD_ALLOC_COUNTER": str(counter)}), counter


@pytest.fixture
def counted(tmp_path, fpm):  # noqa: F811
    """The server passing on kept connections."""
    s, counter = counted_server(tmp_path, fpm, kept=True)
    yield s, counter
    check_clean_exit(s)


@pytest.fixture
def counted_unkept(tmp_path, fpm):  # noqa: F811
    """The server passing on a new connection each request."""
    s, counter = counted_server(tmp_path, fpm, kept=False)
    yield s, counter
    check_clean_exit(s)


def run(client, n, req=REQ, batch=50):
    for _ in range(n // batch):
        client.send(req * batch)
        for _ in range(batch):
            st, _, body, _ = client.read_response()
            assert st == 200 and body == b"hello"


def allocations_once_warm(s, counter):
    """Allocations over 2,000 keep-alive requests to PHP after a warm-up of 200."""
    c = s.connect(timeout=20)
    run(c, 200)
    before = allocations(counter)
    run(c, 2000)
    after = allocations(counter)
    c.close()
    return after - before


def test_fastcgi_keepalive_requests_do_not_allocate(counted):
    """2,000 keep-alive requests to PHP after a warm-up of 200: the count must not grow
    with the requests (the same small slack as the proxy's test)."""
    s, counter = counted
    n = allocations_once_warm(s, counter)
    assert n < 50, f"{n} allocations over 2,000 FastCGI requests"


def test_fastcgi_requests_on_a_new_connection_each_do_not_allocate(counted_unkept):
    """The same with no kept connection (Debian's snippet: `fastcgi_pass unix:...`, a
    connection to the application per request): a new connection's state is a reused one,
    not an allocation."""
    s, counter = counted_unkept
    n = allocations_once_warm(s, counter)
    assert n < 50, f"{n} allocations over 2,000 FastCGI requests"


def test_fastcgi_parameters_larger_than_a_threads_room_are_still_passed(counted):
    """A request whose parameters do not fit the thread's room (three 2,600-byte fields) is
    encoded in a buffer of its own and answered as any other."""
    s, _ = counted
    c = s.connect(timeout=20)
    run(c, 50, BIG_REQ, batch=10)
    c.close()


@pytest.mark.parametrize("kept", [True, False])
def test_fastcgi_pass_with_a_variable_does_not_allocate(tmp_path, fpm, kept):  # noqa: F811
    """`fastcgi_pass $up;` naming the upstream block (its connections kept) or the
    address (a connection each, and a set of that one address made for the request, in the
    state's own room): no more allocations than the same without a variable."""
    s, counter = counted_server(tmp_path, fpm, kept=kept, variable=True)
    try:
        n = allocations_once_warm(s, counter)
        assert n < 50, f"{n} allocations over 2,000 requests"
    finally:
        check_clean_exit(s)
