"""`add_trailer NAME VALUE [always]` (and `chunked_transfer_encoding`), as nginx runs them:
an answer with trailers goes chunked to an HTTP/1.1 client (a file's too), its last chunk
followed by them, on the statuses of add_header or every status with `always`; never for
HEAD, 204, 304 or an HTTP/1.0 client; inherited as a list of its own.

One configuration is run as written by nginx and by lfhttpd; each test sends one request
to both and compares the status, the framing (chunked or not), the decoded body and the
trailers.
"""
import socket

import pytest

from conftest import Nginx, Server, check_clean_exit, free_port, with_ports, scaled

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    server_name _;
    default_type text/plain;
    root ROOT;

    add_trailer X-Server server;

    location /f/ {
        add_trailer X-Uri $uri;
        add_trailer X-Empty "";
        add_trailer X-Always gone always;
    }
    location /hdr/ {
        add_header X-Head yes;
    }
    location /sent/ {
        add_trailer X-First one;
        add_trailer X-Second "[$sent_trailer_x_first]";
    }
    location = /ret {
        add_trailer X-Ret yes;
        return 200 "returned\n";
    }
    location = /nocontent {
        add_trailer X-Ret yes always;
        return 204;
    }
    location /off/ {
        chunked_transfer_encoding off;
    }
    location /up/ {
        add_trailer X-Length $upstream_response_length;
        proxy_pass http://127.0.0.1:{port1}/;
        proxy_http_version 1.1;
    }
    location /upoff/ {
        chunked_transfer_encoding off;
        proxy_pass http://127.0.0.1:{port1}/;
        proxy_http_version 1.1;
    }
}
server {
    listen 127.0.0.1:{port1};
    default_type text/plain;
    root ROOT;
    location /chunked/ {
        add_trailer X-Up up;
    }
}
"""

FILES = {"f/a.txt": "file a\n", "hdr/a.txt": "hdr\n", "sent/a.txt": "sent\n",
         "off/a.txt": "off\n", "a.txt": "upstream file\n",
         "chunked/a.txt": "chunked upstream\n"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(root)


def start_lfhttpd(dirpath, site):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port(), free_port()]
        top = "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
        try:
            return Server(dirpath / f"try{attempt}", None,
                          conf=top + with_ports(site, ports)), ports[0]
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tree, tmp_path_factory):
    site = SITE.replace("ROOT", tree)
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, site, http=True)
    try:
        ours, port = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"), site)
    except BaseException:
        theirs.stop()
        raise
    yield theirs.port, port
    theirs.stop()
    check_clean_exit(ours)


def dechunk(raw):
    """(body, {lowercase trailer name: value}) of a chunked body."""
    body, trailers = b"", {}
    while True:
        line, _, raw = raw.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            break
        body, raw = body + raw[:size], raw[size + 2:]
    for line in raw.decode("latin-1").split("\r\n"):
        if line:
            name, _, value = line.partition(":")
            trailers[name.strip().lower()] = value.strip()
    return body.decode("latin-1"), trailers


def exchange(port, target, method="GET", version="1.1"):
    """(status, framing, body, trailers): framing "chunked", "length" or "close"."""
    head = (f"{method} {target} HTTP/{version}\r\nHost: example.test\r\n"
            "Connection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(head.encode("latin-1"))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    top, _, raw = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    status = int(lines[0].split()[1])
    if headers.get("transfer-encoding") == "chunked":
        return (status, "chunked") + dechunk(raw)
    framing = "length" if "content-length" in headers else "close"
    return status, framing, raw.decode("latin-1"), {}


def same(daemons, target, expected, method="GET", version="1.1", body=True):
    """nginx answers expected (status, framing, body, trailers; body None: not compared),
    and lfhttpd the same."""
    for who, port in zip(("nginx", "lfhttpd"), daemons):
        got = exchange(port, target, method, version)
        if expected[2] is None:
            got = got[:2] + (None,) + got[3:]
        assert got == expected, who


def test_file_goes_chunked_with_its_trailers_after_it(daemons):
    # the server's X-Server is not among them: the location has a list of its own
    same(daemons, "/f/a.txt", (200, "chunked", "file a\n",
                               {"x-uri": "/f/a.txt", "x-always": "gone"}))


def test_block_without_add_trailer_has_the_server_s(daemons):
    same(daemons, "/a.txt", (200, "chunked", "upstream file\n", {"x-server": "server"}))


def test_add_header_of_the_location_leaves_the_server_s_trailers(daemons):
    same(daemons, "/hdr/a.txt", (200, "chunked", "hdr\n", {"x-server": "server"}))


def test_error_status_has_only_the_always_trailers(daemons):
    same(daemons, "/f/missing", (404, "chunked", None, {"x-always": "gone"}))


def test_error_status_without_an_always_trailer_keeps_its_length(daemons):
    same(daemons, "/missing", (404, "length", None, {}))


def test_sent_trailer_reads_a_trailer_made_before(daemons):
    same(daemons, "/sent/a.txt", (200, "chunked", "sent\n",
                                  {"x-first": "one", "x-second": "[one]"}))


def test_return_text_has_trailers(daemons):
    same(daemons, "/ret", (200, "chunked", "returned\n", {"x-ret": "yes"}))


def test_no_content_is_not_chunked(daemons):
    for who, port in zip(("nginx", "lfhttpd"), daemons):
        status, framing, body, trailers = exchange(port, "/nocontent")
        assert (status, framing != "chunked", body, trailers) == (204, True, "", {}), who


def test_head_keeps_the_length_and_sends_no_trailers(daemons):
    same(daemons, "/f/a.txt", (200, "length", "", {}), method="HEAD")


def test_http10_client_gets_the_length_and_no_trailers(daemons):
    same(daemons, "/f/a.txt", (200, "length", "file a\n", {}), version="1.0")


def test_chunked_transfer_encoding_off_sends_no_trailers(daemons):
    same(daemons, "/off/a.txt", (200, "length", "off\n", {}))


def test_proxied_answer_has_trailers_made_at_its_end(daemons):
    same(daemons, "/up/a.txt", (200, "chunked", "upstream file\n", {"x-length": "14"}))


def test_proxied_answer_without_chunked_keeps_the_upstream_s_length(daemons):
    same(daemons, "/upoff/a.txt", (200, "length", "upstream file\n", {}))


def test_proxied_chunked_answer_passes_its_own_trailers_not_the_upstream_s(daemons):
    same(daemons, "/up/chunked/a.txt", (200, "chunked", "chunked upstream\n",
                                        {"x-length": "38"}))


def test_chunked_transfer_encoding_off_ends_an_answer_of_no_length_with_the_close(daemons):
    same(daemons, "/upoff/chunked/a.txt", (200, "close", "chunked upstream\n", {}))
