"""What an HTTP/1.1 conformance probe run from outside checks, with the default limits.

OPTIONS (RFC 9110 9.3.7): "OPTIONS *" asks about the server, OPTIONS on a path about
that resource; both answer 200 with Allow and an empty body (Content-Length: 0). A long
request target is accepted as nginx accepts it (a request line up to 8 KiB); an over-long
method is 501, not 414 (RFC 9112 3). An If-Modified-Since later than the server's clock is
ignored (RFC 9110 13.1.3). A body over max_body_size is 413 whether its size comes from
Content-Length or from a chunk size. The echo handler answers with the body alone.
"""
import pytest

FUTURE = b"Fri, 01 Jan 2100 00:00:00 GMT"


@pytest.fixture
def site(start_server, docroot):
    (docroot / "f.txt").write_bytes(b"file\n")
    (docroot / "dir").mkdir()
    return start_server(docroot, "handler /echo echo;\nhandler /hello hello;\n"
                                 "handler /request request;\n")


def ask(connect, server, raw):
    c = connect(server)
    c.send(raw)
    return c.read_response()


def allow_set(headers):
    return {m.strip() for m in headers["allow"].split(",")}


# ---------------------------------------------------------------- OPTIONS


def test_options_asterisk_is_200_with_allow_and_empty_body(site, connect):
    st, h, body, head = ask(connect, site, b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 200, head
    assert {"GET", "HEAD", "OPTIONS"} <= allow_set(h), head
    assert h["content-length"] == "0", head
    assert body == b""


def test_options_on_a_file_is_200_with_allow_get_head_options(site, connect):
    st, h, body, head = ask(connect, site, b"OPTIONS /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 200, head
    assert allow_set(h) == {"GET", "HEAD", "OPTIONS"}, head
    assert h["content-length"] == "0", head


def test_options_on_a_directory_is_200_with_allow(site, connect):
    st, h, _, head = ask(connect, site, b"OPTIONS /dir/ HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 200, head
    assert allow_set(h) == {"GET", "HEAD", "OPTIONS"}, head


def test_options_on_a_missing_file_is_404(site, connect):
    st, _, _, head = ask(connect, site, b"OPTIONS /nothing HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 404, head


def test_options_on_a_handler_lists_the_methods_it_takes(site, connect):
    st, h, body, head = ask(connect, site, b"OPTIONS /hello HTTP/1.1\r\nHost: t\r\n\r\n")
    assert (st, body) == (200, b""), head
    assert allow_set(h) == {"GET", "HEAD", "OPTIONS"}, head
    st, h, body, head = ask(connect, site, b"OPTIONS /echo HTTP/1.1\r\nHost: t\r\n\r\n")
    assert (st, body) == (200, b""), head
    assert allow_set(h) == {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}, head


def test_post_to_a_file_is_405_whose_allow_names_options(site, connect):
    st, h, _, head = ask(connect, site,
                         b"POST /f.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    assert st == 405, head
    assert allow_set(h) == {"GET", "HEAD", "OPTIONS"}, head


# ---------------------------------------------------------------- limits


def test_7900_byte_target_is_accepted_with_default_limits(site, connect):
    """nginx answers 404 for it (no such file), not 414: its request line may be 8 KiB."""
    target = b"/" + b"a" * 7899
    st, _, _, head = ask(connect, site, b"GET " + target + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 404, head


def test_7900_byte_target_under_a_handler_reaches_it(site, connect):
    target = b"/request/" + b"b" * 7891
    st, _, body, head = ask(connect, site, b"GET " + target + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 200, head
    assert body.startswith(b"GET " + target + b" HTTP/1.1\r\n")


def test_target_past_max_header_size_is_still_414(site, connect):
    st, _, _, head = ask(connect, site, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 414, head


def test_overlong_method_is_501_not_414(site, connect):
    st, _, _, head = ask(connect, site, b"A" * 10000 + b" / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 501, head


def test_unknown_method_with_an_overlong_target_is_501(site, connect):
    st, _, _, head = ask(connect, site,
                         b"FROB /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert st == 501, head


# ---------------------------------------------------------------- conditionals


def test_if_modified_since_in_the_future_is_ignored(site, connect):
    st, _, body, head = ask(connect, site, b"GET /f.txt HTTP/1.1\r\nHost: t\r\n"
                                           b"If-Modified-Since: " + FUTURE + b"\r\n\r\n")
    assert (st, body) == (200, b"file\n"), head


def test_if_modified_since_of_the_servers_own_date_is_still_304(site, connect):
    """The check for the future leaves the present alone: a date from the server's own
    Date field (not later than its clock) still gives 304."""
    _, h, _, _ = ask(connect, site, b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n")
    st, _, _, head = ask(connect, site, b"GET /f.txt HTTP/1.1\r\nHost: t\r\n"
                                        b"If-Modified-Since: " + h["date"].encode() +
                                        b"\r\n\r\n")
    assert st == 304, head


# ---------------------------------------------------------------- body limits


@pytest.mark.parametrize("path", [b"/f.txt", b"/echo"], ids=["takes-no-body", "takes-body"])
def test_content_length_over_max_body_size_is_413(site, connect, path):
    st, h, _, head = ask(connect, site, b"POST " + path + b" HTTP/1.1\r\nHost: t\r\n"
                                        b"Content-Length: 99999999999\r\n\r\n")
    assert st == 413, head
    assert h.get("connection") == "close", head


@pytest.mark.parametrize("path", [b"/f.txt", b"/echo"], ids=["takes-no-body", "takes-body"])
def test_chunk_size_over_max_body_size_is_413_like_content_length(site, connect, path):
    st, h, _, head = ask(connect, site, b"POST " + path + b" HTTP/1.1\r\nHost: t\r\n"
                                        b"Transfer-Encoding: chunked\r\n\r\n"
                                        b"174876e7ff\r\n")  # 99999999999
    assert st == 413, head
    assert h.get("connection") == "close", head


# ---------------------------------------------------------------- echo


def test_echo_answers_with_the_body_and_its_content_type(site, connect):
    data = b'{"a": [1, 2, "\xc3\xa9"]}'
    st, h, body, head = ask(connect, site,
                            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                            b"\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    assert st == 200, head
    assert body == data
    assert h["content-type"] == "application/json", head


def test_echo_of_a_chunked_body_is_the_decoded_body(site, connect):
    st, h, body, head = ask(connect, site,
                            b"PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
                            b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert (st, body) == (200, b"abcde"), head
    assert h["content-type"] == "text/plain", head


def test_echo_without_a_body_is_200_and_empty(site, connect):
    st, h, body, head = ask(connect, site, b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
    assert (st, body) == (200, b""), head
    assert "content-type" not in h, head


def test_request_handler_shows_request_line_fields_and_body(site, connect):
    st, h, body, head = ask(connect, site, b"POST /request?q HTTP/1.1\r\nHost: t\r\n"
                                           b"Content-Length: 2\r\n\r\nhi")
    assert st == 200, head
    assert h["content-type"] == "text/plain; charset=utf-8", head
    assert body == b"POST /request?q HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi"
