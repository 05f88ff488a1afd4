"""Behaviours nginx's own test suite (nginx-tests) found different, against nginx.

Each test runs one `http { }` text, as written, by nginx and by lfhttpd, sends the same
request to both, and compares what the behaviour is about. The server blocks listen on
{port0}; ROOT is a directory of the test's files.
"""
import email.utils
import os
import socket
from datetime import timedelta

import pytest

from conftest import Nginx, Server, free_port, with_ports, scaled, wait_until

LFHTTPD_TOP = "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"


def start_lfhttpd(dirpath, text, top=""):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        port = free_port()
        try:
            conf = LFHTTPD_TOP + top + "http {\n" + with_ports(text, [port]) + "}\n"
            return Server(dirpath / f"lf{attempt}", None, conf=conf)
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


def ask(port, request):
    """The raw request's answer: (status, {lowercase name: value}, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(request.encode("latin-1"))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


@pytest.fixture
def both(tmp_path, nginx):
    """both(text, request) -> (nginx's answer, lfhttpd's answer), each as ask() gives."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "index.html").write_text("index\n")
    (root / "dir").mkdir()
    (root / "dir" / "index.html").write_text("dir index\n")
    started = []

    def run(text, request):
        text = text.replace("ROOT", str(root))
        theirs = nginx(None, text, http=True)
        ours = start_lfhttpd(tmp_path, text)
        started.append(ours)
        return ask(theirs.port, request), ask(ours.port, request)

    yield run
    for s in started:
        s.stop()


def get(target, host="localhost", extra=""):
    return f"GET {target} HTTP/1.0\r\nHost: {host}\r\n{extra}\r\n"


def test_server_name_repeated_in_a_server_adds_names(both):
    text = """server { listen 127.0.0.1:{port0}; server_name default; return 204; }
    server { listen 127.0.0.1:{port0}; server_name one.test; server_name two.test;
             add_header X-Server $server_name always; return 204; }"""
    theirs, ours = both(text, get("/", host="two.test"))
    assert theirs[1]["x-server"] == "one.test"
    assert ours[1]["x-server"] == theirs[1]["x-server"]


def test_server_name_variable_of_a_dot_name_has_no_leading_dot(both):
    text = """server { listen 127.0.0.1:{port0}; server_name default; return 204; }
    server { listen 127.0.0.1:{port0}; server_name .dot.test;
             add_header X-Server $server_name always; return 204; }"""
    theirs, ours = both(text, get("/", host="www.dot.test"))
    assert theirs[1]["x-server"] == "dot.test"
    assert ours[1]["x-server"] == theirs[1]["x-server"]


REDIRECTS = """server { listen 127.0.0.1:{port0}; server_name main.test;
    location /r { return 301 /to; }
    location /named { server_name_in_redirect on; return 301 /to; }
    location /noport { port_in_redirect off; return 301 /to; } }"""


def test_server_name_in_redirect_on_names_the_server_not_the_host(both):
    theirs, ours = both(REDIRECTS, get("/named", host="other.test"))
    assert theirs[1]["location"].startswith("http://main.test:")
    assert ours[1]["location"].split(":")[:2] == theirs[1]["location"].split(":")[:2]


def test_port_in_redirect_off_leaves_the_port_out(both):
    theirs, ours = both(REDIRECTS, get("/noport", host="other.test"))
    assert theirs[1]["location"] == "http://other.test/to"
    assert ours[1]["location"] == theirs[1]["location"]



HOSTS = """server { listen 127.0.0.1:{port0}; server_name x;
    location / { return 200 "host=$host"; } }"""


def test_host_with_an_empty_port_is_the_host_alone(both):
    theirs, ours = both(HOSTS, get("/", host="example.test:"))
    assert theirs[0] == 200 and theirs[2] == b"host=example.test"
    assert (ours[0], ours[2]) == (theirs[0], theirs[2])


@pytest.mark.parametrize("host", [".", "a..example.test", "[ab..cd::1]"])
def test_host_with_an_empty_label_is_400(both, host):
    theirs, ours = both(HOSTS, get("/", host=host))
    assert theirs[0] == 400
    assert ours[0] == 400


IMS = """server { listen 127.0.0.1:{port0}; server_name x; root ROOT;
    location /exact/ { if_modified_since exact; alias ROOT/; }
    location /before/ { if_modified_since before; alias ROOT/; }
    location /off/ { if_modified_since off; alias ROOT/; } }"""


