"""nginx's per-block connection settings, against nginx: `client_max_body_size`,
`keepalive_timeout`, `keepalive_requests`, `send_timeout` and `client_body_timeout` in a
server and in its locations, merged as nginx merges them (the top level, the server, the
location, a nested location over its parent).

One configuration is run as written by nginx and by lfhttpd (proxy_harness: the same text,
the same upstream); each test sends the same bytes to both, checks nginx's answer against
what the test states, then lfhttpd's against nginx's.

What nginx does, and so lfhttpd: a `Content-Length` is checked against the limit of each
location a search finds for the request (a rewrite's `last` searches again), before the
location's own `return`; a chunked body against the limit of the location that reads it;
either over it is 413 and the connection closes. A server's `return` answers before any
location is found, so no limit applies there. `keepalive_timeout 0` in a location makes its
answers `Connection: close`; its `keepalive_requests` closes the connection on that request.
"""
import socket
import time

import pytest

from conftest import Client, scaled
from proxy_harness import Proxy, Upstream

SITE = """
client_header_timeout 1s;
server {
    listen 127.0.0.1:{port0};
    root ROOT;
    client_max_body_size 1k;
    keepalive_timeout 30s 30;
    location / {
        return 200 "root\\n";
    }
    location /up/ {
        proxy_pass http://127.0.0.1:{up0};
    }
    location /upload/ {
        client_max_body_size 10m;
        proxy_pass http://127.0.0.1:{up0};
        location /upload/small/ {
            client_max_body_size 100;
            proxy_pass http://127.0.0.1:{up0};
        }
        location /upload/deep/ {
            proxy_pass http://127.0.0.1:{up0};
        }
    }
    location /unlimited/ {
        client_max_body_size 0;
        proxy_pass http://127.0.0.1:{up0};
    }
    location /wide-then-narrow/ {
        client_max_body_size 10m;
        rewrite ^ /x last;
    }
    location /narrow-then-wide/ {
        rewrite ^ /upload/x last;
    }
    location /try-uri/ {
        client_max_body_size 10m;
        try_files /nothing /x;
    }
    location /try-named/ {
        client_max_body_size 10m;
        try_files /nothing @named;
    }
    location @named {
        return 200 "named\n";
    }
    location /big-return/ {
        client_max_body_size 10m;
        return 200 "big return\\n";
    }
    location /short/ {
        keepalive_timeout 0;
        return 200 "short\\n";
    }
    location /header/ {
        keepalive_timeout 20s 7;
        return 200 "header\\n";
    }
    location /two/ {
        keepalive_requests 2;
        return 200 "two\\n";
    }
    location /slow-send/ {
        send_timeout 1s;
    }
    location /files/ {
    }
    location /slow-body/ {
        client_body_timeout 1s;
        client_max_body_size 10m;
        proxy_pass http://127.0.0.1:{up0};
    }
}
server {
    listen 127.0.0.1:{port1};
    client_max_body_size 1k;
    return 200 "server return\\n";
}
"""

BODY = b"b" * 5000  # past the server's 1k, within the upload location's 10m
BIG_SIZE = 16 << 20  # a download far past what socket buffers hold


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(nginx, lfhttpd) on SITE, with one upstream; stopped when the module's tests end."""
    root = tmp_path_factory.mktemp("block_limits")
    docroot = root / "www"
    docroot.mkdir()
    (docroot / "slow-send").mkdir()
    (docroot / "slow-send" / "big.bin").write_bytes(b"s" * BIG_SIZE)
    (docroot / "files").mkdir()
    (docroot / "files" / "big.bin").write_bytes(b"s" * BIG_SIZE)
    up = Upstream()
    started = []
    try:
        for kind in ("nginx", "lfhttpd"):
            started.append(Proxy(root / kind, SITE, up, docroot, kind=kind))
        yield tuple(started)
    finally:
        for p in started:
            p.stop()
        up.stop()


