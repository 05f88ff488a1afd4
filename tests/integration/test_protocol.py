"""HTTP/1.1 message syntax, framing and semantics (RFC 9110, RFC 9112), tested with raw bytes.

Every test talks to a real lfhttpd over a raw socket (conftest.Client) so that exactly the
bytes under test reach the server. Tests that expect "400 and the connection closed" always
pipeline a valid request after the bad one: a server that answers it has been desynchronised
(request smuggling), which is the failure those rules exist to prevent.
"""
import email.utils
import re
import select
import time

import pytest

FILE_BODY = b"0123456789abcdef\n"
GOOD = b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n"

IMF_FIXDATE = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} "
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$"
)


# ---------------------------------------------------------------- helpers


@pytest.fixture
def site(start_server, docroot):
    """A default server whose docroot holds /f.txt (FILE_BODY)."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    return start_server(docroot)


@pytest.fixture
def connect(start_server):
    """connect(server) -> Client; every client is closed before the servers are stopped."""
    clients = []

    def _connect(server, timeout=5.0):
        c = server.connect(timeout)
        clients.append(c)
        return c

    yield _connect
    for c in clients:
        c.close()


def chunked(data, size=7, ext=b""):
    """data encoded as a chunked body, in chunks of `size` bytes."""
    out = b""
    for i in range(0, len(data), size):
        piece = data[i : i + size]
        out += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
    return out + b"0\r\n\r\n"


def assert_common_headers(status, headers, head):
    """Date (IMF-fixdate, RFC 9110 5.6.7 / 6.6.1) and Server on every response; framing on
    every response that may have content (RFC 9112 6.3)."""
    assert "date" in headers, head
    assert IMF_FIXDATE.match(headers["date"]), head
    assert abs(email.utils.parsedate_to_datetime(headers["date"]).timestamp() - time.time()) < 60
    assert headers.get("server", "").startswith("lfhttpd"), head
    if status >= 200 and status not in (204, 304):
        assert "content-length" in headers or headers.get("transfer-encoding", "").lower().endswith(
            "chunked"
        ), head


def assert_error(resp, status):
    """resp is an error response with `status`, a small text/html body naming the code."""
    st, headers, body, head = resp
    assert st == status, head
    assert_common_headers(st, headers, head)
    assert headers.get("content-type", "").lower().startswith("text/html"), head
    assert str(status).encode() in body, body
    if "content-length" in headers:
        assert int(headers["content-length"]) == len(body)


def assert_file(resp, body=FILE_BODY):
    st, headers, got, head = resp
    assert st == 200, head
    assert got == body
    assert int(headers["content-length"]) == len(body), head


def no_more_data(client, wait=0.3):
    """True if nothing more (neither bytes nor EOF) arrives within `wait` seconds."""
    if client.buf:
        return False
    r, _, _ = select.select([client.sock], [], [], wait)
    return not r


def assert_rejected_and_closed(client, status=400):
    """The next response is `status`, nothing follows it, and the server closes."""
    assert_error(client.read_response(), status)
    assert client.buf == b"", "bytes after the %d response: %r" % (status, client.buf[:200])
    assert client.is_closed(), "connection left open after %d" % status


# ---------------------------------------------------------------- basic responses


def test_get_returns_file_with_content_length(site, connect):
    """RFC 9110 9.3.1 GET; RFC 9112 6.3: the content is framed by Content-Length."""
    c = connect(site)
    c.send(GOOD)
    resp = c.read_response()
    assert_file(resp)
    assert resp[3].startswith("HTTP/1.1 200 ")


def test_every_response_has_date_and_server(site, connect):
    """RFC 9110 6.6.1: an origin server with a clock MUST send Date (IMF-fixdate); Server
    (RFC 9110 10.2.4) is sent on 200s and errors alike."""
    c = connect(site)
    c.send(GOOD + b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\n")
    for _ in range(2):
        st, h, _, head = c.read_response()
        assert_common_headers(st, h, head)


def test_error_response_has_small_html_body_with_status(site, connect):
    """Error responses carry a text/html body naming the status code, framed by
    Content-Length (RFC 9110 15.5: the server SHOULD send a representation explaining it)."""
    c = connect(site)
    c.send(b"GET /nope HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_error(c.read_response(), 404)


def test_head_has_same_headers_as_get_and_no_body(site, connect):
    """RFC 9110 9.3.2: HEAD is GET without content; the server SHOULD send the same header
    fields. The pipelined GET behind it parses only if the HEAD response had no body."""
    c = connect(site)
    c.send(b"HEAD /f.txt HTTP/1.1\r\nHost: t\r\n\r\n" + GOOD)
    st, head_h, body, head = c.read_response(head_only=True)
    assert st == 200, head
    get = c.read_response()
    assert_file(get)
    head_h.pop("date")
    get_h = dict(get[1])
    get_h.pop("date")
    assert head_h == get_h
    assert no_more_data(c)


def test_head_of_missing_file_is_404_without_body(site, connect):
    """RFC 9110 9.3.2: a HEAD response never has content, error responses included."""
    c = connect(site)
    c.send(b"HEAD /nope HTTP/1.1\r\nHost: t\r\n\r\n" + GOOD)
    st, h, _, head = c.read_response(head_only=True)
    assert st == 404, head
    assert_file(c.read_response())


def test_304_has_no_content_length_and_no_body(site, connect):
    """RFC 9110 13.1.3 / 15.4.5: If-Modified-Since equal to the Last-Modified of the file →
    304, which has no content; lfhttpd sends no Content-Length on it (RFC 9110 8.6 allows
    none). The pipelined GET behind it is answered normally."""
    c = connect(site)
    c.send(GOOD)
    st, h, _, head = c.read_response()
    assert "last-modified" in h, head
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nIf-Modified-Since: %s\r\n\r\n"
           % h["last-modified"].encode() + GOOD)
    st, h304, _, head = c.read_response()
    assert st == 304, head
    assert "content-length" not in h304, head
    assert_common_headers(st, h304, head)
    assert_file(c.read_response())


# ---------------------------------------------------------------- methods


@pytest.mark.parametrize(
    "request_line",
    [
        b"POST /f.txt HTTP/1.1",
        b"PUT /f.txt HTTP/1.1",
        b"DELETE /f.txt HTTP/1.1",
        b"TRACE /f.txt HTTP/1.1",
        b"PATCH /f.txt HTTP/1.1",
    ],
    ids=lambda r: r.split()[0].decode(),
)
def test_known_method_on_static_file_is_405_with_allow(site, connect, request_line):
    """RFC 9110 15.5.6: 405 for a method the target resource does not support; the origin
    server MUST send Allow listing the supported methods (GET, HEAD, OPTIONS)."""
    c = connect(site)
    c.send(request_line + b"\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    resp = c.read_response()
    assert_error(resp, 405)
    allow = {m.strip() for m in resp[1].get("allow", "").split(",")}
    assert allow == {"GET", "HEAD", "OPTIONS"}, resp[3]


def test_connect_is_405_with_the_servers_methods(site, connect):
    """CONNECT (authority-form target, RFC 9112 3.2.3) names no resource here: 405, and
    Allow lists what the server's resources take, as OPTIONS * does."""
    c = connect(site)
    c.send(b"CONNECT t:80 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    resp = c.read_response()
    assert_error(resp, 405)
    allow = {m.strip() for m in resp[1].get("allow", "").split(",")}
    assert {"GET", "HEAD", "OPTIONS"} <= allow and "CONNECT" not in allow, resp[3]


def test_unknown_method_is_501(site, connect):
    """RFC 9110 9.1: an origin server that does not recognise a method SHOULD respond 501."""
    c = connect(site)
    c.send(b"FOO /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_error(c.read_response(), 501)


def test_method_is_case_sensitive(site, connect):
    """RFC 9110 9.1: the method token is case-sensitive; `get` is not GET, so it is an
    unknown method (501), never served as GET."""
    c = connect(site)
    c.send(b"get /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_error(c.read_response(), 501)


# ---------------------------------------------------------------- versions


def test_http_1_0_request_is_served(site, connect):
    """RFC 9112 2.3 / RFC 9110 2.5: an HTTP/1.0 request is answered (with HTTP/1.1, the
    server's highest conformant version)."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.0\r\n\r\n")
    resp = c.read_response()
    assert_file(resp)
    assert resp[3].startswith("HTTP/1.1 200 ") or resp[3].startswith("HTTP/1.0 200 ")


def test_higher_minor_version_is_served_as_1_1(site, connect):
    """RFC 9112 2.3: a recipient receiving a higher minor version of a major version it
    implements SHOULD process it as the highest minor version it conforms to (1.1)."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.2\r\nHost: t\r\n\r\n")
    assert_file(c.read_response())


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/3.0", b"HTTP/0.9", b"HTTP/9.9"])
def test_unsupported_major_version_is_505(site, connect, version):
    """RFC 9110 15.6.6: 505 for a major HTTP version the server does not support."""
    c = connect(site)
    c.send(b"GET /f.txt " + version + b"\r\nHost: t\r\n\r\n")
    resp = c.read_response()
    assert_error(resp, 505)
    assert resp[3].startswith("HTTP/1.1 505 ")


@pytest.mark.parametrize(
    "version",
    [b"HTTP/1.x", b"HTTP/11", b"http/1.1", b"HTTP/1.1.1", b"HTTP/1", b"HTTPS/1.1",
     b"HTTP/01.1", b"HTTP /1.1", b"HTTP/1.1 extra"],
)
def test_malformed_version_is_400(site, connect, version):
    """RFC 9112 2.3: HTTP-version = "HTTP" "/" DIGIT "." DIGIT, case-sensitive; RFC 9112 3:
    an invalid request-line SHOULD be answered 400."""
    c = connect(site)
    c.send(b"GET /f.txt " + version + b"\r\nHost: t\r\n\r\n")
    assert_error(c.read_response(), 400)


def test_request_line_without_version_gets_an_http_1_1_error(site, connect):
    """An HTTP/0.9-style request line (`GET /f.txt`, no version) is not answered with a bare
    HTTP/0.9 body: RFC 9112 3 makes it an invalid request-line (400); 505 is also fine."""
    c = connect(site)
    c.send(b"GET /f.txt\r\n\r\n")
    data = c.recv_all(timeout=3)
    assert data.startswith(b"HTTP/1."), data[:200]
    assert data.split(b" ")[1] in (b"400", b"505"), data[:200]
    assert FILE_BODY not in data


@pytest.mark.parametrize("target", [b"f.txt", b"../f.txt", b"?a=b"])
def test_invalid_request_target_is_400(site, connect, target):
    """RFC 9112 3.2: the request-target of a GET is origin-form (starting with "/") or
    absolute-form; anything else is an invalid request-line (400)."""
    c = connect(site)
    c.send(b"GET " + target + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_error(c.read_response(), 400)


# ---------------------------------------------------------------- Host, targets, leading CRLF


def test_http_1_1_without_host_is_400(site, connect):
    """RFC 9112 3.2: a server MUST respond 400 to an HTTP/1.1 request that lacks Host."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nUser-Agent: x\r\n\r\n")
    assert_error(c.read_response(), 400)


def test_two_host_fields_is_400(site, connect):
    """RFC 9112 3.2: ... and to any request with more than one Host field line."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
    assert_error(c.read_response(), 400)


@pytest.mark.parametrize("host", [b"exa mple.com", b"a/b", b"a@b", b"host:8x0", b"[::1"])
def test_invalid_host_value_is_400(site, connect, host):
    """RFC 9112 3.2: a server MUST respond 400 to a request whose Host field value is
    invalid (Host = uri-host [ ":" port ], RFC 9110 7.2)."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    assert_error(c.read_response(), 400)


def test_http_1_0_without_host_is_served(site, connect):
    """RFC 9112 3.2 requires Host in HTTP/1.1 requests only."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.0\r\n\r\n")
    assert_file(c.read_response())


def test_absolute_form_target_is_accepted(site, connect):
    """RFC 9112 3.2.2: a server MUST accept the absolute-form in requests."""
    c = connect(site)
    c.send(b"GET http://example.com/f.txt HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert_file(c.read_response())


def test_absolute_form_authority_overrides_host_field(site, connect):
    """RFC 9112 3.2.2: with an absolute-form target the server MUST ignore the received Host
    field and use the target's authority; the path still comes from the target."""
    c = connect(site)
    c.send(b"GET http://example.com/f.txt HTTP/1.1\r\nHost: other.example\r\n\r\n")
    assert_file(c.read_response())


def test_leading_crlf_before_request_line_is_ignored(site, connect):
    """RFC 9112 2.2: a server SHOULD ignore at least one empty line (CRLF) received prior to
    the request-line."""
    c = connect(site)
    c.send(b"\r\n" + GOOD)
    assert_file(c.read_response())


def test_crlf_between_pipelined_requests_is_ignored(site, connect):
    """RFC 9112 2.2: clients may send an extra CRLF after a request (after a POST body, as
    old clients do); the next request is still parsed."""
    c = connect(site)
    c.send(GOOD + b"\r\n" + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())


# ---------------------------------------------------------------- field syntax that must be accepted


def test_field_names_are_case_insensitive(site, connect):
    """RFC 9110 5.1: field names are case-insensitive (host, CONTENT-LENGTH)."""
    body = b"GET /evil HTTP/1.1\r\nhost: t\r\n\r\n"
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nhOsT: t\r\nCONTENT-LENGTH: %d\r\n\r\n" % len(body) + body + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())


def test_optional_whitespace_around_field_value_is_ignored(site, connect):
    """RFC 9112 5.1: OWS before and after the field value is not part of it."""
    body = b"hello"
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost:t\r\nContent-Length: \t5 \t\r\n\r\n" + body + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())


@pytest.mark.parametrize(
    "field",
    [b"X-Empty:", b"X-Empty: ", b"X-Tab: a\tb", b"X-Obs-Text: caf\xc3\xa9 \xff",
     b"X-Chars: !#$%&'*+-.^_`|~\"(),/:;<=>?@[\\]{}"],
    ids=["empty", "empty-ows", "htab", "obs-text", "vchars"],
)
def test_valid_unusual_field_values_are_accepted(site, connect, field):
    """RFC 9110 5.5: field-value = *field-content, which may be empty and may contain HTAB,
    any VCHAR and obs-text (%x80-FF)."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + field + b"\r\n\r\n")
    assert_file(c.read_response())


# ---------------------------------------------------------------- size limits


@pytest.mark.parametrize("length", [9000, 20000])
def test_request_line_longer_than_max_header_size_is_414(site, connect, length):
    """RFC 9112 3: a server receiving a request-target longer than it wishes to parse MUST
    respond 414; the limit is max_header_size (8k by default)."""
    c = connect(site)
    c.send(b"GET /" + b"a" * length + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_error(c.read_response(), 414)


@pytest.mark.parametrize(
    "fields",
    [[b"X-Big: " + b"b" * 9000], [b"X-F%d: %s" % (i, b"v" * 240) for i in range(40)]],
    ids=["one-large-field", "many-medium-fields"],
)
def test_header_section_larger_than_max_header_size_is_431(site, connect, fields):
    """RFC 6585 5: 431 when the header fields are too large (max_header_size, 8k)."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + b"\r\n".join(fields) + b"\r\n\r\n")
    assert_error(c.read_response(), 431)


def test_request_head_just_under_max_header_size_is_served(site, connect):
    """A 7 KB head (request-line 3 KB, fields 4 KB) is under the 8k default and is served."""
    c = connect(site)
    fields = b"".join(b"X-F%d: %s\r\n" % (i, b"v" * 390) for i in range(10))
    c.send(b"GET /f.txt?" + b"q" * 3000 + b" HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n")
    assert_file(c.read_response())


def test_max_headers_fields_are_accepted(site, connect):
    """max_headers (64) fields, Host included, are within the limit."""
    c = connect(site)
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(63))
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n")
    assert_file(c.read_response())


def test_more_than_max_headers_fields_is_431(site, connect):
    """More than max_headers (64) field lines → 431 (RFC 6585 5)."""
    c = connect(site)
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(64))
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n")
    assert_error(c.read_response(), 431)


def test_configured_max_header_size_is_enforced(start_server, docroot, connect):
    """`max_header_size 1k;` lowers the limit: a 2 KB field → 431."""
    (docroot / "f.txt").write_bytes(FILE_BODY)
    s = start_server(docroot, "max_header_size 1k;\n")
    c = connect(s)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-Big: " + b"b" * 2000 + b"\r\n\r\n")
    assert_error(c.read_response(), 431)


# ---------------------------------------------------------------- strict framing (smuggling)

CL_BODY = b"GET /evil HTTP/1.1\r\nHost: t\r\n\r\n"

FRAMING_VECTORS = {
    # line endings (RFC 9112 2.2)
    "bare-lf-everywhere": b"GET /f.txt HTTP/1.1\nHost: t\n\n",
    "bare-lf-after-field": b"GET /f.txt HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n",
    "bare-lf-after-request-line": b"GET /f.txt HTTP/1.1\nHost: t\r\n\r\n",
    "bare-cr-in-field-value": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n",
    "bare-cr-in-request-line": b"GET /f.txt\r HTTP/1.1\r\nHost: t\r\n\r\n",
    "bare-cr-ending-field": b"GET /f.txt HTTP/1.1\r\nHost: t\rX-A: b\r\n\r\n",
    # obs-fold (RFC 9112 5.2)
    "obs-fold-space": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n",
    "obs-fold-tab": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\r\n\tb\r\n\r\n",
    "line-starting-with-space-after-request-line": b"GET /f.txt HTTP/1.1\r\n Host: t\r\n\r\n",
    # whitespace between field name and colon (RFC 9112 5.1)
    "space-before-colon": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A : b\r\n\r\n",
    "tab-before-colon": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A\t: b\r\n\r\n",
    "space-before-colon-content-length": b"GET /f.txt HTTP/1.1\r\nHost: t\r\n"
    b"Content-Length : %d\r\n\r\n" % len(CL_BODY) + CL_BODY,
    "field-without-colon": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A b\r\n\r\n",
    "empty-field-name": b"GET /f.txt HTTP/1.1\r\nHost: t\r\n: b\r\n\r\n",
    # NUL and control bytes (RFC 9110 5.5, RFC 9112 3)
    "nul-in-field-value": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n",
    "ctl-in-field-value": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\x01b\r\n\r\n",
    "esc-in-field-value": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\x1b[31mb\r\n\r\n",
    "del-in-field-value": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX-A: a\x7fb\r\n\r\n",
    "ctl-in-field-name": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nX\x01A: b\r\n\r\n",
    "nul-in-request-target": b"GET /f\x00.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    "ctl-in-request-target": b"GET /f\x01.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    "del-in-request-target": b"GET /f\x7f.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    "ctl-in-method": b"G\x01ET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    "tab-as-request-line-separator": b"GET\t/f.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    # Content-Length (RFC 9110 8.6, RFC 9112 6.3 point 5)
    "duplicate-content-length": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
    b"Content-Length: 5\r\n\r\nhello",
    "conflicting-content-lengths": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
    b"Content-Length: 6\r\n\r\nhello!",
    "comma-joined-content-length": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 5\r\n\r\nhello",
    "content-length-abc": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n",
    "content-length-negative": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\nhello",
    "content-length-plus-sign": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nhello",
    "content-length-hex": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0x5\r\n\r\nhello",
    "content-length-trailing-garbage": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5x\r\n\r\nhello",
    "content-length-inner-space": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1 0\r\n\r\n0123456789",
    "content-length-empty": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length:\r\n\r\n",
    # Transfer-Encoding (RFC 9112 6.1, 6.3, 7)
    "content-length-and-chunked": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "chunked-and-content-length": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
    b"Content-Length: 5\r\n\r\n0\r\n\r\n",
    "chunked-identity": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
    b"0\r\n\r\n",
    "chunked-chunked": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
    b"0\r\n\r\n",
    "chunked-in-two-fields": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "transfer-encoding-in-http-1-0": b"GET /f.txt HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\n",
    # chunked body (RFC 9112 7.1)
    "chunk-size-not-hex": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"zz\r\nhello\r\n0\r\n\r\n",
    "chunk-size-missing": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b";ext=1\r\nhello\r\n0\r\n\r\n",
    "chunk-size-negative": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"-5\r\nhello\r\n0\r\n\r\n",
    "chunk-size-0x-prefix": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0x5\r\nhello\r\n0\r\n\r\n",
    "chunk-data-longer-than-size": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhelloXX\r\n0\r\n\r\n",
    "chunk-missing-crlf-after-data": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello0\r\n\r\n",
    "chunk-bare-lf": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\nhello\n0\n\n",
    "chunk-bare-lf-after-size": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\nhello\r\n0\r\n\r\n",
    "chunk-ext-bare-lf": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext\nhello\r\n0\r\n\r\n",
    "chunk-ext-ctl": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;a=\x01\r\nhello\r\n0\r\n\r\n",
    "trailer-bare-lf": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\nX-T: v\n\r\n",
    "trailer-obs-fold": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\nX-T: v\r\n w\r\n\r\n",
    "chunk-bare-cr-after-data": b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r0\r\n\r\n",
}


@pytest.mark.parametrize("raw", FRAMING_VECTORS.values(), ids=FRAMING_VECTORS.keys())
def test_invalid_framing_is_400_and_closes(site, connect, raw):
    """RFC 9112 2.2 (bare CR/LF), 5.1 (space before colon: MUST 400), 5.2 (obs-fold),
    RFC 9110 5.5 (NUL/CTL in fields), RFC 9112 6.1/6.3 (Content-Length and
    Transfer-Encoding: invalid framing is unrecoverable, respond 400 and close), 7.1
    (chunked syntax). The valid request pipelined behind must never be answered."""
    c = connect(site)
    c.send(raw + GOOD)
    assert_rejected_and_closed(c, 400)


def test_huge_content_length_is_rejected_and_closes(site, connect):
    """RFC 9110 8.6: a recipient MUST anticipate large Content-Length values and prevent
    integer overflow; 20 digits overflow 64 bits: 400 (or 413, larger than max_body_size)."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n" + GOOD)
    st, h, body, head = c.read_response()
    assert st in (400, 413), head
    assert c.buf == b""
    assert c.is_closed()


def test_huge_chunk_size_is_rejected_and_closes(site, connect):
    """RFC 9112 7.1: recipients MUST anticipate large hex numbers and prevent integer
    overflow; a 20-digit chunk-size → 400 (or 413) and close."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"10000000000000000005\r\nhello\r\n0\r\n\r\n" + GOOD)
    st, h, body, head = c.read_response()
    assert st in (400, 413), head
    assert c.buf == b""
    assert c.is_closed()


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"gzip", b"deflate, chunked"])
def test_unsupported_transfer_coding_is_501(site, connect, coding):
    """RFC 9112 6.1: a server receiving a request with a transfer coding it does not
    understand SHOULD respond 501."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: " + coding + b"\r\n\r\n0\r\n\r\n")
    assert_error(c.read_response(), 501)


def test_transfer_coding_without_final_chunked_closes_connection(site, connect):
    """RFC 9112 6.3 point 4: chunked not final in a request → the body length cannot be
    determined; the server MUST close the connection after responding."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n" + GOOD)
    st, _, _, head = c.read_response()
    assert st in (400, 501), head
    assert c.buf == b""
    assert c.is_closed()


