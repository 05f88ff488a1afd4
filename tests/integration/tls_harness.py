"""What the HTTPS tests share: certificates made with the `openssl` command into the test's
directory, TLS clients (Python's ssl module and `openssl s_client`), and the text of a
configuration that serves HTTPS.

Certificates: `self_signed(dir, name, kind)` makes a leaf that signs itself; `Pki(dir)` is
a root CA and an intermediate CA, whose `issue(name, kind)` makes a leaf signed by the
intermediate and writes it as a full chain (leaf, then intermediate), so that a client
trusting the root alone verifies it only when the server sends the chain. `kind` is "ec"
(ECDSA P-256) or "rsa" (RSA 2048). Each is a `Pair`: the chain file, the key file, and the
leaf in DER, which is what a test compares with the certificate a client was sent.
"""
import collections
import os
import random
import re
import socket
import ssl
import subprocess

from conftest import Client, scaled

Pair = collections.namedtuple("Pair", "cert key leaf")

# A request that makes the server close the connection once answered: `openssl s_client
# -ign_eof` then waits for the answer, so that TLS 1.3 tickets (sent after the handshake)
# have arrived when it writes its session out.
CLOSE_REQUEST = b"GET / HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n"

CA_EXT = ("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
          "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
LEAF_EXT = ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,"
            "keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid\nsubjectAltName={sans}\n")


def openssl(*args, stdin=None):
    """Run the openssl command; its stdout (bytes). A failure raises with its stderr."""
    r = subprocess.run(["openssl", *args], input=stdin, capture_output=True,
                       timeout=scaled(60))
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {r.stderr.decode(errors='replace')}")
    return r.stdout


def new_key(path, kind="ec"):
    """A private key (PEM, unencrypted) of `kind` at path."""
    if kind == "ec":
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", str(path))
    elif kind == "rsa":
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                "-out", str(path))
    else:
        raise ValueError(kind)
    return str(path)


def sans(names):
    return ",".join(("IP:" if re.fullmatch(r"[0-9.]+|[0-9a-fA-F:]*:[0-9a-fA-F:]*", n)
                     else "DNS:") + n for n in names)


