"""$request_length and $connection, against nginx: one configuration run by nginx and by
lfhttpd in front of one test upstream (upstream_app.py), the same bytes sent to each and
the values compared, in add_header and in the access log. nginx counts the request's head
and the body bytes it read for the handler, as they came (a chunked body with its
framing); a body it skips (a `return`, a file) is not counted. $connection is the
connection's serial number: the same on every request of one connection, a later one's
greater."""
import re
import socket

from conftest import scaled, wait_until
from proxy_harness import Proxy, Upstream

CONF = """
log_format len '$request_length';
upstream app { server 127.0.0.1:{up0}; }
server {
    listen 127.0.0.1:{port0};
    location /r {
        add_header X-Len $request_length;
        add_header X-Conn $connection;
        return 200 "ok\\n";
    }
    location /p/ {
        proxy_pass http://app;
        add_header X-Len $request_length always;
    }
    location /log/ {
        access_log LOG len;
        return 200 "ok\\n";
    }
}
"""

POST = (b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
        b"hello")
CHUNKED = (b"POST %s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
           b"Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
GET = b"GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def head_fields(raw):
    """The answer's header fields, lower-cased names, each name's values in order."""
    out = {}
    for line in raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        out.setdefault(name.strip().lower().decode(), []).append(value.strip().decode())
    return out


def exchange(p, data):
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as c:
        c.sendall(data)
        got = b""
        while True:
            d = c.recv(65536)
            if not d:
                return got
            got += d


def both(tmp_path, sends):
    """Each raw request sent to nginx and to lfhttpd: {kind: [header fields...]}, and
    {kind: the /log/ access log's lines}."""
    u = Upstream()
    out, logs = {}, {}
    try:
        for kind in ("nginx", "lfhttpd"):
            log = tmp_path / f"{kind}.log"
            p = Proxy(tmp_path / kind, CONF.replace("LOG", str(log)), u, tmp_path, kind=kind)
            try:
                out[kind] = [head_fields(exchange(p, s)) for s in sends]
                logged = sum(b" /log/" in s for s in sends)
                wait_until(lambda: log.exists() and
                           len(log.read_text().splitlines()) >= logged, scaled(5))
                logs[kind] = log.read_text().splitlines() if log.exists() else []
            finally:
                p.stop()
    finally:
        u.stop()
    return out, logs


def test_request_length_in_add_header_is_the_head_as_nginx(tmp_path):
    out, _ = both(tmp_path, [GET % b"/r"])
    assert out["lfhttpd"][0]["x-len"] == out["nginx"][0]["x-len"] == [str(len(GET % b"/r"))]


def test_request_length_leaves_out_a_skipped_body_as_nginx(tmp_path):
    """A `return` does not read the body: its bytes are not the request's length."""
    out, _ = both(tmp_path, [POST % b"/r"])
    want = [str(len(POST % b"/r") - 5)]
    assert out["lfhttpd"][0]["x-len"] == out["nginx"][0]["x-len"] == want


def test_request_length_counts_a_proxied_body_as_nginx(tmp_path):
    out, _ = both(tmp_path, [POST % b"/p/x"])
    assert out["lfhttpd"][0]["x-len"][-1] == out["nginx"][0]["x-len"][-1] == \
        str(len(POST % b"/p/x"))


def test_request_length_counts_a_chunked_body_with_its_framing_as_nginx(tmp_path):
    out, _ = both(tmp_path, [CHUNKED % b"/p/x"])
    assert out["lfhttpd"][0]["x-len"][-1] == out["nginx"][0]["x-len"][-1] == \
        str(len(CHUNKED % b"/p/x"))


def test_request_length_in_the_access_log_is_nginxs(tmp_path):
    _, logs = both(tmp_path, [GET % b"/log/a", POST % b"/log/b"])
    assert logs["lfhttpd"] == logs["nginx"] == [str(len(GET % b"/log/a")),
                                                str(len(POST % b"/log/b") - 5)]


def keepalive_numbers(p, n):
    """$connection of n requests on one connection."""
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as c:
        got = b""
        nums = []
        for i in range(n):
            last = i == n - 1
            c.sendall(b"GET /r HTTP/1.1\r\nHost: t\r\n" +
                      (b"Connection: close\r\n" if last else b"") + b"\r\n")
            while got.count(b"ok\n") <= i:
                d = c.recv(65536)
                assert d
                got += d
        nums = re.findall(rb"X-Conn: (\d+)", got)
        return [int(x) for x in nums]


def test_connection_is_one_number_for_a_connections_requests_as_nginx(tmp_path):
    u = Upstream()
    try:
        for kind in ("nginx", "lfhttpd"):
            p = Proxy(tmp_path / kind, CONF.replace("LOG", str(tmp_path / "x.log")), u,
                      tmp_path, kind=kind)
            try:
                first = keepalive_numbers(p, 3)
                second = keepalive_numbers(p, 2)
            finally:
                p.stop()
            assert len(set(first)) == 1 and len(set(second)) == 1, (kind, first, second)
            assert second[0] > first[0] > 0, (kind, first, second)
    finally:
        u.stop()


def test_connection_numbers_the_first_connection_one(tmp_path, start_server):
    """No connection before the test's (nginx's harness probes its port first)."""
    s = start_server(tmp_path, conf="listen 127.0.0.1:0;\nerror_log stderr info;\n"
                     "access_log off;\nserver { location / { add_header X-Conn $connection; "
                     "return 200 \"ok\\n\"; } }\n")
    with socket.create_connection((s.host, s.port), timeout=scaled(10)) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        got = b""
        while d := c.recv(65536):
            got += d
    assert head_fields(got)["x-conn"] == ["1"]


def in_pieces(p, pieces):
    """The pieces sent a moment apart on one connection: the answer's header fields."""
    import time
    with socket.create_connection((p.host, p.port), timeout=scaled(10)) as c:
        for piece in pieces:
            c.sendall(piece)
            time.sleep(0.1)
        got = b""
        while d := c.recv(65536):
            got += d
    return head_fields(got)


def pieces_both(tmp_path, pieces):
    u = Upstream()
    out = {}
    try:
        for kind in ("nginx", "lfhttpd"):
            p = Proxy(tmp_path / kind, CONF.replace("LOG", str(tmp_path / "x.log")), u,
                      tmp_path, kind=kind)
            try:
                out[kind] = in_pieces(p, pieces)
            finally:
                p.stop()
    finally:
        u.stop()
    return out


def test_request_length_counts_a_chunked_body_read_in_pieces_as_nginx(tmp_path):
    """The body arrives after its head, chunk by chunk: counted as sent, framing too."""
    head = (b"POST /p/x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n")
    chunks = [b"5\r\nhello\r\n", b"a\r\n0123456789\r\n", b"0\r\n\r\n"]
    out = pieces_both(tmp_path, [head] + chunks)
    want = str(len(head) + sum(map(len, chunks)))
    assert out["lfhttpd"]["x-len"][-1] == out["nginx"]["x-len"][-1] == want


def test_request_length_counts_a_body_read_in_pieces_as_nginx(tmp_path):
    head = b"POST /p/x HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\nConnection: close\r\n\r\n"
    out = pieces_both(tmp_path, [head, b"01234", b"56789"])
    want = str(len(head) + 10)
    assert out["lfhttpd"]["x-len"][-1] == out["nginx"]["x-len"][-1] == want


def test_request_length_leaves_out_the_next_request_sent_with_the_body_as_nginx(tmp_path):
    """The last chunk and a pipelined request in one piece: the first request's length
    ends with its body."""
    head = b"POST /p/x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = [b"5\r\nhello\r\n", b"0\r\n\r\n"]
    out = pieces_both(tmp_path, [head, body[0], body[1] + GET % b"/r"])
    want = str(len(head) + sum(map(len, body)))
    assert out["lfhttpd"]["x-len"][0] == out["nginx"]["x-len"][0] == want