def last_modified_plus(both_root_file, seconds):
    import email.utils
    import os
    return email.utils.formatdate(os.stat(both_root_file).st_mtime // 1 + seconds, usegmt=True)


def test_if_modified_since_exact_answers_a_later_date_in_full(both, tmp_path):
    ims = last_modified_plus(tmp_path / "root" / "index.html", 1)
    theirs, ours = both(IMS, get("/exact/index.html", extra=f"If-Modified-Since: {ims}\r\n"))
    assert theirs[0] == 200
    assert ours[0] == theirs[0]


def test_if_modified_since_before_takes_a_date_in_the_future(both):
    ims = "Tue, 19 Jan 2038 03:14:07 GMT"
    theirs, ours = both(IMS, get("/before/index.html", extra=f"If-Modified-Since: {ims}\r\n"))
    assert theirs[0] == 304
    assert ours[0] == theirs[0]


def test_if_modified_since_off_ignores_the_files_own_date(both, tmp_path):
    ims = last_modified_plus(tmp_path / "root" / "index.html", 0)
    theirs, ours = both(IMS, get("/off/index.html", extra=f"If-Modified-Since: {ims}\r\n"))
    assert theirs[0] == 200
    assert ours[0] == theirs[0]


EXPIRES = """server { listen 127.0.0.1:{port0}; server_name x; root ROOT;
    location /daily/ { expires @15h30m33s; alias ROOT/; }
    location /modified/ { expires modified 1h; alias ROOT/; }
    location /var/ { expires $arg_e; alias ROOT/; } }"""


def test_expires_at_a_time_of_day_is_its_next_occurrence(both):
    theirs, ours = both(EXPIRES, get("/daily/index.html"))
    assert theirs[1]["expires"].endswith("GMT") and theirs[1]["cache-control"] != "no-cache"
    assert ours[1]["expires"] == theirs[1]["expires"]


def test_expires_modified_counts_from_the_files_date(both, tmp_path):
    os.utime(tmp_path / "root" / "index.html", (1000000000, 1000000000))  # 2001
    theirs, ours = both(EXPIRES, get("/modified/index.html"))
    assert theirs[1]["cache-control"] == "no-cache"  # an hour after 2001 is past
    lm = email.utils.parsedate_to_datetime(theirs[1]["last-modified"])
    assert email.utils.parsedate_to_datetime(theirs[1]["expires"]) - lm == timedelta(hours=1)
    assert ours[1]["expires"] == theirs[1]["expires"]


def test_expires_with_a_variable_reads_it_per_request(both):
    theirs, ours = both(EXPIRES, get("/var/index.html?e=2h"))
    assert theirs[1]["cache-control"] == "max-age=7200"
    assert ours[1]["cache-control"] == theirs[1]["cache-control"]


ERROR_PAGES = """server { listen 127.0.0.1:{port0}; server_name x; root ROOT;
    location /first { error_page 302 /page; return 302 "first"; }
    location /page { return 302 "http://example.com/"; }
    location /missing { error_page 404 /dir; return 404; } }"""


def test_error_page_that_redirects_sends_its_own_location(both):
    theirs, ours = both(ERROR_PAGES, get("/first"))
    assert (theirs[0], theirs[1]["location"]) == (302, "http://example.com/")
    assert (ours[0], ours[1].get("location")) == (theirs[0], theirs[1]["location"])


def test_error_page_to_a_directory_without_its_slash_is_its_301(both):
    theirs, ours = both(ERROR_PAGES, get("/missing"))
    assert theirs[0] == 301 and theirs[1]["location"].endswith("/dir/")
    assert ours[0] == 301 and ours[1].get("location", "").endswith("/dir/")


INDEX = """server { listen 127.0.0.1:{port0}; server_name x; root ROOT;
    add_header X-URI $uri always;
    location / { }
    location /abs/ { index /dir/index.html; }
    location /var/ { alias ROOT/; index $arg_n.html; }
    location /loop/ { index /loop/; } }"""


def test_index_file_is_an_internal_redirect_that_sets_uri(both):
    theirs, ours = both(INDEX, get("/"))
    assert (theirs[0], theirs[1]["x-uri"], theirs[2]) == (200, "/index.html", b"index\n")
    assert (ours[0], ours[1].get("x-uri"), ours[2]) == (theirs[0], theirs[1]["x-uri"], theirs[2])


def test_index_name_that_is_an_absolute_uri_is_redirected_to(both):
    theirs, ours = both(INDEX, get("/abs/"))
    assert (theirs[0], theirs[1]["x-uri"], theirs[2]) == (200, "/dir/index.html", b"dir index\n")
    assert (ours[0], ours[1].get("x-uri"), ours[2]) == (theirs[0], theirs[1]["x-uri"], theirs[2])


def test_index_name_with_a_variable_is_read_per_request(both):
    theirs, ours = both(INDEX, get("/var/?n=index"))
    assert (theirs[0], theirs[1]["x-uri"]) == (200, "/var/index.html")
    assert (ours[0], ours[1].get("x-uri")) == (theirs[0], theirs[1]["x-uri"])


def test_index_that_redirects_to_its_own_directory_is_a_500(both):
    theirs, ours = both(INDEX, get("/loop/"))
    assert theirs[0] == 500
    assert ours[0] == 500


def test_map_key_named_server_is_a_key(both):
    text = """map $arg_k $v { default none; server named-server; }
    server { listen 127.0.0.1:{port0}; server_name x;
             location / { return 200 "v=$v"; } }"""
    theirs, ours = both(text, get("/?k=server"))
    assert (theirs[0], theirs[2]) == (200, b"v=named-server")
    assert (ours[0], ours[2]) == (theirs[0], theirs[2])


RETURNS = """server { listen 127.0.0.1:{port0}; server_name x; root ROOT;
    location /return200 { return 200; }
    location /return405 { return 405; }
    location /return204 { return 204; }
    location /e404 { error_page 404 /return405; return 404; }
    location /e500 { error_page 500 /missing.html; return 500; }
    location /e405 { error_page 405 /return204; return 405; } }"""


def test_return_of_a_2xx_without_text_has_an_empty_body(both):
    theirs, ours = both(RETURNS, get("/return200"))
    assert (theirs[0], theirs[2]) == (200, b"")
    assert (ours[0], ours[2]) == (theirs[0], theirs[2])


def test_error_page_that_answers_an_error_of_its_own_sends_that_status(both):
    theirs, ours = both(RETURNS, get("/e404"))
    assert theirs[0] == 405
    assert ours[0] == theirs[0]


def test_error_page_whose_file_is_missing_is_that_404(both):
    theirs, ours = both(RETURNS, get("/e500"))
    assert theirs[0] == 404
    assert ours[0] == theirs[0]


def test_error_page_that_answers_a_204_sends_it_with_the_first_status(both):
    theirs, ours = both(RETURNS, get("/e405"))
    assert (theirs[0], theirs[1].get("content-length"), theirs[2]) == (405, "0", b"")
    assert (ours[0], ours[1].get("content-length"), ours[2]) == (405, "0", b"")


def test_if_executable_is_true_of_a_directory(both):
    text = """server { listen 127.0.0.1:{port0}; server_name x;
        location / { if (-x ROOT/$arg_c) { return 204; } return 404; } }"""
    theirs, ours = both(text, get("/?c=dir"))
    assert theirs[0] == 204
    assert ours[0] == theirs[0]


def test_proxied_locations_slash_redirect_percent_encodes_its_name(both):
    text = """server { listen 127.0.0.1:{port0}; server_name x; absolute_redirect off;
        location "/a b/" { proxy_pass http://127.0.0.1:{port0}/; } }"""
    theirs, ours = both(text, get("/a%20b"))
    assert (theirs[0], theirs[1]["location"]) == (301, "/a%20b/")
    assert (ours[0], ours[1].get("location")) == (theirs[0], theirs[1]["location"])


CAPTURES = """server { listen 127.0.0.1:{port0}; server_name default; return 204; }
    server { listen 127.0.0.1:{port0}; server_name ~^(?<sub>[a-z]+)\\.(\\w+)\\.test$;
             location / { return 200 "$sub $2"; } }"""


def test_server_name_regex_captures_are_of_the_lowercased_host(both):
    theirs, ours = both(CAPTURES, get("/", host="SHOP.CAP.TEST"))
    assert (theirs[0], theirs[2]) == (200, b"shop cap")
    assert (ours[0], ours[2]) == (theirs[0], theirs[2])


def test_expect_100_continue_with_an_empty_body_is_answered_100_first(both):
    text = """server { listen 127.0.0.1:{port0}; server_name x;
        location / { proxy_pass http://127.0.0.1:{port0}/local; }
        location /local { return 204; } }"""
    request = ("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\n"
               "Connection: close\r\n\r\n")
    theirs, ours = both(text, request)
    assert theirs[0] == 100
    assert ours[0] == 100


def test_index_leaves_a_top_level_handlers_directory_to_the_handler(tmp_path):
    """lfhttpd's own `handler PREFIX NAME` (no nginx counterpart): a directory under its
    prefix is the handler's to answer, so the index does not redirect it (its $uri stays)."""
    root = tmp_path / "root"
    (root / "h").mkdir(parents=True)
    (root / "h" / "index.html").write_text("file\n")
    log = tmp_path / "uri.log"
    s = start_lfhttpd(tmp_path, f"""log_format u '$uri';
        server {{ listen 127.0.0.1:{{port0}}; root {root}; access_log {log} u;
                 location / {{ }} }}""", top="handler /h/ hello;\n")
    try:
        status, _, body = ask(s.port, get("/h/"))
        assert (status, body) == (200, b"Hello, world!\n")
        assert wait_until(lambda: log.exists() and log.read_text() == "/h/\n", scaled(5))
    finally:
        s.stop()