def first_der(pem_text):
    """The first certificate of a PEM text, in DER."""
    m = re.search(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", pem_text, re.S)
    if not m:
        raise ValueError("no certificate in the text")
    return ssl.PEM_cert_to_DER_cert(m.group(0))


def pair_of(cert, key):
    with open(cert) as f:
        return Pair(str(cert), str(key), first_der(f.read()))


def self_signed(dirpath, name, kind="ec", names=None):
    """A self-signed certificate for `name` (and `names`, default: name and 127.0.0.1)."""
    os.makedirs(dirpath, exist_ok=True)
    base = os.path.join(str(dirpath), f"{name}.{kind}")
    key = new_key(base + ".key", kind)
    openssl("req", "-x509", "-new", "-key", key, "-subj", f"/CN={name}", "-days", "2",
            "-addext", "subjectAltName=" + sans(names or [name, "127.0.0.1"]),
            "-out", base + ".pem")
    return pair_of(base + ".pem", key)


class Pki:
    """A root CA (`root`: its certificate file) and an intermediate CA under dirpath."""

    def __init__(self, dirpath):
        self.dir = str(dirpath)
        os.makedirs(self.dir, exist_ok=True)
        self.root_key = new_key(self.path("root.key"))
        self.root = self.path("root.pem")
        openssl("req", "-x509", "-new", "-key", self.root_key, "-subj", "/CN=Test Root CA",
                "-days", "2", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", self.root)
        self.inter_key = new_key(self.path("intermediate.key"))
        self.inter = self.sign(self.inter_key, "/CN=Test Intermediate CA", self.root,
                               self.root_key, CA_EXT, self.path("intermediate.pem"))

    def path(self, name):
        return os.path.join(self.dir, name)

    def sign(self, key, subject, ca, ca_key, ext, out):
        csr = out + ".csr"
        openssl("req", "-new", "-key", key, "-subj", subject, "-out", csr)
        ext_file = out + ".ext"
        with open(ext_file, "w") as f:
            f.write(ext)
        openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-days", "2",
                "-set_serial", str(random.getrandbits(63)), "-extfile", ext_file,
                "-out", out)
        return out

    def issue(self, name, kind="ec", names=None):
        """A leaf for `name` signed by the intermediate: its file holds leaf and
        intermediate (a full chain)."""
        base = self.path(f"{name}.{kind}")
        key = new_key(base + ".key", kind)
        leaf = self.sign(key, f"/CN={name}", self.inter, self.inter_key,
                         LEAF_EXT.format(sans=sans(names or [name, "127.0.0.1"])),
                         base + ".leaf.pem")
        with open(leaf) as a, open(self.inter) as b, open(base + ".pem", "w") as out:
            out.write(a.read() + b.read())
        return pair_of(base + ".pem", key)


# ------------------------------------------------------------------- configurations


def ssl_lines(*pairs, indent=""):
    """ssl_certificate and ssl_certificate_key lines for each pair, in order."""
    return "".join(f"{indent}ssl_certificate {p.cert};\n{indent}ssl_certificate_key {p.key};\n"
                   for p in pairs)


def tls_conf(docroot, *pairs, extra="", threads=4, listen="listen 127.0.0.1:0 ssl;"):
    """A whole configuration without servers: one TLS address (port 0) serving docroot
    with the pairs' certificates, then `extra`."""
    return (f"{listen}\n" f'root "{docroot}";\n' f"threads {threads};\n"
            "error_log stderr debug;\nshutdown_timeout 5s;\n" + ssl_lines(*pairs) + extra)


def line_of(conf_text, needle):
    """The number of the first line of conf_text that starts with needle (after its
    indentation)."""
    for n, line in enumerate(conf_text.splitlines(), 1):
        if line.lstrip().startswith(needle):
            return n
    raise ValueError(needle)


# ------------------------------------------------------------------- clients


def context(cafile=None, alpn=None, version=None, ciphers=None):
    """A client context: verifying against cafile (and the name) when given, else
    accepting any certificate; offering the ALPN names `alpn`; limited to one `version`
    (an ssl.TLSVersion) and to `ciphers` (TLS 1.2's) when given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cafile:
        ctx.load_verify_locations(cafile)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


def tls_socket(port, sni=None, ctx=None, session=None, addr="127.0.0.1", timeout=10.0,
               rcvbuf=None):
    """A TLS connection to addr:port, the handshake done: an ssl.SSLSocket. sni=None sends
    no server name."""
    raw = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    if rcvbuf is not None:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(scaled(timeout))
    try:
        raw.connect((addr, port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return (ctx or context()).wrap_socket(raw, server_hostname=sni, session=session)
    except BaseException:
        raw.close()
        raise


def tls_client(port, **kw):
    """A conftest Client (send, read_response, recv_all, is_closed) over TLS; its TLS
    socket is .sock."""
    return Client(tls_socket(port, **kw))


def get(port, target="/", host="example.org", method="GET", headers=(), **kw):
    """One request on a new TLS connection closed after it (`kw`: tls_socket's): (status,
    headers, body, head, the TLS socket's peer certificate in DER)."""
    c = tls_client(port, **kw)
    try:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: close",
                 *headers]
        c.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        status, fields, body, head = c.read_response(head_only=method == "HEAD",
                                                     timeout=scaled(10))
        return status, fields, body, head, c.sock.getpeercert(binary_form=True)
    finally:
        c.close()


def s_client(port, *args, sni=None, request=CLOSE_REQUEST, host="127.0.0.1", timeout=15):
    """`openssl s_client` to host:port with `args`, sending `request` and waiting for the
    server to close: the CompletedProcess, stdout and stderr as text."""
    cmd = ["openssl", "s_client", "-connect", f"{host}:{port}", "-ign_eof"]
    cmd += ["-servername", sni] if sni else ["-noservername"]
    return subprocess.run(cmd + list(args), input=request, capture_output=True,
                          timeout=scaled(timeout), text=False)


def text(r):
    """stdout and stderr of a CompletedProcess as one text."""
    return (r.stdout + r.stderr).decode("latin-1")


def s_client_leaf(r):
    """The leaf certificate (DER) s_client printed, or None when the handshake failed."""
    try:
        return first_der(r.stdout.decode("latin-1"))
    except ValueError:
        return None


def s_client_reused(r):
    """True when s_client's session was resumed ("Reused, TLSv1.x"), False when new."""
    out = r.stdout.decode("latin-1")
    m = re.search(r"^(New|Reused), (TLSv[0-9.]+)", out, re.M)
    assert m, f"no session line in s_client's output:\n{text(r)}"
    return m.group(1) == "Reused"


def client_hello(sni="example.org"):
    """The bytes of a TLS ClientHello as Python's ssl sends it (no socket involved)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context().wrap_bio(incoming, outgoing, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def rss_kib(pid):
    """The resident set size of a process, KiB."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
