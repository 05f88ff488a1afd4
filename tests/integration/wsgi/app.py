"""The WSGI application of test_uwsgi.py, run by uWSGI over uwsgi or SCGI: it answers by
the path of REQUEST_URI (both protocols' parameter files pass it)."""
import hashlib
import json
from urllib.parse import parse_qsl


def body_of(environ):
    n = int(environ.get("CONTENT_LENGTH") or 0)
    return environ["wsgi.input"].read(n) if n else b""


def application(environ, start_response):
    uri = environ.get("REQUEST_URI", "")
    path, _, query = uri.partition("?")
    args = parse_qsl(query, keep_blank_values=True)
    if path == "/env" or path.startswith("/env/"):
        # what the server passed: the string parameters, not uWSGI's own or WSGI's
        env = {k: v for k, v in environ.items()
               if isinstance(v, str) and not k.startswith(("wsgi.", "uwsgi."))}
        env["body_length"] = str(len(body_of(environ)))
        out = json.dumps(env, sort_keys=True).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [out]
    if path == "/echo":
        data = body_of(environ)
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(len(data)))])
        return [data]
    if path == "/status":
        # s=CODE REASON, h=Name:Value (repeated), b=body
        status = dict(args).get("s", "200 OK")
        headers = [tuple(v.split(":", 1)) for k, v in args if k == "h"]
        start_response(status, headers)
        return [dict(args).get("b", "").encode()]
    if path == "/large":
        # n bytes, in pieces of 1000, a Content-Length when length=1
        n = int(dict(args).get("n", "0"))
        piece = bytes((i * 7 + 3) % 251 for i in range(1000))
        headers = [("Content-Type", "application/octet-stream")]
        if dict(args).get("length") == "1":
            headers.append(("Content-Length", str(n)))
        start_response("200 OK", headers)
        return (piece[:min(1000, n - at)] for at in range(0, n, 1000))
    if path == "/stream":
        # the body read a piece at a time: after the first, the file named by `mark` says
        # how many bytes came; the answer: the length and MD5 of the whole
        n = int(environ.get("CONTENT_LENGTH") or 0)
        md5, got, first = hashlib.md5(), 0, True
        while got < n:
            piece = environ["wsgi.input"].read(min(65536, n - got))
            if not piece:
                break
            if first and dict(args).get("mark"):
                with open(dict(args)["mark"], "w") as f:
                    f.write(str(len(piece)))
            first = False
            md5.update(piece)
            got += len(piece)
        out = json.dumps({"n": got, "md5": md5.hexdigest(),
                          "cl": environ.get("CONTENT_LENGTH")}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [out]
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"no such path\n"]