# ---------------------------------------------------------------- bodies read or skipped exactly


def _framed(framing, body):
    if framing == "content-length":
        return b"Content-Length: %d\r\n\r\n" % len(body) + body
    if framing == "content-length-zero":
        return b"Content-Length: 0\r\n\r\n"
    if framing == "chunked":
        return b"Transfer-Encoding: chunked\r\n\r\n" + chunked(body)
    if framing == "chunked-one-byte-chunks":
        return b"Transfer-Encoding: chunked\r\n\r\n" + chunked(body, 1)
    if framing == "chunked-case-insensitive":
        return b"Transfer-Encoding: Chunked\r\n\r\n" + chunked(body)
    if framing == "chunked-empty":
        return b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    raise AssertionError(framing)


FRAMINGS = ["content-length", "content-length-zero", "chunked", "chunked-one-byte-chunks",
            "chunked-case-insensitive", "chunked-empty"]


@pytest.mark.parametrize("framing", FRAMINGS)
def test_get_body_is_skipped_before_next_pipelined_request(site, connect, framing):
    """RFC 9112 6.3: the body length is determined by Content-Length or chunked framing;
    a GET's content is read or discarded exactly, so the pipelined request behind it (and
    not the request-shaped body) is answered next (RFC 9112 9.3.2)."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + _framed(framing, CL_BODY) + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())
    assert no_more_data(c)


@pytest.mark.parametrize("framing", FRAMINGS)
def test_405_body_is_skipped_before_next_pipelined_request(site, connect, framing):
    """A POST answered 405 (RFC 9110 15.5.6) still has its content consumed by its framing,
    so the pipelined request behind it is answered correctly."""
    c = connect(site)
    c.send(b"POST /f.txt HTTP/1.1\r\nHost: t\r\n" + _framed(framing, CL_BODY) + GOOD)
    assert_error(c.read_response(), 405)
    assert_file(c.read_response())
    assert no_more_data(c)


def test_http_1_0_body_with_keep_alive_is_skipped(site, connect):
    """An HTTP/1.0 request with Content-Length and Connection: keep-alive; the next
    request on the connection is answered (RFC 9112 6.3, 9.3)."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: %d\r\n\r\n"
           % len(CL_BODY) + CL_BODY + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())