def connect(p, port_index=0):
    return Client(socket.create_connection((p.host, p.ports[port_index]), timeout=scaled(10)))


def exchange(p, data, port_index=0):
    """Send data on a new connection; (status, headers, body, closed after?)."""
    c = connect(p, port_index)
    try:
        c.send(data)
        status, headers, body, _ = c.read_response(timeout=scaled(10))
        return status, headers, body, c.is_closed(scaled(1))
    finally:
        c.close()


def post(path, body, host="t"):
    return (b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n"
            % (path.encode(), host.encode(), len(body)) + body)


def post_chunked(path, body, size=1000):
    out = b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" % path.encode()
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


def get(path):
    return b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode()


def same_answer(both, data, expect_status, expect_closed, port_index=0):
    """nginx answers data with expect_status and closes or keeps the connection as said;
    lfhttpd answers the same."""
    theirs, ours = (exchange(p, data, port_index) for p in both)
    assert (theirs[0], theirs[3]) == (expect_status, expect_closed), theirs
    assert (ours[0], ours[3]) == (theirs[0], theirs[3]), ours
    assert closes(ours) == closes(theirs)
    return theirs, ours


def closes(answer):
    """Does the answer say Connection: close? (nginx says keep-alive too; lfhttpd lets
    HTTP/1.1's default say it.)"""
    return answer[1].get("connection", "").lower() == "close"


# --- client_max_body_size -----------------------------------------------------------------


def test_upload_location_takes_a_content_length_body_past_its_servers_limit(both):
    same_answer(both, post("/upload/f", BODY), 200, False)


def test_content_length_body_past_the_servers_limit_is_413_in_another_location(both):
    theirs, _ = same_answer(both, post("/up/f", BODY), 413, True)
    assert closes(theirs)


def test_upload_location_takes_a_chunked_body_past_its_servers_limit(both):
    same_answer(both, post_chunked("/upload/f", BODY), 200, False)


def test_chunked_body_past_the_servers_limit_is_413_in_another_location(both):
    same_answer(both, post_chunked("/up/f", BODY), 413, True)


def test_nested_location_inherits_its_parents_body_limit(both):
    same_answer(both, post("/upload/deep/f", BODY), 200, False)


def test_nested_location_sets_its_own_body_limit(both):
    same_answer(both, post("/upload/small/f", b"s" * 500), 413, True)


def test_location_with_limit_0_takes_a_body_past_its_servers_limit(both):
    same_answer(both, post("/unlimited/f", BODY), 200, False)


def test_location_with_limit_0_takes_a_chunked_body_past_its_servers_limit(both):
    same_answer(both, post_chunked("/unlimited/f", BODY), 200, False)


def test_content_length_past_the_limit_of_the_location_a_rewrite_leads_to_is_413(both):
    same_answer(both, post("/wide-then-narrow/f", BODY), 413, True)


def test_content_length_past_the_limit_of_the_location_a_rewrite_leaves_is_413(both):
    same_answer(both, post("/narrow-then-wide/f", BODY), 413, True)


def test_content_length_past_the_limit_of_the_location_a_try_files_uri_leads_to_is_413(both):
    same_answer(both, post("/try-uri/f", BODY), 413, True)


def test_named_location_a_try_files_leads_to_checks_no_body_limit(both):
    same_answer(both, post("/try-named/f", BODY), 200, False)


def test_location_limit_holds_before_its_own_return(both):
    same_answer(both, post("/f", BODY), 413, True)


def test_location_with_a_larger_limit_answers_its_return(both):
    same_answer(both, post("/big-return/f", BODY), 200, False)


def test_servers_return_answers_before_any_body_limit(both):
    same_answer(both, post("/f", BODY), 200, False, port_index=1)


def test_body_within_the_limit_leaves_the_connection_open_for_the_next_request(both):
    for p in both:
        c = connect(p)
        try:
            c.send(post("/upload/f", BODY) + get("/next"))
            assert c.read_response(timeout=scaled(10))[0] == 200
            status, _, body, _ = c.read_response(timeout=scaled(10))
            assert (status, body) == (200, b"root\n"), p.kind
        finally:
            c.close()


