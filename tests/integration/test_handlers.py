"""mod_handlers: in-process handlers mounted on prefixes (hello, echo, request, status).

echo (the body back, as it came) and request (the request line, fields and body) are the
handlers that ask the core for request bodies, so their tests are also the tests
of the core's body collection: Content-Length and chunked bodies (RFC 9112 6.3, 7.1),
Expect: 100-continue (RFC 9110 10.1.1), bodies that arrive in pieces, large bodies, the
requests pipelined behind a body, and max_body_size (413, RFC 9110 15.5.14).
"""
import json
import subprocess
import threading
import time

import pytest

from conftest import BIN, scaled, wait_until

HANDLERS = (
    "handler /echo echo;\n"
    "handler /request request;\n"
    "handler /hello hello;\n"
    "handler /status status;\n"
    "max_body_size 2m;\n"
)
HELLO = b"Hello, world!\n"
GET_HELLO = b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.fixture
def srv(start_server, docroot):
    (docroot / "f.txt").write_bytes(b"file\n")
    return start_server(docroot, conf_extra=HANDLERS)


def chunked(data, size=7, ext=b""):
    out = b""
    for i in range(0, len(data), size):
        piece = data[i : i + size]
        out += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
    return out + b"0\r\n\r\n"


def request_parts(body):
    """Split a request handler's answer into (request line, [header lines], body)."""
    head, sep, rest = body.partition(b"\r\n\r\n")
    assert sep, body[:200]
    lines = head.split(b"\r\n")
    return lines[0], lines[1:], rest


def assert_hello(resp):
    st, h, body, head = resp
    assert st == 200, head
    assert body == HELLO
    assert h["content-type"] == "text/plain; charset=utf-8", head
    assert int(h["content-length"]) == len(HELLO)