def test_content_length_with_leading_zeros_is_accepted(site, connect):
    """RFC 9110 8.6: Content-Length = 1*DIGIT, so `005` is a valid 5."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 005\r\n\r\nhello" + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_body_is_skipped_across_many_reads(site, connect, framing):
    """A 1,000,000-byte body (under the 1m default limit, much larger than the 16k read
    buffer) is consumed exactly; the pipelined request behind it is answered."""
    data = (bytes(range(256)) * 3907)[:1000000]
    assert len(data) == 1000000
    if framing == "content-length":
        body = b"Content-Length: %d\r\n\r\n" % len(data) + data
    else:
        body = b"Transfer-Encoding: chunked\r\n\r\n" + chunked(data, 65536)
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + body + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())
    assert no_more_data(c)


def test_chunk_extensions_and_trailers_are_accepted(site, connect):
    """RFC 9112 7.1.1: a recipient MUST ignore unrecognised chunk extensions (token and
    quoted-string values); 7.1.2: trailer fields after the last chunk are allowed."""
    body = (b"Transfer-Encoding: chunked\r\n\r\n"
            b"5;name=value\r\nhello\r\n"
            b"6 ; q=\"a;b \\\" c\"\r\n world\r\n"
            b"0;last\r\nX-Trailer: 1\r\nX-Other: two\r\n\r\n")
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + body + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())


def test_chunk_size_hex_case_and_leading_zeros_are_accepted(site, connect):
    """RFC 9112 7.1: chunk-size = 1*HEXDIG, so upper/lower case and leading zeros are valid."""
    data = b"0123456789" + b"abcdefghijklmnopqrstuvwxyzABCDEF"  # 10 + 32 bytes
    body = (b"Transfer-Encoding: chunked\r\n\r\n" + b"00A\r\n" + data[:10] + b"\r\n"
            + b"0020\r\n" + data[10:] + b"\r\n" + b"000\r\n\r\n")
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + body + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())


# ---------------------------------------------------------------- max_body_size


@pytest.fixture
def small_body_site(start_server, docroot):
    (docroot / "f.txt").write_bytes(FILE_BODY)
    return start_server(docroot, "max_body_size 1k;\n")


def test_content_length_over_max_body_size_is_413_at_once(small_body_site, connect):
    """RFC 9110 15.5.14: 413 when the content is larger than the server will process; for a
    Content-Length the server decides from the head alone (no body sent yet), then closes."""
    c = connect(small_body_site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n")
    assert_error(c.read_response(timeout=3), 413)
    assert c.is_closed()


def test_chunked_body_over_max_body_size_is_413_and_closes(small_body_site, connect):
    """RFC 9110 15.5.14: 413 as soon as the decoded chunked size passes max_body_size (the
    rest of the body and its last chunk are never sent), then close."""
    c = connect(small_body_site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"258\r\n" + b"x" * 600 + b"\r\n" + b"258\r\n" + b"y" * 600 + b"\r\n")
    assert_error(c.read_response(timeout=3), 413)
    assert c.is_closed()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_body_of_exactly_max_body_size_is_accepted(small_body_site, connect, framing):
    """A body of exactly max_body_size (1024 bytes) is within the limit."""
    c = connect(small_body_site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n" + _framed(framing, b"z" * 1024) + GOOD)
    assert_file(c.read_response())
    assert_file(c.read_response())


# ---------------------------------------------------------------- Expect


def _wait_readable(client, timeout):
    r, _, _ = select.select([client.sock], [], [], timeout)
    return bool(r)


@pytest.mark.parametrize("expect", [b"100-continue", b"100-Continue"])
def test_expect_100_continue_gets_immediate_final_response_and_close(site, connect, expect):
    """RFC 9110 10.1.1: a server receiving 100-continue in an HTTP/1.1 request MUST either
    send an immediate final response or an immediate 100 (Continue); the field value is
    case-insensitive. A static file does not need the body, so lfhttpd answers at once
    with the file and `Connection: close` (it never asks for the body), then closes."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nExpect: " + expect + b"\r\nContent-Length: 5\r\n\r\n")
    assert _wait_readable(c, 1.0), "no 100 Continue nor final response within 1 s"
    resp = c.read_response(timeout=1)
    assert_file(resp)
    assert resp[1].get("connection") == "close", resp[3]
    assert c.is_closed(), "the connection stayed open after Connection: close"


