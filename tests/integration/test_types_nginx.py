"""nginx's `types` in a file with nginx's `http { }`, against nginx: the blocks are the
whole type map, as nginx's replace its built-in one, so an extension they do not name gets
`default_type` however well lfhttpd's own table knows it (in lfhttpd's own files the
built-in list stays under them: test_mime.py)."""
import http.client

import pytest

from conftest import Nginx, Server, check_clean_exit, free_port, scaled, with_ports

SITE = """
types {
    text/html html;
    image/png png;
}
default_type application/octet-stream;
server {
    listen 127.0.0.1:{port0};
    root ROOT;
}
"""


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("ty")
    for name in ("a.html", "a.png", "a.gz", "a.css", "a.js", "a.json", "a.svg"):
        (root / name).write_bytes(b"x\n")
    text = SITE.replace("ROOT", str(root))
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, text, http=True)
    try:
        ours = Server(tmp_path_factory.mktemp("lfhttpd"), None,
                      conf="error_log stderr info;\naccess_log off;\nhttp {\n" +
                      with_ports(text, [free_port()]) + "}\n")
    except BaseException:
        theirs.stop()
        raise
    yield {"nginx": theirs.port, "lfhttpd": ours.port}
    theirs.stop()
    check_clean_exit(ours)


def content_type(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(5))
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status, r.getheader("Content-Type")
    finally:
        c.close()


@pytest.mark.parametrize("path,expected", [
    ("/a.html", "text/html"),
    ("/a.png", "image/png"),
])
def test_an_extension_the_types_block_names_gets_its_type(both, path, expected):
    ours, theirs = content_type(both["lfhttpd"], path), content_type(both["nginx"], path)
    assert ours == theirs == (200, expected)


@pytest.mark.parametrize("path", ["/a.gz", "/a.css", "/a.js", "/a.json", "/a.svg"])
def test_an_extension_the_types_block_leaves_out_gets_default_type(both, path):
    ours, theirs = content_type(both["lfhttpd"], path), content_type(both["nginx"], path)
    assert ours == theirs == (200, "application/octet-stream")