# --- keepalive_timeout, keepalive_requests ------------------------------------------------


def test_location_with_keepalive_timeout_0_closes_the_connection(both):
    theirs, _ = same_answer(both, get("/short/"), 200, True)
    assert closes(theirs)


def test_location_without_keepalive_timeout_0_keeps_the_connection(both):
    same_answer(both, get("/"), 200, False)


def test_locations_keepalive_header_value_is_sent(both):
    theirs, ours = same_answer(both, get("/header/"), 200, False)
    assert theirs[1].get("keep-alive") == "timeout=7"
    assert ours[1].get("keep-alive") == "timeout=7"


def test_servers_keepalive_header_value_holds_where_the_location_says_none(both):
    theirs, ours = same_answer(both, get("/"), 200, False)
    assert theirs[1].get("keep-alive") == "timeout=30"
    assert ours[1].get("keep-alive") == "timeout=30"


def test_locations_keepalive_requests_closes_the_connection_on_its_second_request(both):
    answers = []
    for p in both:
        c = connect(p)
        try:
            c.send(get("/two/"))
            first = c.read_response(timeout=scaled(10))
            c.send(get("/two/"))
            second = c.read_response(timeout=scaled(10))
            answers.append((first[0], closes(first), second[0], closes(second),
                            c.is_closed(scaled(2))))
        finally:
            c.close()
    assert answers[0] == (200, False, 200, True, True)
    assert answers[1] == answers[0]


# --- send_timeout, client_body_timeout ------------------------------------------------------


def ends_within(c, limit):
    """Does the server end c within limit seconds (what it sends first read and dropped)?"""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        c.sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if c.sock.recv(1 << 16) == b"":
                return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
    return False


def received_after_a_stall(c, stall):
    """Read nothing for `stall` seconds, then everything until the server closes or goes
    quiet: the bytes received (fewer than the file: the server gave up in the stall)."""
    time.sleep(stall)
    c.sock.settimeout(scaled(2))
    n = 0
    try:
        while n < BIG_SIZE:
            b = c.sock.recv(1 << 20)
            if not b:
                break
            n += len(b)
    except (socket.timeout, ConnectionResetError):
        pass
    return n


def stalled_download(p, path):
    """A connection that asks for path and reads nothing: the server's send stalls."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(scaled(10))
    s.connect((p.host, p.port))
    s.sendall(get(path))
    return Client(s)


def test_locations_send_timeout_ends_a_stalled_response(both):
    for p in both:
        c = stalled_download(p, "/slow-send/big.bin")
        try:
            assert received_after_a_stall(c, 4) < BIG_SIZE, p.kind
        finally:
            c.close()


def test_servers_send_timeout_holds_outside_the_location(both):
    for p in both:
        c = stalled_download(p, "/files/big.bin")
        try:
            assert received_after_a_stall(c, 4) >= BIG_SIZE, p.kind
        finally:
            c.close()


def test_locations_client_body_timeout_ends_a_stalled_body(both):
    for p in both:
        c = connect(p)
        try:
            c.send(b"POST /slow-body/f HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nxx")
            assert ends_within(c, scaled(6)), p.kind
        finally:
            c.close()


def test_servers_client_body_timeout_holds_outside_the_location(both):
    for p in both:
        c = connect(p)
        try:
            c.send(b"POST /up/f HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nxx")
            assert not ends_within(c, 3), p.kind
        finally:
            c.close()


# --- client_header_timeout: the top level's (nginx: the default server's) -----------------


def test_top_level_client_header_timeout_ends_a_stalled_head(both):
    for p in both:
        c = connect(p)
        try:
            c.send(b"GET / HTTP/1.1\r\nHost: t\r\n")
            assert ends_within(c, scaled(4)), p.kind
        finally:
            c.close()
