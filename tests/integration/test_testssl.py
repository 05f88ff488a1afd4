"""testssl.sh (Debian's package `testssl.sh`, command `testssl`) against the default TLS
configuration: an ssl address, an ECDSA P-256 certificate and its key, a document root,
nothing else set.

testssl runs its protocol (-p), cipher-per-protocol (-E), server-defaults (-S) and
vulnerability (-U) checks, offline (-n none: no DNS; OCSP and CRL are never fetched
without --phone-out), with its findings written as JSON. (Not --openssl-timeout: its
wrapper around s_client makes the session resumption checks fail to connect, a WARN
about testssl itself.) From them:
  - no finding rated HIGH or CRITICAL;
  - no protocol below TLS 1.2 offered, and TLS 1.2 and 1.3 offered;
  - every cipher offered has forward secrecy (an ephemeral ECDH or DH key exchange) and
    is AEAD (AES-GCM, AES-CCM or ChaCha20-Poly1305).
Findings rated MEDIUM or LOW are printed (run with -s).

The certificate is made the way a real one is, so that testssl's findings about the
certificate itself (which the server does not choose) stay out of the way: signed by a
CA of the test's own that testssl is given (--add-ca), valid 90 days (testssl rates a
self-signed one CRITICAL, one expiring within 30 days HIGH), with a CRL distribution
point (one with neither CRL nor OCSP is rated HIGH; the URL is never fetched). gzip is
off by default, so BREACH (compression of responses) is not at stake here.

testssl takes one to two minutes on a quiet machine; the time it took is printed.
"""
import json
import re
import shutil
import subprocess
import time

import pytest

from conftest import BY_DESIGN, SANITIZED, scaled

# testssl's rating of each finding, from worst to best (OK and INFO are not problems).
BAD = ("CRITICAL", "HIGH")
NOTED = ("MEDIUM", "LOW", "WARN")
OLD_PROTOCOLS = ("SSLv2", "SSLv3", "TLS1", "TLS1_1")
AEAD = ("AESGCM", "AESCCM", "AESCCM8", "ChaCha20")
FS_KEX = ("ECDH", "DH")


def make_certificate(d):
    """A CA, and an ECDSA P-256 leaf for localhost and 127.0.0.1 signed by it."""
    def openssl(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, cwd=d)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-days", "365", "-subj", "/CN=lfhttpd test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-subj", "/CN=localhost", "-keyout", "key.pem", "-out", "leaf.csr")
    (d / "leaf.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "crlDistributionPoints=URI:http://127.0.0.1/ca.crl\n")
    openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "90", "-extfile", "leaf.ext", "-out", "cert.pem")
    return d / "ca.pem", d / "cert.pem", d / "key.pem"


def cipher_columns(finding):
    """testssl's line for one cipher offered: (hexcode, name, key exchange, encryption)."""
    # e.g. "TLS 1.2   xc02b   ECDHE-ECDSA-AES128-GCM-SHA256   ECDH 253   AESGCM   128   TLS_..."
    m = re.search(r"\s(x[0-9a-f]+)\s+(\S+)\s+(\S+)(?:\s+\d+)?\s+(\S+)\s+\d+\s", finding + " ")
    assert m, f"a cipher line testssl never wrote: {finding!r}"
    return m.groups()


@pytest.fixture
def testssl():
    if SANITIZED:
        pytest.skip(f"{BY_DESIGN} testssl probes what the configuration offers, the same in "
                    "every build; the sanitizer builds run the TLS paths in test_tls*.py")
    path = shutil.which("testssl") or shutil.which("testssl.sh")
    if not path:
        pytest.skip("testssl missing; run: sudo apt-get install -y testssl.sh")
    return path


def test_testssl_finds_nothing_weak_in_the_default_configuration(
        testssl, start_server, docroot, tmp_path):
    ca, crt, key = make_certificate(tmp_path)
    (docroot / "index.html").write_bytes(b"<!DOCTYPE html><title>t</title>\n")
    s = start_server(docroot, conf=(
        "listen 127.0.0.1:0 ssl;\n"
        f'ssl_certificate "{crt}";\n'
        f'ssl_certificate_key "{key}";\n'
        f'root "{docroot}";\n'
        "error_log stderr info;\n"))
    report = tmp_path / "testssl.json"
    t0 = time.monotonic()
    r = subprocess.run([testssl, "--quiet", "--color", "0", "--warnings", "off",
                        "-n", "none", "--add-ca", str(ca),
                        "--jsonfile", str(report),
                        "-p", "-E", "-S", "-U", f"{s.host}:{s.port}"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", timeout=scaled(600), cwd=tmp_path)
    took = time.monotonic() - t0
    assert report.exists(), f"testssl wrote no report (exit {r.returncode}):\n{r.stdout[-3000:]}"
    findings = json.loads(report.read_text())
    by_id = {f["id"]: f for f in findings}
    noted = [f"{f['severity']} {f['id']}: {f['finding']}" for f in findings
             if f["severity"] in NOTED]
    offered = [cipher_columns(f["finding"]) + (f["id"],) for f in findings
               if f["id"].startswith("cipher-")]
    print(f"\ntestssl: {len(findings)} findings in {took:.0f} s (exit {r.returncode}); "
          f"ciphers offered: {', '.join(c[1] for c in offered)}")
    for line in noted:
        print("  " + line)

    assert "scanProblem" not in by_id, by_id["scanProblem"]
    bad = [f"{f['severity']} {f['id']}: {f['finding']}" for f in findings
           if f["severity"] in BAD]
    assert not bad, "testssl rated these HIGH or CRITICAL:\n" + "\n".join(bad)
    for proto in OLD_PROTOCOLS:
        assert proto in by_id, f"testssl did not check {proto}"
        assert by_id[proto]["finding"].startswith("not offered"), by_id[proto]
    for proto in ("TLS1_2", "TLS1_3"):
        assert by_id.get(proto, {}).get("finding", "").startswith("offered"), by_id.get(proto)
    assert offered, "testssl listed no cipher offered"
    for hexcode, name, kex, enc, cid in offered:
        assert cid.startswith(("cipher-tls1_2_", "cipher-tls1_3_")), f"{name} offered: {cid}"
        assert kex in FS_KEX, f"{name} ({hexcode}) has no forward secrecy: {kex}"
        assert enc in AEAD, f"{name} ({hexcode}) is not AEAD: {enc}"