def check_config(tmp_path, text):
    path = tmp_path / "t.conf"
    path.write_text(text)
    p = subprocess.run([BIN, "-t", "-c", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10, cwd=str(tmp_path))
    return p.returncode, p.stdout.decode("latin-1"), str(path)


def status_json(server, connect):
    c = connect(server)
    c.send(b"GET /status?format=json HTTP/1.1\r\nHost: t\r\n\r\n")
    st, h, body, head = c.read_response()
    assert st == 200, head
    assert h["content-type"] == "application/json", head
    return json.loads(body)


# ---------------------------------------------------------------- hello


def test_hello_body_and_headers(srv, connect):
    c = connect(srv)
    c.send(GET_HELLO)
    st, h, body, head = c.read_response()
    assert_hello((st, h, body, head))
    assert "date" in h and h["server"].startswith("lfhttpd"), head


def test_hello_below_its_prefix(srv, connect):
    c = connect(srv)
    c.send(b"GET /hello/anything?x=1 HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_hello(c.read_response())


def test_hello_head_has_length_and_no_body(srv, connect):
    c = connect(srv)
    c.send(b"HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n" + GET_HELLO)
    st, h, body, head = c.read_response(head_only=True)
    assert st == 200, head
    assert int(h["content-length"]) == len(HELLO)
    assert_hello(c.read_response())  # nothing of a body came between the two


def test_hello_post_is_405_with_allow(srv, connect):
    c = connect(srv)
    c.send(b"POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc" + GET_HELLO)
    st, h, body, head = c.read_response()
    assert st == 405, head
    assert {m.strip() for m in h["allow"].split(",")} == {"GET", "HEAD", "OPTIONS"}
    assert_hello(c.read_response())  # the body was skipped exactly


def test_prefix_is_not_a_string_prefix(srv, connect):
    """/hello mounts /hello and /hello/..., not /helloworld (a file lookup: 404)."""
    c = connect(srv)
    c.send(b"GET /helloworld HTTP/1.1\r\nHost: t\r\n\r\n")
    assert c.read_response()[0] == 404


# ---------------------------------------------------------------- echo


def test_request_get_shows_request_line_and_headers(srv, connect):
    c = connect(srv)
    c.send(b"GET /request/a%20b?x=1&y=2 HTTP/1.1\r\nHost: t\r\nX-Test:  spaced value \r\n"
           b"X-Empty:\r\n\r\n")
    st, h, body, head = c.read_response()
    assert st == 200, head
    assert h["content-type"] == "text/plain; charset=utf-8"
    assert h["cache-control"] == "no-store"
    line, headers, rest = request_parts(body)
    assert line == b"GET /request/a%20b?x=1&y=2 HTTP/1.1"
    assert headers == [b"Host: t", b"X-Test: spaced value", b"X-Empty: "]
    assert rest == b""


def test_request_shows_the_body_after_the_head(srv, connect):
    c = connect(srv)
    data = b"name=value&other=\x00\xff binary"
    c.send(b"POST /request HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    st, h, body, head = c.read_response()
    assert st == 200, head
    line, headers, rest = request_parts(body)
    assert line == b"POST /request HTTP/1.1"
    assert b"Content-Length: %d" % len(data) in headers
    assert rest == data


def test_echo_content_length_body_comes_back_alone_with_its_type(srv, connect):
    c = connect(srv)
    data = b"name=value&other=\x00\xff binary"
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    st, h, body, head = c.read_response()
    assert st == 200, head
    assert h["content-type"] == "application/octet-stream", head
    assert h["cache-control"] == "no-store", head
    assert body == data


def test_echo_all_byte_values(srv, connect):
    data = bytes(range(256)) * 4
    c = connect(srv)
    c.send(b"PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    assert c.read_response()[2] == data


@pytest.mark.parametrize("method", [b"PUT", b"PATCH", b"DELETE"])
def test_echo_accepts_methods(srv, connect, method):
    c = connect(srv)
    c.send(method + b" /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
    st, h, body, head = c.read_response()
    assert (st, body) == (200, b"hi"), head


@pytest.mark.parametrize("method", [b"PUT", b"PATCH", b"DELETE"])
def test_request_shows_methods(srv, connect, method):
    c = connect(srv)
    c.send(method + b" /request HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
    st, h, body, head = c.read_response()
    assert st == 200, head
    line, _, rest = request_parts(body)
    assert line == method + b" /request HTTP/1.1"
    assert rest == b"hi"


def test_options_on_echo_is_allow_not_an_echo(srv, connect):
    c = connect(srv)
    c.send(b"OPTIONS /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi" + GET_HELLO)
    st, h, body, head = c.read_response()
    assert (st, body) == (200, b""), head
    assert {m.strip() for m in h["allow"].split(",")} == {
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
    assert_hello(c.read_response())  # the body was read, and the next request follows


def test_echo_trace_is_405_with_allow(srv, connect):
    c = connect(srv)
    c.send(b"TRACE /echo HTTP/1.1\r\nHost: t\r\n\r\n" + GET_HELLO)
    st, h, body, head = c.read_response()
    assert st == 405, head
    allow = {m.strip() for m in h["allow"].split(",")}
    assert allow == {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
    assert_hello(c.read_response())


def test_request_head_has_get_length_and_no_body(srv, connect):
    c = connect(srv)
    req = b"/request HTTP/1.1\r\nHost: t\r\n\r\n"
    c.send(b"HEAD " + req + GET_HELLO)
    st, h, _, head = c.read_response(head_only=True)
    assert st == 200, head
    # What a GET would echo, with the method's name one byte shorter.
    assert int(h["content-length"]) == len(b"HEAD " + req)
    assert_hello(c.read_response())


def test_echo_chunked_body_with_extensions_and_trailers(srv, connect):
    data = b"The quick brown fox jumps over the lazy dog" * 3
    body = chunked(data, size=10, ext=b";name=value;flag")
    body = body[: -len(b"0\r\n\r\n")] + b"0;last\r\nX-Trailer: yes\r\nX-Other: 1\r\n\r\n"
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + body
           + GET_HELLO)
    st, h, got, head = c.read_response()
    assert st == 200, head
    assert got == data  # decoded; trailers are not part of the content
    assert_hello(c.read_response())


def test_echo_empty_chunked_body(srv, connect):
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
           + GET_HELLO)
    st, _, got, head = c.read_response()
    assert st == 200, head
    assert got == b""
    assert_hello(c.read_response())


def test_echo_expect_100_continue(srv, connect):
    """RFC 9110 10.1.1: the client sends the head, waits for 100 Continue, then the body."""
    data = b"x" * 5000
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
           b"Content-Length: %d\r\n\r\n" % len(data))
    st, _, _, head = c.read_response()
    assert st == 100, head
    assert head.startswith("HTTP/1.1 100 Continue"), head
    c.send(data)
    st, h, got, head = c.read_response()
    assert st == 200, head
    assert got == data
    c.send(GET_HELLO)
    assert_hello(c.read_response())


def test_echo_expect_100_continue_chunked(srv, connect):
    data = b"chunky" * 1000
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")
    st, _, _, head = c.read_response()
    assert st == 100, head
    c.send(chunked(data, size=1000))
    st, h, got, head = c.read_response()
    assert st == 200, head
    assert got == data


def test_echo_expect_with_body_already_sent_gets_no_100_needed(srv, connect):
    """A client may send the body without waiting (RFC 9110 10.1.1); the echo is right
    either way (a 100 before it is allowed)."""
    data = b"eager"
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
           b"Content-Length: 5\r\n\r\n" + data)
    st, h, got, head = c.read_response()
    if st == 100:
        st, h, got, head = c.read_response()
    assert st == 200, head
    assert got == data


def test_expect_100_continue_over_the_limit_is_413_without_100(srv, connect):
    """RFC 9110 10.1.1: a server that will reject the content answers at once with the final
    status instead of 100; the client then never sends the body."""
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
           b"Content-Length: %d\r\n\r\n" % (3 << 20))
    st, _, _, head = c.read_response()
    assert st == 413, head


def test_expect_100_continue_in_http10_is_ignored(srv, connect):
    """RFC 9110 10.1.1: a server MUST ignore a 100-continue expectation in an HTTP/1.0
    request (and RFC 9110 15.2: never send a 1xx to an HTTP/1.0 client)."""
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.0\r\nHost: t\r\nExpect: 100-continue\r\n"
           b"Content-Length: 5\r\n\r\n")
    time.sleep(0.3)
    c.send(b"hello")
    st, _, got, head = c.read_response()
    assert st == 200, head
    assert got == b"hello"


def test_client_gone_in_the_middle_of_a_body(srv, connect):
    """The half-collected body is dropped with the connection (the sanitizer build checks
    for leaks at exit); the server goes on serving."""
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" + b"x" * 30000)
    time.sleep(0.1)
    c.close()
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"8000\r\n" + b"y" * 20000)
    time.sleep(0.1)
    c.close()
    c = connect(srv)
    c.send(GET_HELLO)
    assert_hello(c.read_response())


def test_echo_body_split_across_writes_with_pauses(srv, connect):
    """The body arrives over several events; the core collects it before calling echo."""
    data = bytes(range(256)) * 40
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(data)
           + data[:100])
    for i in range(100, len(data), 3000):
        time.sleep(0.05)
        c.send(data[i : i + 3000])
    st, h, got, head = c.read_response()
    assert st == 200, head
    assert got == data
    c.send(GET_HELLO)
    assert_hello(c.read_response())


