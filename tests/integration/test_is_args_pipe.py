"""`$is_args` and `$pipe`, as nginx gives them: `?` when the request has arguments (after
any rewrite), else empty; `p` for a request that came in the same read as the one before
it (pipelined), else `.`.

One configuration is run as written by nginx and by lfhttpd; each test sends the same
bytes to both and compares the bodies.
"""
import socket
import time

import pytest

from conftest import Nginx, Server, check_clean_exit, free_port, with_ports, scaled

SITE = r"""
server {
    listen 127.0.0.1:{port0};
    server_name _;
    default_type text/plain;

    location = /ia {
        return 200 "[$is_args][$args]\n";
    }
    location = /uri {
        return 200 "$uri$is_args$args\n";
    }
    location = /rw {
        rewrite ^ /ia?y=2 last;
    }
    location = /drop {
        rewrite ^ /ia? last;
    }
    location = /pipe {
        return 200 "$pipe\n";
    }
    location = /noname {
        return 200 "[$arg_][$arg_a]\n";
    }
}
"""


def start_lfhttpd(dirpath):
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port()]
        top = "threads 2;\nerror_log stderr debug;\nshutdown_timeout 5s;\n"
        try:
            return Server(dirpath / f"try{attempt}", None,
                          conf=top + with_ports(SITE, ports)), ports[0]
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, SITE, http=True)
    try:
        ours, port = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"))
    except BaseException:
        theirs.stop()
        raise
    yield theirs.port, port
    theirs.stop()
    check_clean_exit(ours)


def request(target, close=False):
    return (f"GET {target} HTTP/1.1\r\nHost: example.test\r\n"
            + ("Connection: close\r\n" if close else "") + "\r\n").encode()


def bodies(port, sends):
    """The bodies of the answers to sends (each sent once the answers before it came),
    on one connection; the last request closes it."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        data = b""
        for k, chunk in enumerate(sends):
            s.sendall(chunk)
            want = chunk.count(b"GET ")
            if k == len(sends) - 1:
                while True:
                    got = s.recv(65536)
                    if not got:
                        break
                    data += got
            else:
                while data.count(b"HTTP/1.1 ") < len(out) + want:
                    data += s.recv(65536)
                out += [None] * want
    answers = data.split(b"HTTP/1.1 ")[1:]
    return [a.partition(b"\r\n\r\n")[2].decode() for a in answers]


def same(daemons, sends, expected):
    for who, port in zip(("nginx", "lfhttpd"), daemons):
        assert bodies(port, sends) == expected, who


def test_is_args_is_a_question_mark_with_arguments(daemons):
    same(daemons, [request("/ia?x=1", True)], ["[?][x=1]\n"])


def test_is_args_is_empty_without_arguments(daemons):
    same(daemons, [request("/ia", True)], ["[][]\n"])


def test_is_args_is_empty_after_a_bare_question_mark(daemons):
    same(daemons, [request("/ia?", True)], ["[][]\n"])


def test_uri_is_args_args_gives_the_target_back(daemons):
    same(daemons, [request("/uri?a=1&b=2", True)], ["/uri?a=1&b=2\n"])


def test_is_args_follows_a_rewrite_s_new_arguments(daemons):
    same(daemons, [request("/rw", True)], ["[?][y=2]\n"])


def test_is_args_is_empty_once_a_rewrite_drops_the_arguments(daemons):
    same(daemons, [request("/drop?x=1", True)], ["[][]\n"])


def test_pipe_is_a_dot_for_a_lone_request(daemons):
    same(daemons, [request("/pipe", True)], [".\n"])


def test_pipe_is_p_for_the_request_read_with_the_one_before(daemons):
    same(daemons, [request("/pipe") + request("/pipe", True)], [".\n", "p\n"])


def test_pipe_is_p_for_each_of_three_read_at_once(daemons):
    same(daemons, [request("/pipe") + request("/pipe") + request("/pipe", True)],
         [".\n", "p\n", "p\n"])


def test_pipe_is_a_dot_for_a_request_sent_after_the_answer(daemons):
    same(daemons, [request("/pipe"), request("/pipe", True)], [".\n", ".\n"])


def test_arg_with_no_name_is_empty_even_for_an_argument_with_no_name(daemons):
    same(daemons, [request("/noname?=x&a=1", True)], ["[][1]\n"])
