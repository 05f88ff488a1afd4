"""$content_length in the access log after a chunked request body streamed to the upstream
(fastcgi_request_buffering off, proxy_request_buffering off), as nginx's: empty while the
body is read, and once it was read whole the decoded body's length (nginx counts the chunks
into the request's length as it reads them). A Content-Length body logs its field.

nginx and lfhttpd run the same site, each logging to a file of its own; a client sends the
same requests to each (the body's first chunks, a pause, the rest), and the lines are
compared. The proxy's upstream is a second server of the same site, which reads the body
whole before PHP-FPM answers."""
import os
import socket
import time

import pytest

from conftest import Client, Nginx, Server, check_clean_exit, free_port, scaled, wait_until
from fastcgi_harness import ROOT, Fpm
from test_fastcgi_request_buffering import body_of, chunked, php_files, put_head

SITE = """
    log_format cl "$request_uri $status [$content_length]";
    server {{
        listen 127.0.0.1:{{port0}};
        root {root};
        access_log {log} cl;
        client_max_body_size 1m;
        location ~ \\.php$ {{
            fastcgi_pass unix:{sock};
            fastcgi_request_buffering off;
            include {conf}/fastcgi.conf;
        }}
        location ^~ /proxied/ {{
            proxy_pass http://127.0.0.1:{{port1}}/;
            proxy_http_version 1.1;
            proxy_request_buffering off;
        }}
    }}
    server {{
        listen 127.0.0.1:{{port1}};
        root {root};
        access_log off;
        client_max_body_size 1m;
        location ~ \\.php$ {{
            fastcgi_pass unix:{sock};
            include {conf}/fastcgi.conf;
        }}
    }}
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """[(nginx, its log), (lfhttpd, its log)] on the same site and PHP-FPM pool."""
    fpm = Fpm(tmp_path_factory.mktemp("fpm"))
    root = php_files(str(tmp_path_factory.mktemp("www")))
    with open(os.path.join(root, "later.php"), "w") as f:
        f.write("<?php usleep(500000); echo 'later';\n")
    made = []
    try:
        d = tmp_path_factory.mktemp("nginx")
        log = os.path.join(str(d), "cl.log")
        ng = Nginx(d, None, SITE.format(root=root, log=log, sock=fpm.sock,
                                        conf=os.path.join(ROOT, "conf")), http=True)
        made.append((ng, log))
        d = tmp_path_factory.mktemp("lfhttpd")
        log = os.path.join(str(d), "cl.log")
        ports = [free_port(), free_port()]
        text = SITE.format(root=root, log=log, sock=fpm.sock, conf=os.path.join(ROOT, "conf"))
        for i, port in enumerate(ports):
            text = text.replace("{port%d}" % i, str(port))
        lf = Server(d, None, conf="threads 2;\nerror_log stderr info;\nshutdown_timeout 5s;\n"
                                  "http {\n" + text + "}\n")
        made.append((lf, log))
        yield made
    finally:
        for s, _ in made:
            if isinstance(s, Server):
                check_clean_exit(s)
            else:
                s.stop()
        fpm.stop()


def logged(server, log, path, fields, parts):
    """Send a PUT of path with the fields and the body in parts (a pause between two), read
    the answer, and return the access log's line for it."""
    port = server.port if isinstance(server, Server) else server.ports[0]
    c = Client(socket.create_connection(("127.0.0.1", port), timeout=scaled(20)))
    try:
        c.send(put_head(path, fields) + parts[0])
        for p in parts[1:]:
            time.sleep(0.2)  # (not whole with the head: it streams)
            c.send(p)
        status = c.read_response(timeout=scaled(20))[0]
        assert status == 200
    finally:
        c.close()

    def line():
        try:
            with open(log) as f:
                return [ln for ln in f.read().splitlines() if ln.startswith(path + " ")]
        except FileNotFoundError:
            return []
    lines = wait_until(line, scaled(5))
    assert len(lines) == 1, lines
    return lines[0]


DATA = body_of(300 << 10)
CHUNKED = (["Transfer-Encoding: chunked"], [chunked(DATA[:4096])[:-5], chunked(DATA[4096:])])
SMALL = body_of(8192)
SMALL_CHUNKED = (["Transfer-Encoding: chunked"],
                 [chunked(SMALL[:4096])[:-5], chunked(SMALL[4096:])])


def test_a_chunked_body_streamed_to_the_proxy_logs_its_length_as_nginx(servers):
    # (the upstream answers once it has read the whole body)
    lines = [logged(s, log, f"/proxied/stream.php?{i}", *CHUNKED)
             for i, (s, log) in enumerate(servers)]
    theirs, ours = (ln.split(" ", 1)[1] for ln in lines)
    assert ours == theirs == f"200 [{len(DATA)}]"


def test_a_chunked_body_streamed_to_fastcgi_whole_before_the_answer_logs_its_length_as_nginx(
        servers):
    # PHP-FPM reads no body without CONTENT_LENGTH; the script answers half a second
    # later, when the small body went whole
    lines = [logged(s, log, f"/later.php?{i}", *SMALL_CHUNKED)
             for i, (s, log) in enumerate(servers)]
    theirs, ours = (ln.split(" ", 1)[1] for ln in lines)
    assert ours == theirs == f"200 [{len(SMALL)}]"


def test_a_chunked_body_cut_short_by_the_answer_logs_no_length_as_nginx(servers):
    # the script answers at once, before the rest of the body came: it is not read whole
    # before the answer (and the rest is skipped), and nginx logs no length
    lines = [logged(s, log, f"/stream.php?{i}", *CHUNKED) for i, (s, log) in enumerate(servers)]
    theirs, ours = (ln.split(" ", 1)[1] for ln in lines)
    assert ours == theirs == "200 [-]"


@pytest.mark.parametrize("where", ["/stream.php", "/proxied/stream.php"])
def test_a_streamed_content_length_body_logs_its_field_as_nginx(servers, where):
    fields, parts = [f"Content-Length: {len(DATA)}"], [DATA[:4096], DATA[4096:]]
    lines = [logged(s, log, f"{where}?cl{i}", fields, parts)
             for i, (s, log) in enumerate(servers)]
    theirs, ours = (ln.split(" ", 1)[1] for ln in lines)
    print("nginx:", theirs, "lfhttpd:", ours)
    assert ours == theirs == f"200 [{len(DATA)}]"