def test_echo_chunked_body_split_mid_size_line(srv, connect):
    """Pieces that cut chunk-size lines, CRLFs and data in the middle."""
    data = b"abcdefghij" * 500
    raw = chunked(data, size=333, ext=b";e=1")
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    for i in range(0, len(raw), 101):
        c.send(raw[i : i + 101])
        if i % 1010 == 0:
            time.sleep(0.03)
    st, h, got, head = c.read_response()
    assert st == 200, head
    assert got == data
    c.send(GET_HELLO)
    assert_hello(c.read_response())


@pytest.mark.parametrize("size", [64 * 1024, 1000 * 1000 + 7])
def test_echo_large_body(srv, connect, size):
    data = bytes((i * 7 + i // 256) & 0xFF for i in range(size))
    c = connect(srv, timeout=20)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size + data)
    st, h, got, head = c.read_response(timeout=20)
    assert st == 200, head
    assert got == data


@pytest.mark.parametrize("size", [64 * 1024, 1000 * 1000 + 7])
def test_echo_large_chunked_body(srv, connect, size):
    data = bytes((i * 13) & 0xFF for i in range(size))
    c = connect(srv, timeout=20)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           + chunked(data, size=8192) + GET_HELLO)
    st, h, got, head = c.read_response(timeout=20)
    assert st == 200, head
    assert got == data
    assert_hello(c.read_response())