@pytest.mark.parametrize("method,final", [(b"GET", 200), (b"POST", 405)])
def test_expect_100_continue_client_gets_correct_final_response(site, connect, method, final):
    """RFC 9110 10.1.1 / 15.2.1: the client waits (up to 1 s) for 100 Continue. Neither
    a static GET nor a refused POST needs the body, so the final response comes at once,
    without a 100, says `Connection: close`, and the connection closes: what the client
    sends next (the body, a request hidden in it, a pipelined request) is never answered."""
    c = connect(site)
    c.send(method + b" /f.txt HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
           % len(CL_BODY))
    assert _wait_readable(c, 1.0), "no 100 Continue nor final response within 1 s"
    resp = c.read_response(timeout=1)
    if final == 200:
        assert_file(resp)
    else:
        assert_error(resp, final)
    assert resp[1].get("connection") == "close", resp[3]
    try:
        c.send(CL_BODY + GOOD)
    except (BrokenPipeError, ConnectionResetError):
        pass  # already closed: the expected outcome
    assert c.recv_all(timeout=3) == b"", "an answer after Connection: close"
    assert c.is_closed(timeout=0.1)


def test_expect_100_continue_in_http_1_0_is_ignored(site, connect):
    """RFC 9110 10.1.1: a server that receives 100-continue in an HTTP/1.0 request MUST
    ignore that expectation: no 100 (Continue), no 417, just the response."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
    resp = c.read_response()
    assert resp[0] != 100, resp[3]
    assert_file(resp)


@pytest.mark.parametrize("expect", [b"foo", b"200-ok", b"100-continue-please"])
def test_unknown_expectation_is_417(site, connect, expect):
    """RFC 9110 10.1.1 / 15.5.18: a server receiving an expectation other than
    100-continue may respond 417 (Expectation Failed); lfhttpd does."""
    c = connect(site)
    c.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\nExpect: " + expect + b"\r\n\r\n")
    assert_error(c.read_response(), 417)