def test_pipelined_requests_after_an_echoed_body(srv, connect):
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nfirst"
           b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           + chunked(b"second") + GET_HELLO
           + b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    assert c.read_response()[2] == b"first"
    assert c.read_response()[2] == b"second"
    assert_hello(c.read_response())
    st, _, body, head = c.read_response()
    assert (st, body) == (200, b"file\n"), head


def test_pipelined_request_after_a_collected_body(srv, connect):
    """The next request follows a body that had to be collected across events."""
    data = b"y" * 40000
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(data)
           + data[:1000])
    time.sleep(0.1)
    c.send(data[1000:] + GET_HELLO)
    assert c.read_response()[2] == data
    assert_hello(c.read_response())


def test_pipelined_request_after_a_collected_chunked_body(srv, connect):
    data = b"z" * 40000
    raw = chunked(data, size=4000)
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + raw[:500])
    time.sleep(0.1)
    c.send(raw[500:] + GET_HELLO)
    assert c.read_response()[2] == data
    assert_hello(c.read_response())


def test_body_of_exactly_max_body_size_is_echoed(srv, connect):
    data = b"m" * (2 << 20)
    c = connect(srv, timeout=30)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    st, _, got, head = c.read_response(timeout=30)
    assert st == 200, head
    assert got == data
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           + chunked(data, size=60000) + GET_HELLO)
    st, _, got, head = c.read_response(timeout=30)
    assert st == 200, head
    assert got == data
    assert_hello(c.read_response())


def test_body_one_byte_over_max_body_size_is_413(srv, connect):
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % ((2 << 20) + 1))
    assert c.read_response()[0] == 413


def test_body_over_max_body_size_is_413(srv, connect):
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (3 << 20))
    st, h, _, head = c.read_response()
    assert st == 413, head
    assert h.get("connection") == "close", head


def test_chunked_body_over_max_body_size_is_413(srv, connect):
    c = connect(srv, timeout=20)
    piece = b"%x\r\n%s\r\n" % (65536, b"a" * 65536)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    try:
        for _ in range(40):  # 2.5 MiB, past the 2 MiB limit
            c.send(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed: the answer is still there to read
    st, _, _, head = c.read_response(timeout=20)
    assert st == 413, head


def test_malformed_chunked_body_is_400(srv, connect):
    c = connect(srv)
    c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"zz\r\nhello\r\n0\r\n\r\n" + GET_HELLO)
    st, _, _, head = c.read_response()
    assert st == 400, head
    assert c.is_closed()


# ---------------------------------------------------------------- status


def test_status_json(srv, connect):
    s = status_json(srv, connect)
    assert isinstance(s["uptime_s"], int) and s["uptime_s"] >= 0
    assert s["connections"] >= 1
    assert set(s["responses"]) == {"1xx", "2xx", "3xx", "4xx", "5xx"}
    assert len(s["groups"]) >= 1
    g = s["groups"][0]
    assert set(g) >= {"name", "threads", "nice", "connections", "requests", "p50_us",
                      "p99_us", "events", "handoffs", "waits"}
    assert g["name"] == "default"
    assert g["threads"] == 4  # the fixture's `threads 4;`
    assert g["connections"] >= 1
    assert g["events"] >= 1 and g["waits"] >= 1


def test_status_json_counts_the_process_context_switches(srv, connect):
    """getrusage's figures for the whole process: its threads wait (voluntary switches)
    for every event they do not find ready, so the count grows with requests."""
    first = status_json(srv, connect)["context_switches"]
    assert set(first) == {"voluntary", "involuntary"}
    for _ in range(20):
        status_json(srv, connect)
    later = status_json(srv, connect)["context_switches"]
    assert later["voluntary"] > first["voluntary"]
    assert later["involuntary"] >= first["involuntary"]


def test_status_lists_every_service_class(start_server, docroot, connect):
    """One entry per class, each with the threads its configuration gives it."""
    (docroot / "bulk").mkdir()
    (docroot / "bulk" / "f.txt").write_bytes(b"bulk\n")
    s = start_server(docroot, conf_extra=HANDLERS + "class bulk { threads 2; priority low; "
                     "match path /bulk/; }\n")
    for _ in range(3):
        c = connect(s)
        c.send(b"GET /bulk/f.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert c.read_response()[2] == b"bulk\n"
    # A request is counted in its class once its response is sent: poll for a moment.
    deadline = time.monotonic() + 5
    while True:
        groups = {g["name"]: g for g in status_json(s, connect)["groups"]}
        if groups["bulk"]["requests"] >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert set(groups) == {"default", "bulk"}
    assert groups["default"]["threads"] == 4
    assert groups["bulk"]["threads"] == 2
    assert groups["bulk"]["requests"] >= 3
    assert groups["bulk"]["p99_us"] >= groups["bulk"]["p50_us"] > 0
    c = connect(s)
    c.send(b"GET /status HTTP/1.1\r\nHost: t\r\n\r\n")
    text = c.read_response()[2].decode()
    assert "<td>bulk</td>" in text and "<td>default</td>" in text


def test_status_counts_answers_to_malformed_requests(srv, connect):
    """The log hook is documented to run for every response; a 400 for a head that does not
    parse is a response too."""
    before = status_json(srv, connect)
    c = connect(srv)
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n")
    assert c.read_response()[0] == 400
    after = status_json(srv, connect)
    assert after["responses"]["4xx"] == before["responses"]["4xx"] + 1


def test_class_requests_count_requests_with_collected_bodies(srv, connect):
    """The per-class request count (the core's, per service class) agrees with the
    responses counted by the module when the requests have bodies collected across
    events."""
    data = b"c" * 40000
    # The first request this server sees: no count of the core's can be pending.
    before = status_json(srv, connect)
    for _ in range(5):
        c = connect(srv)
        c.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(data)
               + data[:100])
        time.sleep(0.05)
        c.send(data[100:])
        assert c.read_response()[2] == data

    def counts():
        # The module counts a response before it is sent, the core once it is sent: the
        # core's count of the last response may still be coming when the client has it.
        # Each look is a status page, which both count too.
        after = status_json(srv, connect)
        mine = after["requests"] - before["requests"]  # the echoes + the status pages
        core = after["groups"][0]["requests"] - before["groups"][0]["requests"]
        return core, mine

    def agreed():
        core, mine = counts()
        return (core, mine) if core == mine else None

    settled = wait_until(agreed, scaled(5))
    assert settled, "the counts never agreed: (core, module) = %r" % (counts(),)
    assert settled[1] >= 6  # the 5 echoes and the first status page at least


def test_status_json_by_accept_header(srv, connect):
    c = connect(srv)
    c.send(b"GET /status HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\n\r\n")
    st, h, body, head = c.read_response()
    assert st == 200, head
    assert h["content-type"] == "application/json"
    assert h["cache-control"] == "no-store"
    assert "accept" in h.get("vary", "").lower()
    json.loads(body)


def test_status_browser_accept_gets_html(srv, connect):
    c = connect(srv)
    c.send(b"GET /status HTTP/1.1\r\nHost: t\r\nAccept: text/html,application/xhtml+xml,"
           b"application/xml;q=0.9,*/*;q=0.8\r\n\r\n")
    st, h, body, head = c.read_response()
    assert st == 200, head
    assert h["content-type"] == "text/html; charset=utf-8"


def test_status_html(srv, connect):
    c = connect(srv)
    c.send(b"GET /status HTTP/1.1\r\nHost: t\r\n\r\n")
    st, h, body, head = c.read_response()
    assert st == 200, head
    assert h["content-type"] == "text/html; charset=utf-8"
    assert h["cache-control"] == "no-store"
    text = body.decode()
    assert text.startswith("<!DOCTYPE html>")
    for word in ("Uptime", "Requests", "Bytes served", "Threads", "Hand-offs", "Epoll waits",
                 "2xx", "4xx"):
        assert word in text, word
    assert "prefers-color-scheme" in text


def test_status_figures_increase(srv, connect):
    before = status_json(srv, connect)
    c = connect(srv)
    for _ in range(5):
        c.send(GET_HELLO)
        assert_hello(c.read_response())
    for _ in range(3):
        c.send(b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\n")
        assert c.read_response()[0] == 404
    after = status_json(srv, connect)
    # The status request before is counted too, once it was sent.
    assert after["requests"] >= before["requests"] + 9
    assert after["responses"]["2xx"] >= before["responses"]["2xx"] + 6
    assert after["responses"]["4xx"] >= before["responses"]["4xx"] + 3
    assert after["bytes"] >= before["bytes"] + 5 * len(HELLO)
    assert after["groups"][0]["events"] > before["groups"][0]["events"]


def test_status_head_and_post(srv, connect):
    c = connect(srv)
    c.send(b"HEAD /status HTTP/1.1\r\nHost: t\r\n\r\n")
    st, h, _, head = c.read_response(head_only=True)
    assert st == 200 and int(h["content-length"]) > 0, head
    c.send(b"POST /status HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    st, h, _, head = c.read_response()
    assert st == 405, head
    assert {m.strip() for m in h["allow"].split(",")} == {"GET", "HEAD", "OPTIONS"}


def test_status_counts_concurrent_requests(srv):
    """Many threads at once (the per-thread counters under load; run under TSan too)."""
    before_c = srv.connect()
    before_c.send(b"GET /status?format=json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    before = json.loads(before_c.read_response()[2])
    before_c.close()
    n_clients, per_client = 8, 50
    errors = []

    def client():
        try:
            c = srv.connect(timeout=10)
            for _ in range(per_client):
                c.send(GET_HELLO)
                assert c.read_response(timeout=10)[2] == HELLO
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client) for _ in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    c = srv.connect()
    c.send(b"GET /status?format=json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    after = json.loads(c.read_response()[2])
    c.close()
    assert after["requests"] - before["requests"] >= n_clients * per_client + 1
    assert after["responses"]["2xx"] - before["responses"]["2xx"] >= n_clients * per_client


# ---------------------------------------------------------------- configuration


def test_longest_prefix_wins(start_server, docroot, connect):
    s = start_server(docroot, conf_extra="handler /a hello;\nhandler /a/b request;\n")
    c = connect(s)
    for path, kind in [("/a", "hello"), ("/a/x", "hello"), ("/a/bc", "hello"),
                       ("/a/b", "request"), ("/a/b/c", "request")]:
        c.send(b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode())
        st, _, body, head = c.read_response()
        assert st == 200, (path, head)
        if kind == "hello":
            assert body == HELLO, path
        else:
            assert body.startswith(b"GET %s HTTP/1.1\r\n" % path.encode()), path


def test_unknown_handler_name_is_a_config_error(tmp_path):
    code, out, path = check_config(tmp_path, "listen 127.0.0.1:0;\nroot .;\n\n"
                                   "handler /x nosuch;\n")
    assert code == 1, out
    assert f"{path}:4:" in out, out
    assert "nosuch" in out, out


@pytest.mark.parametrize("line", ["handler /x;", "handler /x echo extra;",
                                  "handler x echo;", "handler /x echo { }"])
def test_bad_handler_directive_is_a_config_error(tmp_path, line):
    code, out, path = check_config(tmp_path, "listen 127.0.0.1:0;\nroot .;\n" + line + "\n")
    assert code == 1, out
    assert f"{path}:3:" in out, out


def test_same_prefix_twice_is_a_config_error(tmp_path):
    code, out, path = check_config(tmp_path, "listen 127.0.0.1:0;\nroot .;\n"
                                   "handler /x echo;\nhandler /x hello;\n")
    assert code == 1, out
    assert f"{path}:4:" in out, out


def test_valid_handlers_pass_the_check(tmp_path):
    code, out, _ = check_config(tmp_path, "listen 127.0.0.1:0;\nroot .;\n" + HANDLERS)
    assert code == 0, out


def test_without_handlers_nothing_is_mounted(start_server, docroot, connect):
    s = start_server(docroot)
    c = connect(s)
    c.send(GET_HELLO)
    assert c.read_response()[0] == 404
