#!/usr/bin/python3
"""bench.py — `make bench`: lfhttpd side by side with nginx, lighttpd and h2o.

    bench.py --bin build/bench/lfhttpd [--quick] [--rounds N] [--duration S]
             [--only WORKLOAD,...]

Starts the four servers on free loopback ports (configurations from the templates
beside this file), runs every workload interleaved across the servers for several
rounds, round i starting with server i mod 4 (lfhttpd nginx lighttpd h2o, then nginx
lighttpd h2o lfhttpd, ...), so slow drifts of this noisy machine and the cost of going
first or last hit all four alike, and writes under build/bench/:
    results.csv   every round's raw figures, then the medians
    results.md    a Markdown table for docs/internals/benchmarks.md, with date, machine and commands
    bench.png     requests/s, requests per server CPU-second and p99 per workload
The servers are stopped by PID at the end, on failure and on Ctrl-C as well.

The machine has 2 cores and the load generator (wrk or ab, one thread) takes about one
of them, so the absolute figures say more about the machine than about the servers.
Requests per server CPU-second (utime+stime of every process of the server, read from
/proc/PID/stat around each run) is the steadiest figure; the ratios to nginx in the
same run are what to compare.

Standard library only.
"""
import argparse
import copy
import csv
import datetime
import gzip
import http.client
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "build", "bench")
RUN = os.path.join(OUT, "run")
DOCROOT = os.path.join(OUT, "www")
UPSTREAM_DOCROOT = os.path.join(OUT, "upstream-www")
PHP_DOCROOT = os.path.join(OUT, "php-www")
# The HTTPS workloads' certificate and key (ECDSA P-256, self-signed for localhost and
# 127.0.0.1), made once with openssl and kept: every server of every run uses this pair.
TLS_DIR = os.path.join(OUT, "tls")
TLS_CERT = os.path.join(TLS_DIR, "localhost.pem")
TLS_KEY = os.path.join(TLS_DIR, "localhost.key")

SERVERS = ("lfhttpd", "nginx", "lighttpd", "h2o")
PEERS = ("nginx", "lighttpd", "h2o")
BASELINE = "nginx"
# Not a server: tests/bench/ceiling.c answers every request with the same 1 KiB response,
# shares nothing between its threads and parses nothing but the end of each head. It
# runs only in the 1 KiB keep-alive workloads (Workload.ceiling), as what this machine
# can do at most; it is never a peer.
CEILING = "ceiling"
THREADS = 2               # lfhttpd threads = nginx workers: one per core of this machine
FD_WANTED = 65536         # 10,000 idle connections + wrk -c1000, in us and in the servers
IDLE_CONNS = 10000        # the memory workload
RANDOM_FILES = 10000      # files/00000.html .. files/09999.html
GZIP_LEVEL = 6            # every server's gzip level, and the .gz beside text.txt
COLD_FILES = 200          # gzip cold: fresh 100 KiB texts per server and round
COLD_CONNS = 4            # gzip cold: connections fetching them (each file once)
# Variants in which only these servers differ from "main" (the others' "main" instance
# runs the workload).
OWN_INSTANCES = {"nomem": ("lfhttpd",), "metrics": ("lfhttpd",), "copy": ("lfhttpd", "nginx"),
                 "sndbuf": ("lfhttpd", "nginx"),
                 "sites": ("lfhttpd", "nginx"), "rewrite": ("lfhttpd", "nginx"),
                 "proxy": ("lfhttpd", "nginx"), "proxytls": ("lfhttpd", "nginx"),
                 "limit": ("lfhttpd", "nginx"), "php": SERVERS}
# The "limit" variant: lfhttpd and nginx as "main", with a limit_req zone keyed by the
# client's address whose rate (ten million a second) the load never reaches, applied to
# every request: what the preaccess check costs, beside small_ka in the same run.
LIMIT_LINES = ("limit_req_zone $binary_remote_addr zone=bench:10m rate=10000000r/s;\n"
               "    limit_req zone=bench burst=1000 nodelay;")
# The "sites" variant: lfhttpd and nginx serve the server blocks of sites.conf.in (two
# servers, twelve locations), the same text in both, in place of @SITES@.
SITES_TEMPLATE = "sites.conf.in"
# The "rewrite" variant: lfhttpd and nginx serve rewrite.conf.in (map, log_format, set,
# if, rewrite ... last), the same text in both, in place of @SITES@.
REWRITE_TEMPLATE = "rewrite.conf.in"
# The "proxy" variant: lfhttpd and nginx proxy everything to one upstream (an lfhttpd of its
# own, upstream.conf.in, serving UPSTREAM_DOCROOT from memory) through the upstream and
# server blocks of proxy.conf.in, the same text in both, in place of @PROXY@.
PROXY_TEMPLATE = "proxy.conf.in"
UPSTREAM_TEMPLATE = "upstream.conf.in"
UPSTREAM = "upstream"     # the upstream's variant name (an lfhttpd instance, never measured)
# The "proxytls" variant: the same, to an upstream that listens with TLS (the same lfhttpd
# and upstream.conf.in, with tls.conf.in's settings), through `proxy_pass https://up`:
# what the upstream side's TLS costs each proxy, sessions reused as both do by default.
UPSTREAM_TLS = "upstreamtls"
PROXY_VARIANTS = {"proxy": UPSTREAM, "proxytls": UPSTREAM_TLS}
# The "php" variant: every server passes *.php to one PHP-FPM pool (php-fpm.conf.in,
# started here before them, never measured as theirs). lfhttpd and nginx through the
# upstream and server blocks of php.conf.in, the same text in both, in place of @PHP@;
# each includes its own fastcgi.conf (lfhttpd's conf/fastcgi.conf, nginx's
# /etc/nginx/fastcgi.conf), copied beside its configuration so that the shared text says
# `include fastcgi.conf;`. lighttpd and h2o get the same in their own terms (LIGHTTPD_PHP,
# H2O_PHP, in place of @PHP@ in their templates, which say what differs), their document
# root the PHP one.
PHP_TEMPLATE = "php.conf.in"
PHP_FPM_TEMPLATE = "php-fpm.conf.in"
PHP_FPM_NAMES = ("php-fpm8.2", "php-fpm")  # Debian's php8.2-fpm, or one named plainly
PHP_FPM_PACKAGE = "php8.2-fpm"
PHP_CHILDREN = 2          # pm = static: one worker per core
# --alloc-lib (make bench: tests/alloc_counter.c): preloaded into lfhttpd of the variants
# named here, whose rows then count its heap allocations per request (the PHP row's goal:
# none once warm). The counter costs a call per allocation, and a warm request makes none.
ALLOC_VARIANTS = ("php",)
ALLOC_LIB = None
# Idle connections kept per nginx worker and per lfhttpd thread group (2 of each): a
# PHP-FPM worker asked to keep its connection (fastcgi_keep_conn on) waits on it for the
# next request, so the two servers' kept connections must not outnumber the workers.
PHP_KEEPALIVE = 1
FASTCGI_CONF = {"lfhttpd": os.path.join(ROOT, "conf", "fastcgi.conf"),
                "nginx": "/etc/nginx/fastcgi.conf"}
# php.conf.in's `location ~ \.php$ { include fastcgi.conf; fastcgi_pass unix:SOCKET; }` in
# lighttpd's terms: mod_fastcgi, a connection to the pool per request (it keeps none), no
# check that the script exists before passing it (nginx makes none either: PHP-FPM answers
# 404 for a missing one). lighttpd sends the parameters of fastcgi.conf by itself
# (SCRIPT_FILENAME from its document root), except DOCUMENT_URI, which it has no way to
# send, and the ones nginx sends empty (CONTENT_TYPE, REMOTE_USER), which it sends when
# they have a value.
LIGHTTPD_PHP = """server.modules += ( "mod_fastcgi" )
fastcgi.server = ( ".php" => ( ( "socket" => "@PHP_SOCKET@",
                                 "check-local" => "disable" ) ) )"""
# The same in h2o's terms (under the path "/", whose file.dir is the PHP document root):
# file.custom-handler passes *.php to the pool, a connection per request (h2o keeps none
# unless fastcgi.timeout.keepalive is set). h2o sends SCRIPT_FILENAME, SCRIPT_NAME and the
# request's parameters by itself; DOCUMENT_ROOT with fastcgi.document_root, and the
# constants of fastcgi.conf it does not send (GATEWAY_INTERFACE, REQUEST_SCHEME,
# REDIRECT_STATUS) with setenv. As lighttpd, no DOCUMENT_URI, and no empty parameters.
H2O_PHP = """        fastcgi.document_root: "@PHP_DOCROOT@"
        setenv:
          GATEWAY_INTERFACE: "CGI/1.1"
          REQUEST_SCHEME: "http"
          REDIRECT_STATUS: "200"
        file.custom-handler:
          extension: .php
          fastcgi.connect:
            port: "@PHP_SOCKET@"
            type: unix"""
# How each server passes to the pool (the PHP rows' notes).
PHP_HOW = {"lfhttpd": "fastcgi_pass", "nginx": "fastcgi_pass",
           "lighttpd": "mod_fastcgi (fastcgi.server)",
           "h2o": "file.custom-handler with fastcgi.connect"}
# What the PHP page must answer (the probe): PHP's output, not the script's text.
PHP_ANSWER = r"^hello \d+\.\d+\.\d+\s*$"
# The lines only nginx needs (proxy.conf.in says why): HTTP/1.1 with an empty Connection
# header to the upstream, so that its keep-alive pool is used, the pool's connections not
# closed after 1000 requests, and the forwarding fields lfhttpd sends by default, so that
# both send the upstream the same request.
# Both: what makes nginx's (and, as nginx's, lfhttpd's) `keepalive` pool work at all.
PROXY_KEEPALIVE = 'proxy_http_version 1.1;\n            proxy_set_header Connection "";'
UPSTREAM_KEEPALIVE = "keepalive_requests 1000000;"
NGINX_PROXY = ('proxy_set_header X-Real-IP $remote_addr;\n'
               '            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n'
               '            proxy_set_header X-Forwarded-Proto $scheme;\n'
               '            proxy_set_header X-Forwarded-Host $http_host;')
# The HTTPS variants: "tls" (the https_* load workloads) and "memtls" (https_idle, fresh
# servers): lfhttpd and nginx with the settings of tls.conf.in (the same text in both)
# and `ssl` on their listen lines, lighttpd and h2o with the same in their own terms
# (LIGHTTPD_TLS, H2O_TLS).
TLS_TEMPLATE = "tls.conf.in"
TLS_VARIANTS = ("tls", "memtls")
# tls.conf.in in lighttpd's and h2o's terms (their templates say what differs).
LIGHTTPD_TLS = """server.modules += ( "mod_openssl" )
ssl.engine = "enable"
ssl.pemfile = "@CERT@"
ssl.privkey = "@KEY@"
ssl.openssl.ssl-conf-cmd = ( "MinProtocol" => "TLSv1.2",
                             "CipherString" => "ECDHE+AESGCM:ECDHE+CHACHA20",
                             "Options" => "-ServerPreference",
                             "Curves" => "X25519:P-256:X448:P-521:P-384" )"""
H2O_TLS = """  ssl:
    certificate-file: "@CERT@"
    key-file: "@KEY@"
    minimum-version: TLSv1.2
    cipher-suite: "ECDHE+AESGCM:ECDHE+CHACHA20"
    cipher-preference: client"""
# Variants whose lfhttpd may refuse its configuration while the feature is being written:
# its rows are then skipped with `lfhttpd -t`'s message, and everything else runs.
OPTIONAL_VARIANTS = ("proxy", "proxytls", "tls", "memtls", "php", "sndbuf")
# The "sndbuf" variant: lfhttpd and nginx with a fixed send buffer on the listener
# (`listen ... sndbuf=`), the same size in both; lighttpd and h2o have no such option.
SNDBUF = "256k"
# nginx's listening socket options (nginx.conf.in says why each): nginx takes them once
# per address, so in the sites variant only the default server's listen line has them.
NGINX_LISTEN_OPTIONS = "backlog=4096 deferred reuseport"
FD_LIMIT = FD_WANTED      # what raise_fd_limit() could get
START_TIMEOUT = 10.0      # seconds for a server to start listening
STOP_TIMEOUT = 5.0        # seconds for a server to exit on SIGTERM before SIGKILL
MAX_RESTARTS = 3          # a server that keeps dying is not restarted forever
GZIP_HOW = {              # how each configuration avoids compressing again (templates)
    "lfhttpd": "compressed once, then its in-memory copy",
    "nginx": "gzip_static: text.txt.gz beside the file",
    "lighttpd": "compressed once, then its deflate.cache-dir copy",
    "h2o": "file.send-compressed: text.txt.gz beside the file",
}
HELLO_HOW = {             # what answers /hello (see the templates)
    "lfhttpd": "handler hello (static memory)",
    "nginx": "return 200",
    "h2o": "mruby handler (a Proc returning a constant)",
}

try:
    CLK_TCK = int(subprocess.run(["getconf", "CLK_TCK"], capture_output=True,
                                 text=True, check=True).stdout)
except (OSError, ValueError, subprocess.CalledProcessError):
    CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg=""):
    print(msg, flush=True)


# --- workloads -----------------------------------------------------------------------

class Workload:
    """One load pattern. tool: wrk, ab, cold (each of COLD_FILES fresh files fetched
    once) or mem; variant: which server instances it uses ("main", "log" for the
    access-log-on servers, "nomem" for lfhttpd without small files in memory, "copy"
    for lfhttpd and nginx with sendfile off, "sites" for lfhttpd and nginx with the
    server and location blocks of sites.conf.in, "proxy" for lfhttpd and nginx proxying
    to one upstream through proxy.conf.in, "php" for every server passing to one PHP-FPM
    pool (lfhttpd and nginx through php.conf.in), "mem" for fresh ones)."""

    def __init__(self, key, title, label, tool="wrk", conns=100, path="/index.html",
                 headers=(), script=None, script_args=(), variant="main", check=False,
                 skip=None, variant_of=None, plot_label=None, ceiling=False, probes=(),
                 part_of=None, scrape=None):
        self.key, self.title, self.label = key, title, label
        self.plot_label = plot_label or label  # under the bars: a long one is cut off
        self.tool, self.conns, self.path = tool, conns, path
        self.headers, self.script, self.variant = list(headers), script, variant
        self.script_args = list(script_args)  # after wrk's `--`, for the script's init()
        self.ceiling = ceiling  # the ceiling program runs it too (1 KiB keep-alive)
        self.check = check      # ask each server for path first; skip it unless 200
        # (path, status) pairs each server must answer before the rounds, or be skipped:
        # shows that the configuration measured is the one meant.
        self.probes = list(probes)
        self.skip = skip or {}  # server -> why it never runs this workload
        # A variation on another workload (QUICK=1 gives it one round, to keep a smoke
        # run to a few minutes).
        self.variant_of = variant_of
        # A second figure of another workload: `--only` naming that one runs this too.
        self.part_of = part_of
        # A path fetched every second during the run from the servers of the variant's
        # own instances (a metrics scrape): each fetch that is not a 200 is an error.
        self.scrape = scrape
        self.pinned = False  # a pinned twin (--pin): servers and load on their own cores

    def command(self, url, duration, ab_requests):
        """The exact load-generator command for this workload against url."""
        if self.tool == "ab":
            # -t caps the run at the others' duration (-n after it, or ab takes -n 50000).
            return ["ab", "-q", "-t", str(duration), "-n", str(ab_requests),
                    "-c", str(self.conns), "-s", "10", url + self.path]
        cmd = ["wrk", "-t1", "-c%d" % self.conns, "-d%ds" % duration, "--latency"]
        for h in self.headers:
            cmd += ["-H", h]
        if self.script:
            cmd += ["-s", os.path.join(HERE, self.script)]
        cmd.append(url + self.path)
        return cmd + ["--"] + self.script_args if self.script_args else cmd


WORKLOADS = [
    Workload("small_ka", "1 KiB file, keep-alive, 100 connections", "1 KiB c100",
             ceiling=True),
    Workload("small_nomem", "1 KiB file, keep-alive, 100 connections, lfhttpd with "
             "open_file_cache_mem_max 0 (head, then the body with sendfile, as nginx)",
             "1 KiB c100, lfhttpd open_file_cache_mem_max 0", variant="nomem",
             variant_of="small_ka", plot_label="1 KiB c100, mem_max 0",
             skip={"lighttpd": "unchanged: see 1 KiB c100", "h2o": "unchanged: see 1 KiB c100"}),
    # The price of server and location blocks: the 1 KiB c100 request through a realistic
    # site (sites.conf.in: the default one of two servers, twelve locations, three of them
    # regexes, try_files on /), lfhttpd and nginx with the same text.
    Workload("sites_ka", "1 KiB file, keep-alive, 100 connections, through two server "
             "blocks and twelve locations (sites.conf.in; lfhttpd and nginx)",
             "1 KiB c100, sites", variant="sites", variant_of="small_ka",
             # index.html through `location /` of the default server, and three other
             # locations of it answering as written.
             probes=[("/index.html", 200), ("/healthz", 200), ("/old", 301),
                     ("/private/x", 403)],
             skip={"lighttpd": "no server/location configuration in this comparison",
                   "h2o": "no server/location configuration in this comparison"}),
    # The price of the rewrite module: the 1 KiB c100 request as /r/index.html, through
    # rewrite.conf.in's maps, set, ifs and a `rewrite ... last` to /index.html, with an
    # access log whose if= map skips it; lfhttpd and nginx with the same text.
    Workload("rewrite_ka", "1 KiB file, keep-alive, 100 connections, as /r/index.html "
             "through map, set, if, rewrite ... last and a conditional access log "
             "(rewrite.conf.in; lfhttpd and nginx)",
             "1 KiB c100, rewrite", variant="rewrite", variant_of="small_ka",
             path="/r/index.html",
             probes=[("/r/index.html", 200), ("/index.html", 200), ("/old/x", 301),
                     ("/users/7", 200)],
             skip={"lighttpd": "no nginx rewrite configuration in this comparison",
                   "h2o": "no nginx rewrite configuration in this comparison"}),
    # What metrics cost: lfhttpd with `handler /metrics metrics;`, scraped every second on
    # a keep-alive connection of its own (as Prometheus does) while wrk runs, beside
    # small_ka's lfhttpd without it, in the same run.
    Workload("metrics_ka", "1 KiB file, keep-alive, 100 connections, lfhttpd with a metrics "
             "mount scraped every second", "1 KiB c100, metrics scraped 1/s",
             variant="metrics", variant_of="small_ka", plot_label="1 KiB c100, metrics",
             scrape="/metrics",
             skip={"lighttpd": "unchanged: see 1 KiB c100", "h2o": "unchanged: see 1 KiB c100"}),
    Workload("limit_req_ka", "1 KiB file, keep-alive, 100 connections, lfhttpd and nginx "
             "with a limit_req zone whose rate is never reached", "1 KiB c100, limit_req",
             variant="limit", variant_of="small_ka", plot_label="1 KiB c100, limit_req",
             skip={"lighttpd": "no nginx limit_req in this comparison",
                   "h2o": "no nginx limit_req in this comparison"}),
    Workload("c1000", "1 KiB file, keep-alive, 1000 connections", "1 KiB c1000",
             conns=1000, ceiling=True),
    # 100 connections x 16 requests in flight: wrk's one thread, not the number of
    # connections, is what limits it (against the ceiling c10, c25 and c100 give the same
    # figure), so c100 like small_ka.
    Workload("pipelined", "1 KiB file, keep-alive, 100 connections, 16 requests pipelined "
             "per connection (wrk -s pipeline.lua)", "pipelined x16 c100",
             script="pipeline.lua", script_args=["16"], ceiling=True),
    Workload("close_wrk", "1 KiB file, Connection: close, 50 connections (wrk)",
             "close, wrk", conns=50, headers=["Connection: close"]),
    Workload("close_ab", "1 KiB file, no keep-alive, 50 concurrent (ab; single-threaded, "
             "saturates first)", "close, ab", tool="ab", conns=50),
    Workload("large", "10 MiB file, 10 connections", "10 MiB c10", conns=10,
             path="/big.bin"),
    # The same download with lfhttpd and nginx copying the file through a buffer instead of
    # sendfile (`sendfile off` in both), as h2o always does; lighttpd and h2o measured again.
    Workload("large_copy", "10 MiB file, 10 connections, lfhttpd and nginx with sendfile "
             "off (the file read into a buffer and written, as h2o does)",
             "10 MiB c10, sendfile off", conns=10, path="/big.bin", variant="copy",
             variant_of="large", plot_label="10 MiB c10, sendfile off"),
    # The same download with a fixed socket send buffer in lfhttpd and nginx (`listen ...
    # sndbuf=256k`; the kernel doubles it): what a bounded queue per connection changes on
    # loopback, where the sender's CPU also does the receiver's TCP work.
    Workload("large_sndbuf", "10 MiB file, 10 connections, lfhttpd and nginx listening "
             "with sndbuf=" + SNDBUF, "10 MiB c10, sndbuf=" + SNDBUF, conns=10,
             path="/big.bin", variant="sndbuf", variant_of="large",
             plot_label="10 MiB c10, sndbuf=" + SNDBUF),
    Workload("gzip", "100 KiB text, Accept-Encoding: gzip, 50 connections",
             "gzip 100 KiB", conns=50, path="/text.txt",
             headers=["Accept-Encoding: gzip"]),
    Workload("gzip_cold", "gzip cold: %d fresh 100 KiB texts, each asked for once "
             "(Accept-Encoding: gzip), %d connections: every server compresses"
             % (COLD_FILES, COLD_CONNS), "gzip cold, 100 KiB", tool="cold", conns=COLD_CONNS,
             path="/cold/"),
    Workload("random", "random one of 10,000 small files, 100 connections",
             "random file", path="/", script="random.lua"),
    Workload("hello", "dynamic handler /hello, 100 connections", "/hello",
             path="/hello", check=True, variant_of="small_ka",
             skip={"lighttpd": "no trivial equivalent in lighttpd"}),  # h2o: mruby
    Workload("access_log", "1 KiB file, keep-alive, 100 connections, access log on",
             "access log on", variant="log", variant_of="small_ka"),
    # Reverse proxy: wrk -> lfhttpd or nginx -> the same upstream (an lfhttpd answering
    # from memory, upstream.conf.in), through proxy.conf.in (`keepalive 32`). The probes show
    # that the answers come from the upstream: only its document root has /upstream.txt.
    Workload("proxy_ka", "1 KiB, keep-alive, 100 connections, proxied to an upstream "
             "(lfhttpd and nginx, upstream keepalive 32)", "proxied 1 KiB c100",
             variant="proxy", variant_of="small_ka", plot_label="proxied 1 KiB c100",
             probes=[("/index.html", 200), ("/upstream.txt", 200)],
             skip={"lighttpd": "no proxy configuration in this comparison",
                   "h2o": "no proxy configuration in this comparison"}),
    Workload("proxy_100k", "100 KiB, keep-alive, 50 connections, proxied to an upstream "
             "(lfhttpd and nginx, upstream keepalive 32, proxy_buffering on)",
             "proxied 100 KiB c50", conns=50, path="/100k.bin", variant="proxy",
             variant_of="small_ka", plot_label="proxied 100 KiB c50",
             probes=[("/100k.bin", 200), ("/upstream.txt", 200)],
             skip={"lighttpd": "no proxy configuration in this comparison",
                   "h2o": "no proxy configuration in this comparison"}),
    Workload("proxy_tls_ka", "1 KiB, keep-alive, 100 connections, proxied to an HTTPS "
             "upstream (lfhttpd and nginx, upstream keepalive 32, TLS sessions reused)",
             "proxied to https 1 KiB c100", variant="proxytls", variant_of="small_ka",
             plot_label="proxied to https 1 KiB c100",
             probes=[("/index.html", 200), ("/upstream.txt", 200)],
             skip={"lighttpd": "no proxy configuration in this comparison",
                   "h2o": "no proxy configuration in this comparison"}),
    # PHP (issue 32): wrk -> a server -> one PHP-FPM pool (pm static, 2 workers, a unix
    # socket). `php`: lfhttpd and nginx with php.conf.in's `fastcgi_pass unix:...`, as
    # Debian's snippet and most PHP sites have it, lighttpd (mod_fastcgi) and h2o
    # (file.custom-handler) with the same in their terms: a connection to PHP-FPM per
    # request. `php_ka`: an upstream block with keepalive and fastcgi_keep_conn on, the
    # connections to PHP-FPM kept (lfhttpd and nginx). The probe shows that the answer is
    # PHP's output.
    Workload("php", "PHP page (echo \"hello \", PHP_VERSION) through PHP-FPM, keep-alive, "
             "50 connections (every server passing to one pool, a connection to it per "
             "request: lfhttpd and nginx fastcgi_pass unix:, lighttpd mod_fastcgi, h2o "
             "file.custom-handler)", "PHP-FPM c50", conns=50, path="/index.php",
             variant="php", variant_of="small_ka", plot_label="PHP-FPM c50",
             probes=[("/index.php", 200, PHP_ANSWER)]),
    Workload("php_ka", "PHP page through PHP-FPM, keep-alive, 50 connections, the "
             "connections to PHP-FPM kept (lfhttpd and nginx, fastcgi_pass to an upstream "
             "block, keepalive 1, fastcgi_keep_conn on)", "PHP-FPM kept c50", conns=50,
             path="/kept/index.php", variant="php", variant_of="small_ka",
             plot_label="PHP-FPM kept c50",
             probes=[("/kept/index.php", 200, PHP_ANSWER)],
             skip={"lighttpd": "no FastCGI keep-alive (mod_fastcgi opens a connection per "
                               "request): not in this comparison",
                   "h2o": "h2o 2.2 keeps FastCGI connections (fastcgi.timeout.keepalive) "
                          "with no bound on how many (its pool has no size setting), not "
                          "one per thread as keepalive 1: not in this comparison"}),
    Workload("memory", "10,000 idle keep-alive connections: resident memory",
             "memory", tool="mem", variant="mem"),
    # HTTPS (issue 16): lfhttpd and nginx with tls.conf.in (the same certificate, ECDSA
    # P-256; TLS 1.2 and 1.3; ECDHE+AESGCM:ECDHE+CHACHA20), lighttpd and h2o with the
    # same in their terms; the load over https. The probe
    # shows that each answers over TLS before the rounds.
    Workload("https_ka", "HTTPS: 1 KiB file, keep-alive, 100 connections",
             "https 1 KiB c100", variant="tls", probes=[("/index.html", 200)]),
    # A new connection per request, so a full handshake per request: wrk and ab never
    # offer a session back.
    Workload("https_hs", "HTTPS: 1 KiB file, Connection: close, 50 connections (wrk): "
             "a full handshake per request", "https handshakes, wrk", conns=50,
             headers=["Connection: close"], variant="tls", probes=[("/index.html", 200)]),
    Workload("https_hs_ab", "HTTPS: 1 KiB file, no keep-alive, 50 concurrent (ab): a full "
             "handshake per request", "https handshakes, ab", tool="ab", conns=50,
             variant="tls", probes=[("/index.html", 200)],
             part_of="https_hs"),
    Workload("https_10m", "HTTPS: 10 MiB file, 10 connections", "https 10 MiB c10",
             conns=10, path="/big.bin", variant="tls", probes=[("/big.bin", 200)]),
    Workload("https_idle", "HTTPS: 10,000 idle TLS keep-alive connections: resident memory",
             "https idle", tool="mem", variant="memtls"),
]


# --- /proc -------------------------------------------------------------------------------

def proc_stat(pid):
    """(ppid, utime+stime in clock ticks) of one process, or None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    return int(rest[1]), int(rest[11]) + int(rest[12])


def process_tree(root):
    """root and all its descendants (nginx: master and workers)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st:
                children.setdefault(st[0], []).append(int(name))
    pids, todo = [], [root]
    while todo and len(pids) < 1000:
        pid = todo.pop()
        pids.append(pid)
        todo += children.get(pid, [])
    return pids


def cpu_ticks(pids):
    return sum(st[1] for st in map(proc_stat, pids) if st)


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


# --- servers -------------------------------------------------------------------------

def free_port():
    """A port free on 127.0.0.1 right now (for servers that need one named)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def fill_template(name, values, dest, drop=()):
    """The template with every @KEY@ replaced; the lines from `# {NAME}` to
    `# {end NAME}` (both included) are left out for each NAME in drop."""
    with open(os.path.join(HERE, name)) as f:
        text = f.read()
    for region in drop:
        text, n = re.subn(r"^[ \t]*#\s*\{%s\}.*?^[ \t]*#\s*\{end %s\}[^\n]*\n"
                          % (re.escape(region), re.escape(region)), "", text,
                          flags=re.M | re.S)
        if n != 1:
            raise RuntimeError("%s: no region {%s} to leave out" % (name, region))
    for k, v in values.items():
        text = text.replace("@%s@" % k, str(v))
    leftover = re.search(r"^[^#\n]*(@[A-Z_]+@)", text, re.M)
    if leftover:
        raise RuntimeError("%s: %s was not filled in" % (name, leftover.group(1)))
    with open(dest, "w") as f:
        f.write(text)


def sites_block(kind, port, template=SITES_TEMPLATE, upstream_port=None, rundir=None,
                upstream_scheme="http"):
    """The server blocks of sites.conf.in or proxy.conf.in (the leading comment left out)
    for kind: each server's listen line, the document root, the upstream's port and the
    lines only nginx needs. lfhttpd's listen lines name the address of its own top-level
    `listen`, so all its servers are on its one socket; nginx's default server carries
    the socket options."""
    with open(os.path.join(HERE, template)) as f:
        lines = f.read().splitlines(True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    address = "127.0.0.1:%d" % port
    options = " " + NGINX_LISTEN_OPTIONS if kind == "nginx" else ""
    values = {"LISTEN": "listen %s;" % address,
              "LISTEN_DEFAULT": "listen %s%s default_server;" % (address, options),
              "DOCROOT": DOCROOT, "UPSTREAM_PORT": str(upstream_port), "RUNDIR": str(rundir),
              "UPSTREAM_SCHEME": upstream_scheme,
              "PROXY_TLS": "proxy_ssl_protocols TLSv1.2 TLSv1.3;"
              if upstream_scheme == "https" else "",
              "PROXY_KEEPALIVE": PROXY_KEEPALIVE, "UPSTREAM_KEEPALIVE": UPSTREAM_KEEPALIVE,
              "NGINX_PROXY": NGINX_PROXY if kind == "nginx" else "",
              "PHP_SOCKET": php_socket(), "PHP_KEEPALIVE": str(PHP_KEEPALIVE),
              "PHP_DOCROOT": PHP_DOCROOT}
    text = "".join(lines)
    for k, v in values.items():
        text = text.replace("@%s@" % k, v)
    return re.sub(r"^[ \t]+\n", "", text, flags=re.M)  # placeholders left empty


def php_socket():
    """The PHP-FPM pool's unix socket, in its run directory."""
    return os.path.join(RUN, "php-fpm", "php-fpm.sock")


def find_php_fpm():
    """PHP-FPM's binary (in PATH, /usr/sbin or /sbin), or None."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return next((found for name in PHP_FPM_NAMES for found in [shutil.which(name, path=path)]
                 if found), None)


def php_block(kind, port):
    """The "php" variant's FastCGI configuration for kind: php.conf.in's blocks for lfhttpd
    and nginx, their equivalent for lighttpd and h2o."""
    if kind in ("lfhttpd", "nginx"):
        return sites_block(kind, port, PHP_TEMPLATE)
    text = {"lighttpd": LIGHTTPD_PHP, "h2o": H2O_PHP}[kind]
    return text.replace("@PHP_SOCKET@", php_socket()).replace("@PHP_DOCROOT@", PHP_DOCROOT)


def tls_block(kind):
    """kind's TLS settings with the certificate: tls.conf.in (the leading comment left
    out) for lfhttpd and nginx (indented into its server block), their equivalents for
    lighttpd and h2o."""
    with open(os.path.join(HERE, TLS_TEMPLATE)) as f:
        lines = [ln for ln in f.read().splitlines(True) if not ln.startswith("#")]
    text = {"lighttpd": LIGHTTPD_TLS, "h2o": H2O_TLS}.get(kind) or "".join(
        ("        " if kind == "nginx" else "") + ln for ln in lines).rstrip("\n")
    return text.replace("@CERT@", TLS_CERT).replace("@KEY@", TLS_KEY)


def make_cert():
    """The HTTPS workloads' certificate: ECDSA P-256, self-signed for localhost and
    127.0.0.1, made once with openssl and kept (a new key each run would change nothing
    but the time it takes)."""
    if os.path.exists(TLS_CERT) and os.path.exists(TLS_KEY):
        return
    os.makedirs(TLS_DIR, exist_ok=True)
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "3650",
                        "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", TLS_KEY + ".tmp", "-out", TLS_CERT + ".tmp"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("openssl req could not make the certificate:\n" + p.stderr)
    os.rename(TLS_KEY + ".tmp", TLS_KEY)
    os.rename(TLS_CERT + ".tmp", TLS_CERT)


def tls_parameters(port):
    """What a default OpenSSL client (as wrk and ab are) negotiates with the server on
    port, from `openssl s_client -brief`: protocol, cipher suite, key exchange."""
    try:
        p = subprocess.run(["openssl", "s_client", "-brief", "-connect",
                            "127.0.0.1:%d" % port, "-servername", "localhost"],
                           input="", capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = p.stdout + p.stderr
    found = [m.group(1).strip() for m in (re.search(r"^%s:\s*(.+)$" % k, out, re.M) for k in (
        "Protocol version", "Ciphersuite", "Server Temp Key")) if m]
    return ", ".join(found) or None


class ConfigRefused(RuntimeError):
    """lfhttpd -t rejects a configuration the benchmark wrote (for a variant in
    OPTIONAL_VARIANTS, its rows are skipped with this message)."""


class Server:
    """One running server instance: kind (lfhttpd, nginx, lighttpd, h2o, or the ceiling)
    and variant. binary: lfhttpd's or the ceiling's (the others are found in PATH).
    upstream: the upstream Server the "proxy" variant forwards to."""

    def __init__(self, kind, variant, binary, upstream=None):
        self.kind, self.variant, self.bin = kind, variant, binary
        self.upstream = upstream
        self.dir = os.path.join(RUN, "%s-%s" % (kind, variant))
        self.error_log = os.path.join(self.dir, "error.log")
        self.access_log = os.path.join(self.dir, "access.log")
        self.proc, self.port, self.restarts = None, None, 0
        self.events = []  # crashes and restarts, for the report
        # lfhttpd's heap allocations, counted by ALLOC_LIB (tests/alloc_counter.c)
        self.alloc_counter = os.path.join(self.dir, "allocs") \
            if ALLOC_LIB and kind == "lfhttpd" and variant in ALLOC_VARIANTS else None

    def allocations(self):
        """The count so far (None when not counted)."""
        try:
            with open(self.alloc_counter, "rb") as f:
                return struct.unpack("<Q", f.read(8))[0]
        except (TypeError, OSError, struct.error):
            return None

    @property
    def tls(self):
        return self.variant in TLS_VARIANTS or self.variant == UPSTREAM_TLS

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    def _access_log_directive(self):
        on = self.variant == "log"
        if self.kind == "lfhttpd":
            return '"%s"' % self.access_log if on else "off"
        if self.kind == "nginx":
            return ('access_log "%s" combined buffer=64k flush=1s;' % self.access_log
                    if on else "access_log off;")
        if self.kind == "h2o":  # no access-log directive: none
            return 'access-log: "%s"' % self.access_log if on else ""
        return 'accesslog.filename = "%s"' % self.access_log if on else ""

    def _command(self):
        """Write the configuration and return the command line that runs the server."""
        if self.kind == CEILING:  # no configuration: address, port, threads
            return [self.bin, "127.0.0.1", "0", str(THREADS)]
        # lighttpd's and h2o's PHP configuration has no server block of its own: their
        # document root is the PHP one.
        docroot = PHP_DOCROOT if self.variant == "php" and self.kind in ("lighttpd", "h2o") \
            else DOCROOT
        values = {"DOCROOT": docroot, "RUNDIR": self.dir, "ERROR_LOG": self.error_log,
                  "THREADS": THREADS, "WORKERS": THREADS, "PORT": self.port,
                  "FD_LIMIT": FD_LIMIT, "MAX_CONNS": min(20000, FD_LIMIT // 2),
                  "H2O_MAX_CONNS": min(16384, FD_LIMIT - 1024),
                  "ACCESS_LOG": self._access_log_directive(),
                  "ACCESS_LOG_DIRECTIVE": self._access_log_directive(),
                  "MEM_MAX": "0" if self.variant == "nomem" else "4k",
                  "METRICS": "handler /metrics metrics;" if self.variant == "metrics" else "",
                  "LIMIT": LIMIT_LINES if self.variant == "limit" else "",
                  "SENDFILE": "off" if self.variant == "copy" else "on",
                  "LISTEN_OPTIONS": NGINX_LISTEN_OPTIONS + (" ssl" if self.tls else "") +
                  (" sndbuf=" + SNDBUF if self.variant == "sndbuf" else ""),
                  "LISTEN_SSL": (" ssl" if self.tls else "") +
                  (" sndbuf=" + SNDBUF if self.variant == "sndbuf" else ""),
                  "TLS": tls_block(self.kind) if self.tls else "",
                  "SITES": sites_block(self.kind, self.port) if self.variant == "sites"
                  else sites_block(self.kind, self.port, REWRITE_TEMPLATE, rundir=self.dir)
                  if self.variant == "rewrite" else "",
                  "PROXY": sites_block(self.kind, self.port, PROXY_TEMPLATE,
                                       self.upstream and self.upstream.port,
                                       upstream_scheme="https" if self.variant == "proxytls"
                                       else "http")
                  if self.variant in PROXY_VARIANTS else "",
                  "PHP": php_block(self.kind, self.port) if self.variant == "php" else "",
                  "UPSTREAM_DOCROOT": UPSTREAM_DOCROOT}
        if self.variant == "php" and self.kind in FASTCGI_CONF:
            # `include fastcgi.conf;`: each server's own, beside it
            shutil.copyfile(FASTCGI_CONF[self.kind], os.path.join(self.dir, "fastcgi.conf"))
        conf = os.path.join(self.dir, self.kind + ".conf")
        # nginx's own server block gives way to the sites' two or the proxy's one.
        drop = ("main server",) if self.variant in ("sites", "rewrite", "php") + tuple(
            PROXY_VARIANTS) and \
            self.kind == "nginx" else ()
        template = UPSTREAM_TEMPLATE if self.variant in PROXY_VARIANTS.values() \
            else self.kind + ".conf.in"
        fill_template(template, values, conf, drop)
        if self.kind == "lfhttpd":
            self._drop_unknown_optional(conf)
            return [self.bin, "-c", conf]
        if self.kind == "nginx":
            return ["nginx", "-p", self.dir + "/", "-c", conf]
        if self.kind == "h2o":
            return ["h2o", "-c", conf]
        os.makedirs(os.path.join(self.dir, "deflate-cache"), exist_ok=True)
        return ["lighttpd", "-D", "-f", conf]

    def _check(self, conf):
        p = subprocess.run([self.bin, "-t", "-c", conf], capture_output=True, text=True)
        return p.returncode, (p.stdout + p.stderr).strip()

    def _drop_unknown_optional(self, conf):
        """lfhttpd is changing under the benchmark: a line marked `# optional` whose
        directive this lfhttpd does not know (`lfhttpd -t`: unknown directive) is dropped,
        and the report says so. Any other error stops the benchmark with -t's output:
        measuring a configuration other than the one written would be silent unfairness."""
        code, out = self._check(conf)
        if code == 0:
            return
        with open(conf) as f:
            lines = f.readlines()
        unknown = {int(m.group(1)) for m in re.finditer(
            r"^.*?%s:(\d+): unknown directive " % re.escape(conf), out, re.M)}
        drop = {n for n in unknown
                if n <= len(lines) and re.search(r";\s*#\s*optional\b", lines[n - 1])}
        if drop:
            with open(conf, "w") as f:
                f.writelines(ln for i, ln in enumerate(lines, 1) if i not in drop)
            code, out = self._check(conf)
        if code != 0:
            raise ConfigRefused("%s -t -c %s rejects the benchmark's configuration%s:\n%s"
                               % (self.bin, conf, " (even without the optional lines it "
                                  "does not know)" if drop else "", out))
        note = "this lfhttpd does not know some optional directives: run without %s" % (
            "; ".join(lines[n - 1].split(";")[0].strip() for n in sorted(drop)))
        if note not in self.events:
            self.events.append(note)

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        for attempt in range(3):  # a port picked here (not 0) may be taken meanwhile
            # Over TLS too: a port named, as the listen line is not lfhttpd's plain one.
            named = ("sites", "rewrite", "php", UPSTREAM_TLS) + tuple(PROXY_VARIANTS) + \
                TLS_VARIANTS
            self.port = 0 if self.kind == CEILING or (
                self.kind == "lfhttpd" and self.variant not in named) else free_port()
            open(self.error_log, "w").close()
            cmd = self._command()
            out = open(os.path.join(self.dir, "stdout.log"), "w")
            # Own session: Ctrl-C reaches the driver only, which stops servers in order.
            env = dict(os.environ, LD_PRELOAD=ALLOC_LIB,
                       LFHTTPD_ALLOC_COUNTER=self.alloc_counter) if self.alloc_counter \
                else None
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=self.dir, start_new_session=True, env=env)
            out.close()
            if self._wait_ready():
                return
            self.stop(check_exit=False)
        raise RuntimeError("%s did not start: %s\n%s" % (self.kind, " ".join(cmd),
                                                         self.log_tail()))

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.kind in ("lfhttpd", CEILING):  # ceiling: on stdout
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.log_tail(1000))
                if m:
                    self.port = int(m.group(1))
            if self.port and port_open(self.port):
                # nginx: wait for every worker too, or the first run meets only one.
                if self.kind != "nginx" or len(self.pids()) >= THREADS + 1:
                    return True
            time.sleep(0.05)
        return False

    def read_error_log(self):
        try:
            with open(self.error_log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, lines=15):
        text = self.read_error_log()
        try:
            with open(os.path.join(self.dir, "stdout.log"), errors="replace") as f:
                text += f.read()
        except OSError:
            pass
        return "\n".join(text.splitlines()[-lines:])

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def note_exit(self, where):
        """Record how the server ended (for the report), with its last log lines."""
        code = self.proc.returncode
        what = "exited with status %s" % code if code >= 0 else "killed by signal %d" % -code
        self.events.append("%s (%s) %s %s; last log lines:\n%s"
                           % (self.kind, self.variant, what, where, self.log_tail()))
        log("  !! %s (%s) %s %s" % (self.kind, self.variant, what, where))

    def ensure_running(self, where):
        """Restart a server that died (bounded), noting when and how it ended."""
        if self.alive():
            return True
        self.note_exit("before " + where)
        if self.restarts >= MAX_RESTARTS:
            return False
        self.restarts += 1
        self.start()
        return True

    def pids(self):
        return process_tree(self.proc.pid) if self.alive() else []

    def stop(self, check_exit=True):
        """SIGTERM, wait, then SIGKILL by PID: the master and every process it had.
        check_exit: a server found dead, or not exiting 0 on SIGTERM, is noted."""
        if self.proc is None:
            return
        pids = self.pids()
        if self.proc.poll() is not None:
            if check_exit:
                self.note_exit("before it was stopped")
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
                if check_exit and self.proc.returncode != 0:
                    self.note_exit("on SIGTERM")
            except subprocess.TimeoutExpired:
                if check_exit:
                    self.events.append("%s (%s) did not exit within %.0f s of SIGTERM: killed"
                                       % (self.kind, self.variant, STOP_TIMEOUT))
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        for pid in pids[1:]:  # workers left behind by a master that was killed
            if proc_stat(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


class PhpFpm(Server):
    """The "php" variant's PHP-FPM pool (php-fpm.conf.in): one master and PHP_CHILDREN
    workers on a unix socket in its run directory, started before the servers' "php"
    instances and passed to by all; the upstream of their runs, so its CPU is measured
    apart. Stopped by PID (Server.stop: SIGTERM to the master, then SIGKILL to any process
    of it left)."""

    def __init__(self, binary):
        super().__init__("php-fpm", "php", binary)
        self.dir = os.path.join(RUN, "php-fpm")
        self.error_log = os.path.join(self.dir, "error.log")
        self.socket = php_socket()

    def _command(self):
        root = os.getuid() == 0
        # As root, PHP-FPM wants the workers' user named and -R to accept root itself.
        user = "user = root\ngroup = root" if root else ""
        conf = os.path.join(self.dir, "php-fpm.conf")
        fill_template(PHP_FPM_TEMPLATE, {"RUNDIR": self.dir, "PHP_SOCKET": self.socket,
                                         "PHP_CHILDREN": PHP_CHILDREN, "PHP_USER": user},
                      conf)
        try:
            os.remove(self.socket)  # a socket left by a pool that was killed
        except OSError:
            pass
        return [self.bin, "-F", "-y", conf] + (["-R"] if root else [])

    def start(self):
        super().start()
        self.port = None  # a unix socket: no TCP port (and no TIME_WAIT to count)

    def restart(self):
        """Stopped and started again before every run (warm-up too), on the same socket: a
        PHP-FPM worker asked to keep its connection (fastcgi_keep_conn on) serves that one
        connection until the server closes it, and lfhttpd and nginx keep an idle one until
        the upstream's keepalive_timeout (60 s), so another server's idle connections would
        hold the workers of a pool kept running. Each run, whichever the server, starts with
        both workers free (and its CPU figures with a pool that served no one else)."""
        self.stop()
        self.start()

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if len(self.pids()) >= PHP_CHILDREN + 1:
                try:
                    with socket.socket(socket.AF_UNIX) as s:
                        s.settimeout(0.5)
                        s.connect(self.socket)
                    return True
                except OSError:
                    pass
            time.sleep(0.05)
        return False


# --- load generators -------------------------------------------------------------------

TIME_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
SIZE_B = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}


def parse_wrk(out):
    """wrk's summary: requests, seconds, bytes, req/s, p50/p99 (ms), errors."""
    r = {}
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h), ([\d.]+)([KMGT]?B) read", out)
    if not m:
        return None
    r["requests"] = int(m.group(1))
    r["seconds"] = float(m.group(2)) * TIME_MS[m.group(3)] / 1000
    r["bytes"] = float(m.group(4)) * SIZE_B[m.group(5)]
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    r["rps"] = float(m.group(1)) if m else r["requests"] / max(r["seconds"], 1e-9)
    for pct in ("50", "99"):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s|m|h)\s*$" % pct, out, re.M)
        # 0: wrk recorded no latency at that rank (seen with pipelining, which records
        # one latency per batch): no figure, not a zero.
        r["p" + pct] = float(m.group(1)) * TIME_MS[m.group(2)] if m and float(
            m.group(1)) > 0 else None
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    r["socket_errors"] = sum(map(int, m.groups())) if m else 0
    r["socket_detail"] = ("connect %s read %s write %s timeout %s" % m.groups()) if m else ""
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    r["non2xx"] = int(m.group(1)) if m else 0
    return r


def parse_ab(out, asked, code):
    """ab's summary, in the same terms as parse_wrk (ab reports whole milliseconds)."""
    r = {}
    m = re.search(r"^Complete requests:\s+(\d+)", out, re.M)
    if not m:
        return None
    r["requests"] = int(m.group(1))
    m = re.search(r"^Time taken for tests:\s+([\d.]+) seconds", out, re.M)
    r["seconds"] = float(m.group(1)) if m else None
    m = re.search(r"^Total transferred:\s+(\d+) bytes", out, re.M)
    r["bytes"] = float(m.group(1)) if m else 0.0
    m = re.search(r"^Requests per second:\s+([\d.]+)", out, re.M)
    r["rps"] = float(m.group(1)) if m else None
    for pct in ("50", "99"):
        m = re.search(r"^\s+%s%%\s+(\d+)" % pct, out, re.M)
        r["p" + pct] = float(m.group(1)) if m else None
    m = re.search(r"^Failed requests:\s+(\d+)", out, re.M)
    failed = int(m.group(1)) if m else 0
    # ab gives up on a reset connection (and exits non-zero): the requests it never made
    # count as errors then. With -t, fewer than asked is just the time limit.
    lost = max(0, asked - r["requests"]) if code != 0 else 0
    r["socket_errors"] = failed + lost
    r["socket_detail"] = "failed %d, not completed %d" % (failed, lost)
    m = re.search(r"^Non-2xx responses:\s+(\d+)", out, re.M)
    r["non2xx"] = int(m.group(1)) if m else 0
    return r


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1][:160] if lines else ""


TIME_WAIT_S = 60     # Linux keeps a closed TCP connection in TIME_WAIT this long
TIME_WAIT_QUIET = 2  # seconds without measuring before a proxied run (below)


def time_wait_left(port):
    """The seconds left (whole ones from 10 s up, as ss prints them) of every TCP
    connection to or from 127.0.0.1:port now in TIME_WAIT, on whichever side closed first;
    None if ss cannot tell. A connection closed s seconds ago shows TIME_WAIT_S - s. Counting those closed
    during a run this way, not as pairs new since before it: on loopback the kernel
    reuses a TIME_WAIT pair for a new connection (tcp_tw_reuse), and a run of a proxy
    that opens a few thousand connections a second soon goes round the port range."""
    try:
        out = subprocess.run(["ss", "-tanHo", "state", "time-wait",
                              "( sport = :%d or dport = :%d )" % (port, port)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    left = []
    for timer in re.findall(r"timer:\(timewait,([^,]*),", out.stdout):
        # ss writes 1min, 53sec, 5.123ms (5 s 123 ms) or 123ms
        m = re.fullmatch(r"(?:(\d+)min)?(?:(\d+)(?:sec|\.))?(?:(\d+)ms)?", timer)
        if not m:
            return None
        mins, secs, ms = (int(g or 0) for g in m.groups())
        left.append(mins * 60 + secs + ms / 1000)
    if out.returncode != 0 or len(left) != len(out.stdout.splitlines()):
        return None
    return left


class Scraper:
    """GET path every second on one keep-alive connection, in a thread, until stopped:
    how many fetches were made and how many were not a 200."""

    def __init__(self, port, path):
        self.port, self.path = port, path
        self.done, self.fetches, self.failures = threading.Event(), 0, 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        conn = None
        while not self.done.wait(1.0):
            try:
                conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", self.path)
                resp = conn.getresponse()
                resp.read()
                self.failures += resp.status != 200
            except (OSError, http.client.HTTPException):
                self.failures += 1
                conn = None
            self.fetches += 1
        if conn:
            conn.close()

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.fetches, self.failures


def run_load(server, wl, opts, record=True):
    """One run of wl's load generator against server; server CPU measured around it. A
    proxy's upstream is measured apart (upstream_cpu_s): the same program for every proxy,
    it is never counted as the proxy's."""
    cmd = wl.command(server.url, opts.duration if record else opts.warmup, opts.ab_requests)
    if isinstance(getattr(server, "upstream", None), PhpFpm):
        try:  # a fresh pool: no worker held by the other server's kept connections
            server.upstream.restart()
        except RuntimeError as e:
            return {"failed": "PHP-FPM did not start again: %s" % last_line(str(e))} \
                if record else None
    pids = server.pids()
    up_pids = server.upstream.pids() if getattr(server, "upstream", None) else []
    if wl.pinned:
        server_cpus, load_cpus = pin_split()
        pin_pids(pids, server_cpus)
        pin_pids(up_pids, load_cpus)
        cmd = ["taskset", "-c", cpu_list(load_cpus)] + cmd
    try:
        return run_load_measured(server, wl, opts, record, cmd, pids, up_pids)
    finally:
        if wl.pinned:  # the free-running twin and every other row: all CPUs again
            every = sorted(os.sched_getaffinity(0))
            pin_pids(pids + up_pids, every)


def run_load_measured(server, wl, opts, record, cmd, pids, up_pids):
    """run_load's measured part: the load generator's command, the server CPU around it."""
    up_before = cpu_ticks(up_pids)
    before = cpu_ticks(pids)
    allocs_before = server.allocations()
    timeout = (opts.duration if record else opts.warmup) + 60
    if getattr(server, "upstream", None) and server.upstream.port and record:
        # Connections closed just before the run would read like ones closed at its start
        # (whole seconds): a pause keeps them out of the count after it.
        time.sleep(TIME_WAIT_QUIET)
    started = time.monotonic()
    scraper = Scraper(server.port, wl.scrape) if wl.scrape and record and \
        server.kind in OWN_INSTANCES.get(wl.variant, ()) else None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                           timeout=timeout)
        out, code = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        out, code = out.decode(errors="replace") if isinstance(out, bytes) else out, "timeout"
    after = cpu_ticks(pids)
    up_after = cpu_ticks(up_pids)
    allocs_after = server.allocations()
    scrapes = scraper.stop() if scraper else None
    if not record:
        return None
    r = parse_wrk(out) if wl.tool == "wrk" else parse_ab(out, opts.ab_requests, code)
    if r is None:
        return {"failed": "%s gave no summary (exit %s): %s" % (cmd[0], code, last_line(out))}
    if code != 0:
        r["socket_detail"] += " (exit %s: %s)" % (code, last_line(out))
        r["socket_errors"] = r["socket_errors"] or 1
    if scrapes:
        r["scrapes"], r["scrape_failures"] = scrapes
        if scrapes[1]:
            r["socket_detail"] += " (%d of %d scrapes failed)" % (scrapes[1], scrapes[0])
            r["socket_errors"] += scrapes[1]
    r["errors"] = r["socket_errors"] + r["non2xx"]
    r["cpu_s"] = (after - before) / CLK_TCK
    r["req_per_cpu_s"] = r["requests"] / r["cpu_s"] if r["cpu_s"] > 0 else None
    r["mib_s"] = r["bytes"] / r["seconds"] / 1024 ** 2 if r["seconds"] else None
    if allocs_before is not None and allocs_after is not None and r["requests"]:
        r["allocs_per_req"] = (allocs_after - allocs_before) / r["requests"]
    if up_pids:
        # Upstream connections the proxy (or the upstream) closed during the run: the ones
        # its keep-alive pool did not keep, each a new connection made for a request.
        left = time_wait_left(server.upstream.port) if server.upstream.port else None
        since = time.monotonic() - started
        closed = None if left is None else sum(
            1 for sec in left if sec >= TIME_WAIT_S - since - 1)
        r["upstream_conns_per_kreq"] = closed * 1000 / r["requests"] \
            if closed is not None and r["requests"] else None
        r["upstream_cpu_s"] = (up_after - up_before) / CLK_TCK
        r["upstream_req_per_cpu_s"] = r["requests"] / r["upstream_cpu_s"] \
            if r["upstream_cpu_s"] > 0 else None
    return r


def make_cold_files(tag):
    """COLD_FILES fresh 100 KiB texts under /cold/TAG/ (text.txt, each with its own first
    line): no server has seen these paths, so none has a compressed copy of them.
    Returns their URL paths."""
    with open(os.path.join(DOCROOT, "text.txt")) as f:
        text = f.read()
    folder = os.path.join(DOCROOT, "cold", tag)
    os.makedirs(folder)
    for i in range(COLD_FILES):
        head = "cold %s %03d\n" % (tag, i)
        with open(os.path.join(folder, "%03d.txt" % i), "w") as f:
            f.write(head + text[len(head):])
    return ["/cold/%s/%03d.txt" % (tag, i) for i in range(COLD_FILES)]


def fetch_each_once(port, paths, conns):
    """GET every path once with Accept-Encoding: gzip, over `conns` keep-alive
    connections taking the next path in turn. Returns (latencies in ms, bytes, socket
    errors, non-2xx, 200s not gzip-encoded, wall seconds)."""
    todo, lock = iter(paths), threading.Lock()
    found = {"lat": [], "bytes": 0, "sock": 0, "non2xx": 0, "plain": 0}

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                path = next(todo, None)
            if path is None:
                break
            t0 = time.perf_counter()
            try:
                conn.request("GET", path, headers={"Accept-Encoding": "gzip"})
                resp = conn.getresponse()
                body = resp.read()
                what = "non2xx" if resp.status != 200 else \
                    None if resp.getheader("Content-Encoding") == "gzip" else "plain"
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                body, what = b"", "sock"
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                found["lat"].append(ms)
                found["bytes"] += len(body)
                if what:
                    found[what] += 1
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(conns)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return found, time.monotonic() - t0


def run_cold(server, tag):
    """gzip cold: fresh files, each asked for once; the server's CPU measured around.
    The files are made before and removed after the run (neither is timed)."""
    paths = make_cold_files(tag)
    try:
        pids = server.pids()
        before = cpu_ticks(pids)
        found, seconds = fetch_each_once(server.port, paths, COLD_CONNS)
        after = cpu_ticks(pids)
    finally:
        shutil.rmtree(os.path.join(DOCROOT, "cold", tag), ignore_errors=True)
    lat = found["lat"]
    r = {"requests": len(lat), "seconds": seconds, "bytes": found["bytes"],
         "rps": len(lat) / seconds if seconds else None,
         "p50": percentile(lat, 50), "p99": percentile(lat, 99),
         "socket_errors": found["sock"], "non2xx": found["non2xx"] + found["plain"],
         "socket_detail": "%d not gzip-encoded" % found["plain"] if found["plain"] else ""}
    r["errors"] = r["socket_errors"] + r["non2xx"]
    r["cpu_s"] = (after - before) / CLK_TCK
    r["req_per_cpu_s"] = r["requests"] / r["cpu_s"] if r["cpu_s"] > 0 else None
    r["mib_s"] = r["bytes"] / seconds / 1024 ** 2 if seconds else None
    return r


def percentile(values, p):
    """The p-th percentile (nearest rank) of values, or None."""
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p / 100))] if v else None


def run_memory(lfhttpd_bin, notices, variant="mem"):
    """Fresh servers, warmed up; RSS of each before and with IDLE_CONNS idle connections
    to it. The servers are measured side by side (resident memory does not depend on
    timing, and it saves time); with variant "memtls", over TLS (idle_tls.py). Returns
    {server: result}; crashes go to notices. A server whose lfhttpd -t refuses an
    optional variant's configuration gets {"refused": why}."""
    tls = variant in TLS_VARIANTS
    servers = {k: Server(k, variant, lfhttpd_bin) for k in SERVERS}
    helpers, results = {}, {}
    try:
        for k, srv in list(servers.items()):
            try:
                srv.start()
            except ConfigRefused as e:
                if variant not in OPTIONAL_VARIANTS:
                    raise
                results[k] = {"refused": refusal_text(variant, e)}
                del servers[k]
                continue
            # Warm up, so lazily made state (buffers, thread stacks, caches) is in "before".
            subprocess.run(["ab", "-q", "-k", "-n", "2000", "-c", "20",
                            srv.url + "/index.html"], capture_output=True, timeout=60)
        time.sleep(0.2)
        before = {k: rss_kib(srv.pids()) for k, srv in servers.items()}
        for k, srv in servers.items():
            helpers[k] = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "idle_tls.py" if tls else "idle_conns.py"),
                 "127.0.0.1", str(srv.port), str(IDLE_CONNS), "/index.html"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        lines = {k: read_line(h, 300 if tls else 150) for k, h in helpers.items()}
        time.sleep(0.3)  # every connection has had its response: let the servers settle
        for k, srv in servers.items():
            results[k] = memory_result(lines[k], before[k], rss_kib(srv.pids()), srv.alive())
        return results
    finally:
        for h in helpers.values():  # let go of the connections, then stop the servers
            try:
                h.communicate("\n", timeout=30)
            except subprocess.TimeoutExpired:
                h.kill()
                h.wait()
        for srv in servers.values():
            srv.stop()  # notes a server that died or did not exit cleanly
            notices += srv.events


def memory_result(line, before, after, alive):
    """One server's figures from idle_conns.py's "open N failed F" and its RSS (KiB)."""
    m = re.match(r"open (\d+) failed (\d+)", line or "")
    if not m:
        return {"failed": "idle_conns.py: %r" % line}
    opened, failed = int(m.group(1)), int(m.group(2))
    died = 0 if alive else 1
    return {"requests": opened, "errors": failed + died, "socket_errors": failed + died,
            "non2xx": 0, "socket_detail": "server died" if died else "",
            "rss_before_kib": before, "rss_after_kib": after,
            "bytes_per_conn": (after - before) * 1024 / opened if opened else None}


def read_line(proc, timeout):
    """One line of proc's stdout within timeout seconds (None if not)."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if sel.select(timeout):
            return proc.stdout.readline()
    return None


def curl_headers(url, *headers):
    """Status line and headers of a GET, from curl (body discarded), plus body size."""
    # -k: the HTTPS workloads' certificate is self-signed (nothing to check on loopback).
    cmd = ["curl", "-s", "-k", "-o", "/dev/null", "-D", "-", "-w", "SIZE %{size_download}\n",
           "--max-time", "10"]
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(cmd + [url], capture_output=True, text=True).stdout
    status = re.match(r"HTTP/\S+ (\d+)", out)
    enc = re.search(r"^content-encoding:\s*(\S+)", out, re.M | re.I)
    size = re.search(r"^SIZE (\d+)", out, re.M)
    return (int(status.group(1)) if status else None, enc.group(1) if enc else "identity",
            int(size.group(1)) if size else None)


# --- document root ---------------------------------------------------------------------

DOCROOT_VERSION = "3"  # bump when the files change: they are made again


def make_docroot():
    """index.html (1 KiB), text.txt (100 KiB of compressible text) and text.txt.gz
    (gzip level 6, for nginx's gzip_static and h2o's file.send-compressed), big.bin
    (10 MiB of incompressible bytes), files/ (10,000 small files). Reused when already
    there; cold/ (the gzip cold workload's fresh files) is emptied."""
    stamp = os.path.join(DOCROOT, ".complete")
    shutil.rmtree(os.path.join(DOCROOT, "cold"), ignore_errors=True)
    if os.path.exists(stamp) and open(stamp).read() == DOCROOT_VERSION:
        return
    shutil.rmtree(DOCROOT, ignore_errors=True)
    os.makedirs(os.path.join(DOCROOT, "files"))
    head = "<!DOCTYPE html>\n<html><head><title>bench</title></head><body>\n<p>"
    tail = "</p>\n</body></html>\n"
    with open(os.path.join(DOCROOT, "index.html"), "w") as f:
        f.write(head + "x" * (1024 - len(head) - len(tail)) + tail)
    # Text from a small vocabulary in a pseudo-random order: compresses like prose
    # (about 4:1 at gzip level 1), not like one repeated line.
    words = ("the server leader follower thread event handle request response file "
             "connection socket buffer header body kernel epoll promote queue").split()
    seed, text, size = 1, [], 0
    while size < 100 * 1024:
        seed = (seed * 1103515245 + 12345) % 2 ** 31
        text.append(words[(seed >> 16) % len(words)] + ("\n" if seed % 13 == 0 else " "))
        size += len(text[-1])
    with open(os.path.join(DOCROOT, "text.txt"), "w") as f:
        f.write("".join(text)[:100 * 1024])
    with open(os.path.join(DOCROOT, "text.txt"), "rb") as f:
        packed = gzip.compress(f.read(), GZIP_LEVEL)
    with open(os.path.join(DOCROOT, "text.txt.gz"), "wb") as f:
        f.write(packed)
    with open(os.path.join(DOCROOT, "big.bin"), "wb") as f:
        f.write(os.urandom(10 * 1024 * 1024))
    for i in range(RANDOM_FILES):
        with open(os.path.join(DOCROOT, "files", "%05d.html" % i), "w") as f:
            f.write("<html><body>file %05d %s</body></html>\n" % (i, "y" * (200 + i % 800)))
    with open(stamp, "w") as f:
        f.write(DOCROOT_VERSION)


def make_upstream_docroot():
    """The proxied workloads' upstream document root: index.html (1 KiB), 100k.bin (100 KiB
    of incompressible bytes) and upstream.txt, which only the upstream has (the probe that
    shows a proxy's answer came from it). Made again every run: it is small."""
    shutil.rmtree(UPSTREAM_DOCROOT, ignore_errors=True)
    os.makedirs(UPSTREAM_DOCROOT)
    head = "<!DOCTYPE html>\n<html><head><title>upstream</title></head><body>\n<p>"
    tail = "</p>\n</body></html>\n"
    with open(os.path.join(UPSTREAM_DOCROOT, "index.html"), "w") as f:
        f.write(head + "u" * (1024 - len(head) - len(tail)) + tail)
    with open(os.path.join(UPSTREAM_DOCROOT, "100k.bin"), "wb") as f:
        f.write(os.urandom(100 * 1024))
    with open(os.path.join(UPSTREAM_DOCROOT, "upstream.txt"), "w") as f:
        f.write("the proxied workloads' upstream\n")


def make_php_docroot():
    """The PHP workload's document root: index.php alone, whose answer (PHP's version after
    "hello") is not its text, so the probe tells PHP's output from the file served as it
    is. Made again every run: it is small."""
    shutil.rmtree(PHP_DOCROOT, ignore_errors=True)
    os.makedirs(PHP_DOCROOT)
    os.makedirs(os.path.join(PHP_DOCROOT, "kept"))
    for name in ("index.php", os.path.join("kept", "index.php")):
        with open(os.path.join(PHP_DOCROOT, name), "w") as f:
            f.write('<?php echo "hello ", PHP_VERSION, "\\n";\n')


# --- figures and output ----------------------------------------------------------------

def median(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(results):
    """{(workload, server): medians over rounds}, plus error totals."""
    summary = {}
    for (wk, sv), rows in results.items():
        ok = [r for r in rows if "failed" not in r]
        s = {k: median(ok, k) for k in ("rps", "p50", "p99", "req_per_cpu_s", "mib_s",
                                         "cpu_s", "requests", "seconds", "rss_before_kib",
                                         "rss_after_kib", "bytes_per_conn",
                                         "upstream_req_per_cpu_s",
                                         "upstream_conns_per_kreq", "allocs_per_req")}
        for k in ("errors", "socket_errors", "non2xx"):
            s[k] = sum(r.get(k, 0) for r in ok)
        s["runs_with_errors"] = sum(1 for r in ok if r.get("errors"))
        s["runs"] = len(rows)
        s["failed_runs"] = len(rows) - len(ok)
        summary[(wk, sv)] = s
    return summary


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(v, kind):
    if v is None:
        return "-"
    if kind == "int":
        return "{:,.0f}".format(v)
    if kind == "ratio":
        return "%.2f" % v
    if kind == "ms":
        return "%.3g" % v if v < 100 else "%.0f" % v
    if kind == "mib":
        return "%.1f" % v
    return str(v)


def servers_of(wl):
    """The servers of a workload's rows, in order: the ceiling last, where it runs."""
    return SERVERS + (CEILING,) if wl.ceiling else SERVERS


def table_rows(summary, notes, skipped):
    """Rows of the results table (a list of lists of strings), workload by workload.
    "x ceiling": requests per CPU-second as a ratio to the ceiling's (1 KiB keep-alive)."""
    head = ["workload", "server", "req/s", "x nginx", "p50 ms", "p99 ms", "p99 x nginx",
            "req/CPU-s", "x nginx", "x ceiling", "errors", "notes"]
    rows = []
    for wl in WORKLOADS:
        if wl.tool == "mem":
            continue
        base = summary.get((wl.key, BASELINE))
        top = summary.get((wl.key, CEILING)) or {}
        for sv in servers_of(wl):
            note = notes.get((wl.key, sv), "")
            if (wl.key, sv) in skipped:
                rows.append([wl.label, sv, "skipped"] + [""] * (len(head) - 4) +
                            [skipped[(wl.key, sv)]])
                continue
            s = summary.get((wl.key, sv))
            if not s:
                continue
            errs = "0" if not s["errors"] else "%d (%d/%d runs) !" % (
                s["errors"], s["runs_with_errors"], s["runs"])
            if s["failed_runs"]:
                errs += " %d runs failed" % s["failed_runs"]
            b = base or {}
            rows.append([wl.label, sv, fmt(s["rps"], "int"),
                         fmt(ratio(s["rps"], b.get("rps")), "ratio"),
                         fmt(s["p50"], "ms"), fmt(s["p99"], "ms"),
                         fmt(ratio(s["p99"], b.get("p99")), "ratio"),
                         fmt(s["req_per_cpu_s"], "int"),
                         fmt(ratio(s["req_per_cpu_s"], b.get("req_per_cpu_s")), "ratio"),
                         fmt(ratio(s["req_per_cpu_s"], top.get("req_per_cpu_s")), "ratio")
                         if wl.ceiling else "", errs, note])
    return head, rows


# The issues' goals for lfhttpd, one condition a row: (what, workload, figure, reference,
# factor[, AT_MOST]). Reference: a server, "best peer" (the highest of nginx, lighttpd and
# h2o in the same round), the ceiling, or (workload, server): that server's figure in
# another workload (round i of each, in the rounds). lfhttpd's figure must be >= factor x
# the reference's; with AT_MOST (a figure where less is better, such as memory), <=.
AT_MOST = "at most"
# Reference ABSOLUTE: lfhttpd's own figure against the factor itself.
ABSOLUTE = "itself"
GOALS = [
    ("keep-alive 1 KiB c100: req/s >= 1.05x the best peer", "small_ka", "rps", "best peer",
     1.05),
    ("keep-alive 1 KiB c100: req/CPU-s >= 0.9x the ceiling", "small_ka", "req_per_cpu_s",
     CEILING, 0.9),
    ("keep-alive c1000: req/s >= the best peer", "c1000", "rps", "best peer", 1.0),
    ("Connection: close (wrk): req/s >= 1.1x nginx", "close_wrk", "rps", "nginx", 1.1),
    ("Connection: close (wrk): req/s >= the best peer", "close_wrk", "rps", "best peer", 1.0),
    ("Connection: close (ab): req/s >= 1.1x nginx", "close_ab", "rps", "nginx", 1.1),
    ("Connection: close (ab): req/s >= the best peer", "close_ab", "rps", "best peer", 1.0),
    ("10 MiB c10: req/s >= the best peer", "large", "rps", "best peer", 1.0),
    ("10 MiB c10, sndbuf=" + SNDBUF + ": req/s >= the best peer", "large_sndbuf", "rps",
     "best peer", 1.0),
    ("10 MiB c10, sendfile off: req/s >= the best peer", "large_copy", "rps", "best peer",
     1.0),
    ("pipelined x16: req/s >= 1.2x nginx", "pipelined", "rps", "nginx", 1.2),
    # Server and location blocks cost little: a request through a realistic site costs at
    # most 5% more CPU than through the one implicit server.
    ("sites: req/CPU-s within 5% of 1 KiB c100", "sites_ka", "req_per_cpu_s",
     ("small_ka", "lfhttpd"), 0.95),
    # The rewrite module costs little: map, set, if, rewrite ... last and a conditional
    # access log (rewrite.conf.in) at most 5% more CPU than the plain 1 KiB request.
    ("rewrite, if, map, log_format: req/CPU-s within 5% of 1 KiB c100", "rewrite_ka",
     "req_per_cpu_s", ("small_ka", "lfhttpd"), 0.95),
    # Metrics cost nothing per request beyond the counters that were there: with a
    # metrics mount scraped every second, within noise (5%) of the same load without.
    ("metrics scraped 1/s: req/CPU-s within 5% of 1 KiB c100", "metrics_ka",
     "req_per_cpu_s", ("small_ka", "lfhttpd"), 0.95),
    # limit_req costs little: a zone whose rate is never reached, at most 5% more CPU.
    ("limit_req (never reached): req/CPU-s within 5% of 1 KiB c100", "limit_req_ka",
     "req_per_cpu_s", ("small_ka", "lfhttpd"), 0.95),
    # Issue 15, the reverse proxy: the same upstream for both, its CPU not counted.
    ("proxied 1 KiB c100: req/s >= 1.2x nginx", "proxy_ka", "rps", "nginx", 1.2),
    ("proxied 1 KiB c100: fewer CPU-s per request than nginx (req/CPU-s > nginx)",
     "proxy_ka", "req_per_cpu_s", "nginx", 1.0),
    ("proxied 100 KiB c50: fewer CPU-s per request than nginx (req/CPU-s > nginx)",
     "proxy_100k", "req_per_cpu_s", "nginx", 1.0),
    # An HTTPS upstream: the same, with TLS 1.2 and 1.3 offered to it by both.
    ("proxied to https 1 KiB c100: fewer CPU-s per request than nginx (req/CPU-s > nginx)",
     "proxy_tls_ka", "req_per_cpu_s", "nginx", 1.0),
    # Issue 32, PHP through PHP-FPM: the same pool for every server, its CPU not counted.
    # The row is Debian's snippet: a connection to PHP-FPM per request (`php_ka`, the
    # connections kept, is measured beside it without a goal: see php.conf.in).
    ("PHP row: at least nginx's requests per second", "php", "rps", "nginx", 1.0),
    ("PHP row: fewer CPU-seconds per request in the server than nginx (req/CPU-s > nginx)",
     "php", "req_per_cpu_s", "nginx", 1.0),
    ("PHP row: 0 allocations per request in the server once warm (< 0.01; --alloc-lib)",
     "php", "allocs_per_req", ABSOLUTE, 0.01, AT_MOST),
    # Issue 16, HTTPS: lfhttpd and nginx with the same certificate and TLS settings.
    ("https keep-alive 1 KiB c100: req/s >= 1.1x nginx", "https_ka", "rps", "nginx", 1.1),
    ("https handshakes (wrk, Connection: close): req/s >= nginx", "https_hs", "rps",
     "nginx", 1.0),
    ("https handshakes (ab): req/s >= nginx", "https_hs_ab", "rps", "nginx", 1.0),
    # Lower is better: lfhttpd's bytes per idle TLS connection <= 1.0x nginx's.
    ("https idle: bytes per idle TLS connection <= nginx's", "https_idle",
     "bytes_per_conn", "nginx", 1.0, AT_MOST),
]


# --- the pinned mode (make bench PIN=1) ---------------------------------------------------
# Rounds on a 2-core machine move by 30% from one run to the next when servers and the load
# generator share every core. With --pin, every load workload gets a twin (KEY_pin) measured
# in the same rounds with the server's threads (all of them, every server alike) on one set
# of cores and the load generator and the proxies' upstream on the other; both are reported
# side by side, and a goal is judged met only when it holds in both.
PIN_SUFFIX = "_pin"


def pin_split():
    """(server CPUs, load CPUs): the first half of the CPUs this process may use, the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise RuntimeError("--pin needs at least 2 CPUs (this process may use %d)" % len(cpus))
    half = len(cpus) // 2
    return cpus[:half], cpus[half:]


def cpu_list(cpus):
    return ",".join(str(c) for c in cpus)


def pin_pids(pids, cpus):
    """Every thread of each process on cpus (taskset -a: threads made later inherit it)."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", cpu_list(cpus), str(pid)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def add_pinned_twins(workloads, goals):
    """The pinned twin of each load workload (wrk, ab) and of each goal on one."""
    twins = []
    for wl in workloads:
        twins.append(wl)
        if wl.tool not in ("wrk", "ab"):
            continue
        t = copy.copy(wl)
        t.key, t.pinned = wl.key + PIN_SUFFIX, True
        t.title, t.label = wl.title + " (pinned)", wl.label + ", pinned"
        t.plot_label = wl.plot_label + ", pinned"
        t.part_of = wl.part_of and wl.part_of + PIN_SUFFIX
        twins.append(t)
    keys = {w.key for w in twins}
    goals_out = []
    for g in goals:
        goals_out.append(g)
        what, wk, key, reference, factor, *rest = g
        if wk + PIN_SUFFIX not in keys:
            continue
        ref = (reference[0] + PIN_SUFFIX, reference[1]) if isinstance(reference, tuple) \
            else reference
        goals_out.append((what + " (pinned)", wk + PIN_SUFFIX, key, ref, factor, *rest))
    return twins, goals_out


def reference_name(reference):
    """How the goals table names a reference: a server, or "server, workload label"."""
    if not isinstance(reference, tuple):
        return reference
    wk, sv = reference
    return "%s, %s" % (sv, next((w.label for w in WORKLOADS if w.key == wk), wk))


def goal_figures(get, wk, reference):
    """{name: figures} for one goal: lfhttpd's in wk and the reference candidates', from
    get(workload, server) (medians or one round's; None when missing)."""
    figures = {"lfhttpd": get(wk, "lfhttpd")}
    if reference == ABSOLUTE:
        pass
    elif isinstance(reference, tuple):
        figures[reference_name(reference)] = get(*reference)
    else:
        for sv in PEERS if reference == "best peer" else (reference,):
            figures[sv] = get(wk, sv)
    return figures


def goal_reference(figures, reference, key):
    """(name, value) of the reference among figures ({name: dict of figures})."""
    names = PEERS if reference == "best peer" else (reference_name(reference),)
    found = [(figures[n][key], n) for n in names
             if figures.get(n) and figures[n].get(key) is not None]
    if not found:
        return None, None
    value, name = max(found)
    return name, value


def goal_ratio(figures, reference, key):
    """lfhttpd's figure over the reference's, and the reference's name (ABSOLUTE: the
    figure itself)."""
    own = (figures.get("lfhttpd") or {}).get(key)
    if reference == ABSOLUTE:
        return own, ABSOLUTE
    name, value = goal_reference(figures, reference, key)
    return ratio(own, value), name


def goal_rows(results, summary, skipped):
    """The goals table: each goal's median ratio and the rounds in which it held. A goal
    is met only when it holds in the medians and in at least all rounds but one (a
    single outlier neither makes nor breaks it); rounds are compared within themselves,
    lfhttpd's round i against the others' round i."""
    head = ["goal", "lfhttpd / reference (medians)", "rounds met", "status"]
    rows = []
    for what, wk, key, reference, factor, *at_most in GOALS:
        holds = (lambda x: x <= factor) if at_most == [AT_MOST] else (lambda x: x >= factor)
        medians = goal_figures(
            lambda w, sv: None if (w, sv) in skipped else summary.get((w, sv)),
            wk, reference)
        r, name = goal_ratio(medians, reference, key)
        if r is None:
            why = "lfhttpd skipped: " + skipped[(wk, "lfhttpd")] \
                if (wk, "lfhttpd") in skipped else \
                "not measured" if not results.get((wk, "lfhttpd")) else \
                "not counted (no --alloc-lib)" if reference == ABSOLUTE else \
                "no %s figure" % reference_name(reference)
            rows.append([what, "-", "-", why])
            continue
        runs = len(results[(wk, "lfhttpd")])
        met = 0
        for i in range(runs):
            def round_i(w, sv):
                rows_of = [] if (w, sv) in skipped else results.get((w, sv), ())
                return rows_of[i] if len(rows_of) > i and "failed" not in rows_of[i] \
                    else None
            ri, _ = goal_ratio(goal_figures(round_i, wk, reference), reference, key)
            met += ri is not None and holds(ri)
        ok = holds(r) and met >= runs - 1
        rows.append([what, "%.3f" % r if reference == ABSOLUTE else "%.2fx %s" % (r, name),
                     "%d/%d" % (met, runs),
                     "met" if ok else "not met"])
    return head, rows


def memory_rows(summary, key="memory", skipped=None):
    """The memory table of the memory workload key ("memory", or "https_idle")."""
    head = ["server", "RSS before (KiB)", "RSS with 10,000 idle (KiB)", "bytes/connection",
            "x nginx", "errors"]
    rows = []
    base = summary.get((key, BASELINE), {})
    for sv in SERVERS:
        s = summary.get((key, sv))
        if (key, sv) in (skipped or {}):
            rows.append([sv, "skipped", "", "", "", skipped[(key, sv)]])
            continue
        if not s:
            continue
        rows.append([sv, fmt(s["rss_before_kib"], "int"), fmt(s["rss_after_kib"], "int"),
                     fmt(s["bytes_per_conn"], "int"),
                     fmt(ratio(s["bytes_per_conn"], base.get("bytes_per_conn")), "ratio"),
                     str(s["errors"]) + (" !" if s["errors"] else "")])
    return head, rows


def text_table(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def md_table(head, rows):
    esc = lambda x: str(x).replace("|", "\\|")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(out + ["| " + " | ".join(esc(x) for x in r) + " |" for r in rows])


CSV_FIELDS = ["workload", "server", "round", "requests", "seconds", "rps", "p50_ms",
              "p99_ms", "mib_s", "socket_errors", "non2xx", "errors", "cpu_s",
              "req_per_cpu_s", "rss_before_kib", "rss_after_kib", "bytes_per_conn",
              "upstream_req_per_cpu_s", "upstream_conns_per_kreq", "allocs_per_req", "detail"]


def csv_value(v):
    return round(v, 4) if isinstance(v, float) else v


def write_csv(path, results, summary):
    """Every round's raw figures, then one "median" row per workload and server."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        for (wk, sv), rows in results.items():
            for i, r in enumerate(rows, 1):
                w.writerow([wk, sv, i] + [csv_value(r.get(k)) for k in (
                    "requests", "seconds", "rps", "p50", "p99", "mib_s", "socket_errors",
                    "non2xx", "errors", "cpu_s", "req_per_cpu_s", "rss_before_kib",
                    "rss_after_kib", "bytes_per_conn", "upstream_req_per_cpu_s",
                    "upstream_conns_per_kreq", "allocs_per_req")] +
                    [r.get("failed") or r.get("socket_detail", "")])
        for (wk, sv), s in summary.items():
            w.writerow([wk, sv, "median"] + [csv_value(s.get(k)) for k in (
                "requests", "seconds", "rps", "p50", "p99", "mib_s", "socket_errors",
                "non2xx", "errors", "cpu_s", "req_per_cpu_s", "rss_before_kib",
                "rss_after_kib", "bytes_per_conn", "upstream_req_per_cpu_s",
                "upstream_conns_per_kreq", "allocs_per_req")] +
                ["errors: total over the rounds"])


PLOT_SERVERS = SERVERS + (CEILING,)
PLOT_CAP = 4.0  # the ratio axis stops here; a workload with a bar above says so in its label


def write_plot(summary, skipped):
    """bench.png from a data file and bench.gp: per workload, each server's requests/s
    and requests per CPU-second as ratios to nginx's in the same run (nginx = 1.0). A
    linear ratio axis up to PLOT_CAP at most: a ratio far above it (gzip, the ceiling
    pipelined) is written under the panel's title instead of squashing every other bar.
    Skipped or missing: NaN."""
    dat = os.path.join(OUT, "plot.dat")
    keys = ("rps", "req_per_cpu_s")
    table = []
    for wl in WORKLOADS:
        base = summary.get((wl.key, BASELINE)) or {}
        if wl.tool == "mem" or not base.get("rps"):
            continue
        vals = {}
        for key in keys:
            for sv in PLOT_SERVERS:
                s = summary.get((wl.key, sv))
                ok = s and (wl.key, sv) not in skipped
                vals[(key, sv)] = ratio(s[key], base.get(key)) if ok else None
        table.append((wl, vals))
    if not table:
        log("no ratios to nginx: no plot")
        return None
    top = max([v for _, vals in table for v in vals.values() if v is not None] + [1.0])
    ymax = min(PLOT_CAP, max(1.5, top * 1.1))
    off_scale = {k: "; ".join("%s: %s %.1fx" % (wl.plot_label, sv, vals[(k, sv)])
                               for wl, vals in table for sv in PLOT_SERVERS
                               if (vals[(k, sv)] or 0) > ymax) for k in keys}
    with open(dat, "w") as f:
        f.write("# workload " + " ".join("%s_x_nginx_%s" % (k, sv) for k in keys
                                         for sv in PLOT_SERVERS) + "\n")
        for wl, vals in table:
            f.write('"%s" %s\n' % (wl.plot_label, " ".join(
                "NaN" if vals[(k, sv)] is None else "%.4f" % vals[(k, sv)]
                for k in keys for sv in PLOT_SERVERS)))
    png = os.path.join(OUT, "bench.png")
    subtitle = "ratio to nginx in the same run, median over rounds; 2 cores shared with the " \
               "load generator"
    off = {k: "\\n(off the scale: %s)" % v if v else "" for k, v in off_scale.items()}
    p = subprocess.run(["gnuplot", "-e", "datafile='%s'; outfile='%s'; subtitle='%s'; "
                        "ymax=%g; off_rps=\"%s\"; off_cpu=\"%s\"" % (
                            dat, png, subtitle, ymax, off["rps"], off["req_per_cpu_s"]),
                        os.path.join(HERE, "bench.gp")], capture_output=True, text=True)
    if p.returncode != 0:
        log("gnuplot failed: " + p.stderr.strip())
    return png


def machine_info():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
            model = m.group(1).strip() if m else model
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "kernel": os.uname().release}


def versions(lfhttpd_bin):
    """Short version strings of the servers and load generators."""
    def version(cmd, pattern):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return "?"
        m = re.search(pattern, p.stdout + p.stderr)
        return m.group(0) if m else "?"
    commit = version(["git", "-C", ROOT, "describe", "--always", "--dirty"], r"\S+")
    return {"lfhttpd": version([lfhttpd_bin, "-V"], r"lfhttpd \S+") + " (git %s)" % commit,
            "nginx": version(["nginx", "-v"], r"nginx/\S+"),
            "lighttpd": version(["lighttpd", "-v"], r"lighttpd/\S+"),
            "h2o": version(["h2o", "-v"], r"h2o version \S+").replace(" version ", "/"),
            "wrk": version(["wrk", "-v"], r"wrk \S+"),
            "ab": version(["ab", "-V"], r"ApacheBench, Version \S+")}


def write_markdown(path, opts, workloads, tables, machine, vers, notices):
    """results.md: the tables ready for docs/internals/benchmarks.md, with date, machine and commands."""
    (head, rows), (ghead, grows), (mhead, mrows), (thead, trows) = tables
    cmds = []
    for wl in workloads:
        if wl.tool == "mem" and wl.variant == "memtls":
            cmds.append("- %s: `tests/bench/idle_tls.py 127.0.0.1 PORT %d /index.html` "
                        "(a TLS handshake and one request on each connection) on a freshly "
                        "started server listening with TLS, as in the other https rows "
                        "(after `ab -k -n 2000 -c 20` over https); VmRSS summed over the "
                        "server's processes before and with the connections open"
                        % (wl.label, IDLE_CONNS))
        elif wl.tool == "mem":
            cmds.append("- %s: `tests/bench/idle_conns.py 127.0.0.1 PORT %d /index.html` "
                        "on a freshly started server (after `ab -k -n 2000 -c 20`); VmRSS "
                        "summed over the server's processes before and with the "
                        "connections open" % (wl.label, IDLE_CONNS))
        elif wl.tool == "cold":
            cmds.append("- %s: bench.py's own client: %d fresh 100 KiB texts per server "
                        "and round, made before the run under `/cold/`, each asked for "
                        "once with `Accept-Encoding: gzip` over %d keep-alive connections; "
                        "req/s = files / wall time, a response not gzip-encoded is an "
                        "error" % (wl.label, COLD_FILES, COLD_CONNS))
        else:
            c = wl.command("%s://127.0.0.1:PORT" % ("https" if wl.variant == "tls"
                                                     else "http"),
                           opts.duration, opts.ab_requests)
            c = [x.replace(HERE, "tests/bench") for x in c]
            cmds.append("- %s: `%s`%s" % (wl.label, " ".join(
                "'%s'" % x if " " in x else x for x in c),
                " (servers started with their access log on)" if wl.variant == "log" else
                " (lfhttpd started with open_file_cache_mem_max 0)" if wl.variant == "nomem"
                else " (lfhttpd started with `handler /metrics metrics;`, /metrics fetched "
                "every second on a keep-alive connection during the run)"
                if wl.variant == "metrics"
                else " (lfhttpd and nginx with a limit_req zone of rate 10000000r/s on "
                "every request)" if wl.variant == "limit"
                else " (lfhttpd and nginx started with sendfile off)" if wl.variant == "copy"
                else " (lfhttpd and nginx listening with sndbuf=%s)" % SNDBUF
                if wl.variant == "sndbuf"
                else " (lfhttpd and nginx serving the server and location blocks of "
                "tests/bench/sites.conf.in)" if wl.variant == "sites"
                else " (lfhttpd and nginx serving the maps, log format and server block "
                "of tests/bench/rewrite.conf.in)" if wl.variant == "rewrite"
                else " (lfhttpd and nginx proxying to one upstream, an lfhttpd serving "
                "from memory, through tests/bench/proxy.conf.in; the upstream's CPU is "
                "not counted)" if wl.variant == "proxy"
                else " (lfhttpd and nginx proxying through tests/bench/proxy.conf.in to "
                "one upstream listening with TLS, an lfhttpd with the settings of "
                "tests/bench/tls.conf.in; the upstream's CPU is not counted)"
                if wl.variant == "proxytls"
                else " (every server passing to one PHP-FPM pool, %d workers, pm static, "
                "on a unix socket: lfhttpd and nginx through tests/bench/php.conf.in, "
                "lighttpd and h2o with the same in their terms; PHP-FPM's CPU is not "
                "counted)" % PHP_CHILDREN if wl.variant == "php"
                else " (every server listening with TLS: lfhttpd and nginx with the "
                "settings of tests/bench/tls.conf.in, lighttpd and h2o with the same in "
                "their terms)" if wl.variant == "tls" else ""))
    text = [
        "## Benchmark: lfhttpd, nginx, lighttpd and h2o",
        "",
        "Measured %s with `make bench%s` (%d rounds of %d s per workload, the servers "
        "interleaved in each round, round i starting with server i mod n; the figures "
        "are medians over the rounds, the ratios are to nginx in the same run)." % (
            datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            " QUICK=1" if opts.quick else "", opts.rounds, opts.duration) + (
            " QUICK=1 gives the variant workloads (access log on, /hello, "
            "open_file_cache_mem_max 0, sendfile off, sites, proxied, PHP) one round."
            if opts.quick else ""),
        "",
        "Machine: %d cores (`nproc`), %s, Linux %s. The load generator (wrk or ab, one "
        "thread) runs on the same cores and takes about one of them; the machine is shared "
        "and noisy, so requests per server CPU-second is the steadiest figure." % (
            machine["nproc"], machine["cpu"], machine["kernel"]) + (
            " Rows marked \"pinned\" (`make bench PIN=1`) are the same workloads in the "
            "same rounds with every server's threads on CPU %s and the load generator (and "
            "a proxy's upstream) on CPU %s (`taskset`); a goal counts as met only when it "
            "holds both free-running and pinned." % machine["pinned"]
            if machine.get("pinned") else ""),
        "",
        "Servers: %s (%d threads); %s (%d workers); %s (single process, event loop); "
        "%s (%d threads). Load: %s; %s. Configurations: `tests/bench/*.conf.in`; the "
        "same socket options for all (TCP_DEFER_ACCEPT; a SO_REUSEPORT listener per thread "
        "group for lfhttpd and per worker for nginx, one shared listener for h2o, which has "
        "no such option), gzip level 6 for all. The ceiling (`tests/bench/ceiling.c`, %d "
        "threads, each with its own SO_REUSEPORT listener and level-triggered epoll set) "
        "answers every request with a canned 1 KiB response and runs in the 1 KiB "
        "keep-alive workloads only; `x ceiling` is requests per CPU-second as a ratio to "
        "its." % (
            vers["lfhttpd"], THREADS, vers["nginx"], THREADS, vers["lighttpd"],
            vers["h2o"], THREADS, vers["wrk"], vers["ab"], THREADS),
        "",
        md_table(head, rows),
        "",
        "Goals for lfhttpd (issues 13, 14, 15, 16 and 32). A goal is met only when it holds "
        "in the medians "
        "and in every round but one at most, each round compared within itself (the "
        "best peer is the fastest of nginx, lighttpd and h2o in that round):",
        "",
        md_table(ghead, grows),
        "",
    ]
    if mrows:
        text += ["Memory with %d idle keep-alive connections (resident set summed over the "
                 "server's processes, a fresh server per round, median over rounds):"
                 % IDLE_CONNS, "", md_table(mhead, mrows), ""]
    if trows:
        text += ["Memory with %d idle TLS keep-alive connections, one request each (the "
                 "servers listening with TLS as in the https rows; resident set summed over "
                 "the server's processes, a fresh server per round, median over rounds):"
                 % IDLE_CONNS, "", md_table(thead, trows), ""]
    if notices:
        # A notice may end with a server's log lines: keep them inside the list item.
        text += ["Notes:", ""] + ["- " + n.replace("\n", "\n    ") for n in notices] + [""]
    text += ["Commands (PORT is the server's port; wrk runs with `-t1`, one thread):", ""]
    text += cmds + [""]
    with open(path, "w") as f:
        f.write("\n".join(text))


# --- the run -----------------------------------------------------------------------------

def raise_fd_limit():
    """wrk -c1000 and 10,000 idle connections need descriptors; the servers inherit
    the limit (nginx and lighttpd are told it; h2o raises its own). Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_WANTED, max(hard, FD_WANTED)))
        return FD_WANTED
    except (ValueError, OSError):
        # Raising the hard limit needs CAP_SYS_RESOURCE; containers often lack it.
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        if hard < IDLE_CONNS + 1000:  # the client and each server: one per connection
            log("note: descriptor limit %d (raising it needs CAP_SYS_RESOURCE): too low for "
                "%d idle connections" % (hard, IDLE_CONNS))
        return hard


def refusal_text(variant, e):
    """Why an optional variant's rows are skipped, from lfhttpd -t's refusal e."""
    errors = [re.sub(r"^\S*/", "", ln.split(": ", 1)[-1].strip())
              for ln in str(e).splitlines()[1:]
              if re.match(r"\S*lfhttpd: .*\.conf:\d+: ", ln)]
    return "lfhttpd -t refuses the %s configuration (%s): its rows are skipped" % (
        variant, "; ".join(errors[:2]) or "see its -t output")


def check_workload(wl, servers):
    """Skip reasons for servers that cannot run wl: (workload, server) -> reason."""
    skipped = {}
    if wl.check:
        for sv, srv in servers.items():
            status, _, _ = curl_headers(srv.url + wl.path)
            if status != 200:
                skipped[(wl.key, sv)] = "%s answers %s: no handler yet" % (wl.path, status)
    for sv, srv in servers.items():
        wrong = []
        if wl.probes and isinstance(getattr(srv, "upstream", None), PhpFpm):
            try:  # a fresh pool, as for a run: the other server's kept connections hold
                srv.upstream.restart()  # its workers until their keepalive_timeout
            except RuntimeError as e:
                skipped[(wl.key, sv)] = "PHP-FPM did not start again: %s" % last_line(str(e))
                continue
        for path, want, *body in wl.probes:
            if body:  # the answer's body must match too (plain http only)
                got, text = get_body(srv.port, path)
                if got == want and not re.search(body[0], text):
                    wrong.append("%s answers %r, not what %s matches" % (
                        path, text[:60], body[0]))
                    continue
            else:
                got = curl_headers(srv.url + path)[0]
            if got != want:
                wrong.append("%s answers %s, not %d" % (path, got, want))
        if wrong and (wl.key, sv) not in skipped:
            skipped[(wl.key, sv)] = "not the configuration meant: " + "; ".join(wrong)
    return skipped


def get_body(port, path):
    """(status, body text) of a GET over plain http, or (None, "") when it fails."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return None, ""


def describe(r, wl):
    """One line about one run, for the progress output."""
    if "failed" in r:
        return "FAILED: " + r["failed"]
    if "bytes_per_conn" in r:
        return "RSS %s -> %s KiB, %s B/conn, %d errors" % (
            fmt(r["rss_before_kib"], "int"), fmt(r["rss_after_kib"], "int"),
            fmt(r["bytes_per_conn"], "int"), r["errors"])
    extra = ", %.0f MiB/s" % r["mib_s"] if wl.key.startswith("large") and r.get("mib_s") else ""
    err = ", %d errors (%s, non-2xx %d)" % (r["errors"], r["socket_detail"], r["non2xx"]) \
        if r["errors"] else ""
    return "%s req/s, p50 %s ms, p99 %s ms, %s req/CPU-s%s%s" % (
        fmt(r["rps"], "int"), fmt(r["p50"], "ms"), fmt(r["p99"], "ms"),
        fmt(r["req_per_cpu_s"], "int"), extra, err)


class Bench:
    """One `make bench`: the server instances, and what the runs found."""

    def __init__(self, opts):
        self.opts = opts
        self.workloads = [w for w in WORKLOADS if not opts.only or w.key in opts.only]
        self.instances = {}  # (variant, kind) -> Server
        self.results = {}    # (workload, server) -> [one dict per round]
        self.notes = {}      # (workload, server) -> text for the table
        self.skipped = {}    # (workload, server) -> why
        self.notices = []    # crashes and other surprises
        self.refused = {}    # (variant, kind) -> why lfhttpd -t refused its configuration
        # The proxied workloads' upstreams (lfhttpd instances, not measured), by variant.
        self.upstreams = {}
        self.php_fpm = None  # the "php" variant's PHP-FPM pool (not measured as a server's)
        self.t0 = time.monotonic()

    def say(self, msg):
        log("[%4.0fs] %s" % (time.monotonic() - self.t0, msg))

    def start_servers(self):
        """The long-lived instances: "main" (access log off), "log" (on) and "nomem"
        (lfhttpd only), if used."""
        variants = {w.variant for w in self.workloads} - {"mem", "memtls"}
        if variants & set(OWN_INSTANCES):
            variants.add("main")  # the other servers of those variants
        starts = [(v, k) for v in sorted(variants) for k in OWN_INSTANCES.get(v, SERVERS)]
        if any(w.ceiling for w in self.workloads) and self.ceiling_missing() is None:
            starts.append(("main", CEILING))
        for variant in PROXY_VARIANTS:  # first: the proxies' configurations name its port
            if variant in variants:
                starts.insert(0, (PROXY_VARIANTS[variant], "lfhttpd"))
        if "php" in variants and not self.start_php_fpm():
            starts = [(v, k) for v, k in starts if v != "php"]
        for variant, kind in starts:
            srv = Server(kind, variant, self.opts.ceiling if kind == CEILING else self.opts.bin,
                         upstream=self.php_fpm if variant == "php" else
                         self.upstreams.get(PROXY_VARIANTS.get(variant)))
            try:
                srv.start()
            except ConfigRefused as e:
                if variant not in OPTIONAL_VARIANTS:
                    raise
                # This lfhttpd does not do it yet: its rows are skipped, the rest runs.
                self.refused[(variant, kind)] = refusal_text(variant, e)
                self.say("NOT started %s (%s): %s" % (kind, variant,
                                                      self.refused[(variant, kind)]))
                continue
            self.instances[(variant, kind)] = srv
            if variant in PROXY_VARIANTS.values():
                self.upstreams[variant] = srv
            self.say("started %-8s (%s) on 127.0.0.1:%d, pid %d" % (
                kind, variant, srv.port, srv.proc.pid))

    def start_php_fpm(self):
        """The "php" variant's PHP-FPM pool, before the servers that pass to it. Without
        PHP-FPM, or when it does not start, the PHP rows are skipped with the reason and
        everything else runs. Returns whether it runs."""
        binary = find_php_fpm()
        why = None
        if not binary:
            why = "no PHP-FPM (%s not found; Debian: apt-get install %s): skipped" % (
                " or ".join(PHP_FPM_NAMES), PHP_FPM_PACKAGE)
        elif len(php_socket()) > 107:  # sun_path: 108 bytes with the terminating NUL
            why = "the PHP-FPM socket's path is too long for a unix socket (%s): skipped" \
                % php_socket()
        else:
            fpm = PhpFpm(binary)
            try:
                fpm.start()
                self.php_fpm = fpm
                self.say("started php-fpm  (php) on unix:%s, pid %d, %d workers" % (
                    fpm.socket, fpm.proc.pid, len(fpm.pids()) - 1))
                return True
            except RuntimeError as e:
                fpm.stop(check_exit=False)
                why = "PHP-FPM did not start: %s" % last_line(str(e))
        for kind in OWN_INSTANCES["php"]:
            self.refused[("php", kind)] = why
        self.say("NOT started the PHP rows' servers: " + why)
        return False

    def ceiling_missing(self):
        """Why the ceiling cannot run (None if it can)."""
        if not os.access(self.opts.ceiling, os.X_OK):
            return "%s is not built (make bench builds it)" % os.path.relpath(
                self.opts.ceiling, ROOT)
        return None

    def instance(self, variant, kind):
        """The server instance that runs kind's part of a workload of this variant."""
        return self.instances.get((variant, kind)) or self.instances[("main", kind)]

    def refusal(self, wl, kind):
        """Why kind cannot run wl because it refused the variant's configuration, or None."""
        return self.refused.get((wl.variant, kind))

    def check_tls(self):
        """The HTTPS rows' notes: what a default OpenSSL client (as wrk and ab) negotiates
        with each server, and how lfhttpd sends file bodies over TLS (its start-up line)."""
        for kind in SERVERS:
            srv = self.instances.get(("tls", kind))
            if not srv:
                continue
            found = tls_parameters(srv.port)
            for wl in self.workloads:
                if wl.variant == "tls":
                    self.notes[(wl.key, kind)] = found or "openssl s_client could not connect"
        srv = self.instances.get(("tls", "lfhttpd"))
        path = re.search(r"^.*kernel TLS.*$", srv.read_error_log(), re.M) if srv else None
        if path:
            note = self.notes.get(("https_10m", "lfhttpd"))
            line = re.sub(r"^.*?(TLS: |kernel TLS)", r"\1", path.group(0)).strip()
            self.notes[("https_10m", "lfhttpd")] = "; ".join(([note] if note else []) + [line])

    def check_gzip(self):
        """What each server really sends for the gzip workload (curl, once). This first
        request is also the one that fills lfhttpd's and lighttpd's compressed copies:
        the "gzip" rows measure serving them, "gzip cold" the compressing."""
        for kind in SERVERS:
            srv = self.instances.get(("main", kind))
            if srv:
                status, enc, size = curl_headers(srv.url + "/text.txt", "Accept-Encoding: gzip")
                self.notes[("gzip", kind)] = "sent %s, %s bytes (status %s); %s" % (
                    enc, fmt(size, "int"), status, GZIP_HOW[kind] if enc == "gzip" else
                    "not compressed")
        for kind, how in HELLO_HOW.items():
            self.notes.setdefault(("hello", kind), how)
        self.notes[("small_ka", "lfhttpd")] = ("1 KiB body from memory: head and body in "
                                               "one sendmsg (open_file_cache_mem_max 4k)")
        self.notes[("small_ka", "nginx")] = "head with writev, body with sendfile"
        self.notes[("small_ka", "h2o")] = "head and body (pread) with writev"
        self.notes[("small_nomem", "lfhttpd")] = ("open_file_cache_mem_max 0: head with "
                                                  "sendmsg (MSG_MORE), body with sendfile")
        self.notes[("small_nomem", "nginx")] = "the 1 KiB c100 instance, measured again"
        self.notes[("metrics_ka", "lfhttpd")] = ("handler /metrics metrics; /metrics "
                                                 "fetched every second during the run")
        self.notes[("metrics_ka", "nginx")] = "the 1 KiB c100 instance, measured again"
        for kind in ("lfhttpd", "nginx"):
            self.notes[("sites_ka", kind)] = ("the default of 2 servers, location / of 12 "
                                              "(3 regexes): try_files $uri $uri/ =404")
        for key in ("proxy_ka", "proxy_100k"):
            self.notes[(key, "lfhttpd")] = ("proxy_pass, keepalive 32, proxy_http_version 1.1, "
                                            "Connection \"\" (proxy_buffering on)")
            self.notes[(key, "nginx")] = ("proxy_pass, keepalive 32, proxy_http_version 1.1, "
                                          "Connection \"\" (proxy_buffering on)")
        self.notes[("large", "lfhttpd")] = "sendfile, as much as the socket takes an event"
        self.notes[("large", "nginx")] = "sendfile on, tcp_nopush"
        self.notes[("large", "lighttpd")] = "sendfile, 256 KiB a call, one process"
        self.notes[("large", "h2o")] = "pread into a buffer, writev"
        self.notes[("large_copy", "lfhttpd")] = ("sendfile off: 64 KiB pread into the "
                                                 "thread's buffer, then sendmsg")
        self.notes[("large_copy", "nginx")] = "sendfile off: output_buffers, read and writev"
        for kind in ("lighttpd", "h2o"):
            self.notes[("large_copy", kind)] = "the 10 MiB c10 instance, measured again"
            self.notes[("large_sndbuf", kind)] = "the 10 MiB c10 instance, measured again"
        for kind in ("lfhttpd", "nginx"):
            self.notes[("large_sndbuf", kind)] = "sendfile, listen ... sndbuf=" + SNDBUF
        for wl in WORKLOADS:
            if wl.ceiling:
                self.notes[(wl.key, CEILING)] = ("canned 1 KiB response, nothing parsed but "
                                                 "the head's end, nothing shared between "
                                                 "threads (tests/bench/ceiling.c)")

    def record(self, wl, kind, r, rnd, rounds):
        self.results.setdefault((wl.key, kind), []).append(r)
        self.say("round %d/%d %-8s %s" % (rnd + 1, rounds, kind, describe(r, wl)))

    def rounds(self, wl):
        return 1 if self.opts.quick and wl.variant_of else self.opts.rounds

    def run_load_workload(self, wl):
        """Warm-up, then rounds: each server once per round, in turn, round i starting
        with server i mod n (A B C D, B C D A, ...)."""
        skip = {(wl.key, sv): why for sv, why in wl.skip.items()}
        kinds = SERVERS + (CEILING,) if wl.ceiling else SERVERS
        for kind in kinds:
            if self.refusal(wl, kind) and (wl.key, kind) not in skip:
                skip[(wl.key, kind)] = self.refusal(wl, kind)
        if wl.ceiling and self.ceiling_missing():
            skip[(wl.key, CEILING)] = self.ceiling_missing()
        servers = {k: self.instance(wl.variant, k) for k in kinds
                   if (wl.key, k) not in skip}
        skip.update(check_workload(wl, servers))
        self.skipped.update(skip)
        for (_, kind), why in skip.items():
            self.say("skipping %s: %s" % (kind, why))
        active = [k for k in kinds if (wl.key, k) not in skip]
        if self.opts.quick and "lfhttpd" not in active:
            # A smoke run has no time for figures that compare nothing to lfhttpd.
            self.say("QUICK: skipping the workload for all servers")
            for kind in active:
                self.skipped[(wl.key, kind)] = "QUICK=1: lfhttpd cannot run it"
            return
        if not active:
            return
        if self.opts.warmup and wl.tool != "cold":  # cold: warm-up would warm the cache
            for kind in active:
                if servers[kind].ensure_running(wl.key + " warm-up"):
                    run_load(servers[kind], wl, self.opts, record=False)
        rounds = self.rounds(wl)
        for rnd in range(rounds):
            first = rnd % len(active)
            for kind in active[first:] + active[:first]:
                srv = servers[kind]
                where = "%s round %d" % (wl.key, rnd + 1)
                if srv.upstream and not srv.upstream.alive() and \
                        not isinstance(srv.upstream, PhpFpm):  # that one: every run anew
                    # Not restarted: on a new port, the proxies' configurations would be
                    # wrong. Its end is noted when it is stopped.
                    r = {"failed": "the upstream is down"}
                elif not srv.ensure_running(where):
                    r = {"failed": "%s is down" % kind}
                else:
                    r = (run_cold(srv, "%s-%s-r%d" % (kind, srv.variant, rnd + 1))
                         if wl.tool == "cold" else run_load(srv, wl, self.opts))
                    if "failed" not in r and not srv.alive():
                        r["socket_detail"] += "; the server died during the run"
                        r["errors"] += 1
                self.record(wl, kind, r, rnd, rounds)

    def run_memory_workload(self, wl):
        for rnd in range(self.opts.mem_rounds):
            found = run_memory(self.opts.bin, self.notices, wl.variant)
            for kind, r in found.items():
                if "refused" in r:  # this lfhttpd has no TLS yet: no round will differ
                    self.skipped[(wl.key, kind)] = r["refused"]
                    self.say("skipping %s: %s" % (kind, r["refused"]))
                elif (wl.key, kind) not in self.skipped:
                    self.record(wl, kind, r, rnd, self.opts.mem_rounds)

    def run_all(self):
        """Every workload; the servers are stopped whatever happens."""
        try:
            self.start_servers()
            self.check_gzip()
            self.check_tls()
            for wl in self.workloads:
                log("\n-- %s: %s%s" % (wl.key, wl.title, " (QUICK=1: one round)"
                                        if wl.tool != "mem" and self.rounds(wl) == 1
                                        and self.opts.quick else ""))
                if wl.tool == "mem":
                    self.run_memory_workload(wl)
                else:
                    self.run_load_workload(wl)
        finally:
            for srv in self.instances.values():
                srv.stop()
            if self.php_fpm:  # after the servers that pass to it
                self.php_fpm.stop()
                self.notices += self.php_fpm.events
            for srv in self.instances.values():
                self.notices += srv.events
        self.elapsed = time.monotonic() - self.t0

    def check_access_logs(self):
        """Did the "access log on" servers log every request? (Then drop the big files.)"""
        for kind in SERVERS:
            srv = self.instances.get(("log", kind))
            rows = self.results.get(("access_log", kind))
            if not (srv and rows):
                continue
            lines = count_lines(srv.access_log)
            done = sum(r.get("requests", 0) for r in rows if "failed" not in r)
            self.notes[("access_log", kind)] = "%s log lines for %s requests measured%s" % (
                fmt(lines, "int"), fmt(done, "int"), " + warm-up" if self.opts.warmup else "")
            try:
                os.remove(srv.access_log)  # hundreds of MB after a full run
            except OSError:
                pass

    def note_proxies(self, summary):
        """The proxied rows' notes: the upstream's requests per CPU-second in each proxy's
        runs (the same program for both; not in the proxy's figures), and how often nginx
        buffered a response to a temporary file (its error log's warnings)."""
        spooled = {}
        for variant in PROXY_VARIANTS:
            srv = self.instances.get((variant, "nginx"))
            spooled[variant] = srv.read_error_log().count(
                "buffered to a temporary file") if srv else 0
        for wl in self.workloads:
            if wl.variant == "php":
                self.note_php(wl, summary)
            if wl.variant not in PROXY_VARIANTS:
                continue
            for kind in OWN_INSTANCES[wl.variant]:
                s = summary.get((wl.key, kind))
                if not s or (wl.key, kind) in self.skipped:
                    continue
                extra = ["upstream %s req/CPU-s" % fmt(s.get("upstream_req_per_cpu_s"), "int")]
                # Counted by TIME_WAIT: a TLS connection closed with a record unread (a
                # ticket, a close_notify) is reset and leaves none, so not over TLS.
                if wl.variant == "proxy":
                    extra.append("about %s upstream connections closed per 1000 requests "
                                 "(not kept by the pool)"
                                 % fmt(s.get("upstream_conns_per_kreq"), "int"))
                if kind == "nginx" and spooled[wl.variant]:
                    extra.append("%d responses buffered to a temporary file (all proxied "
                                 "runs of this upstream)" % spooled[wl.variant])
                note = self.notes.get((wl.key, kind))
                self.notes[(wl.key, kind)] = "; ".join(([note] if note else []) + extra)

    def note_php(self, wl, summary):
        """The PHP rows' notes: how each server passes to the pool, and PHP-FPM's requests
        per CPU-second in that server's runs (the same pool for all; not in the server's
        figures)."""
        for kind in OWN_INSTANCES["php"]:
            s = summary.get((wl.key, kind))
            if not s or (wl.key, kind) in self.skipped:
                continue
            passing = ("keepalive %d, fastcgi_keep_conn on" % PHP_KEEPALIVE
                       if wl.path.startswith("/kept/") else "a connection per request")
            allocs = s.get("allocs_per_req")
            self.notes[(wl.key, kind)] = (
                "%s to the shared pool (%d workers, pm static), %s; PHP-FPM %s "
                "req/CPU-s%s" % (PHP_HOW[kind], PHP_CHILDREN, passing,
                                 fmt(s.get("upstream_req_per_cpu_s"), "int"),
                                 "" if allocs is None else
                                 "; %.3f allocations/req" % allocs))

    def report(self, machine, vers):
        """The table on stdout, results.csv, results.md and bench.png."""
        self.check_access_logs()
        summary = summarize(self.results)
        for kind in SERVERS:
            for key in ("large", "large_copy", "large_sndbuf", "https_10m"):
                s = summary.get((key, kind))
                if s and s["mib_s"]:
                    note = self.notes.get((key, kind))
                    self.notes[(key, kind)] = ("%s; " % note if note else "") + (
                        "%.0f MiB/s" % s["mib_s"])
        self.note_proxies(summary)
        head, rows = table_rows(summary, self.notes, self.skipped)
        ghead, grows = goal_rows(self.results, summary, self.skipped)
        mhead, mrows = memory_rows(summary)
        thead, trows = memory_rows(summary, "https_idle", self.skipped)
        log("\n== Results: medians over rounds; x nginx = ratio to nginx's median in this "
            "run; p99 from wrk's latency distribution (ab's: whole ms)")
        log("Machine: %d cores shared with the load generator, noisy; requests per server "
            "CPU-second is the steadiest figure.\n" % machine["nproc"])
        log(text_table(head, rows))
        log("\nGoals (lfhttpd; met = in the medians and in all rounds but one at most):\n")
        log(text_table(ghead, grows))
        if mrows:
            log("\nMemory: %d idle keep-alive connections (a fresh server per round; VmRSS "
                "summed over its processes; kernel socket memory not included)\n" % IDLE_CONNS)
            log(text_table(mhead, mrows))
        if trows:
            log("\nMemory over TLS: %d idle TLS keep-alive connections, one request each "
                "(a fresh server per round; VmRSS summed over its processes)\n" % IDLE_CONNS)
            log(text_table(thead, trows))
        if self.notices:
            log("\nNotes:")
            for n in self.notices:
                log("  - " + n)
        csv_path = os.path.join(OUT, "results.csv")
        md_path = os.path.join(OUT, "results.md")
        write_csv(csv_path, self.results, summary)
        write_markdown(md_path, self.opts, self.workloads,
                       ((head, rows), (ghead, grows), (mhead, mrows), (thead, trows)),
                       machine, vers,
                       self.notices)
        png = write_plot(summary, self.skipped)
        log("\nWrote %s (benchmark %.0f s)" % (", ".join(
            os.path.relpath(p, ROOT) for p in (csv_path, md_path, png) if p), self.elapsed))


def run(opts):
    global FD_LIMIT
    FD_LIMIT = raise_fd_limit()
    machine = machine_info()
    log("== make bench%s: lfhttpd vs nginx vs lighttpd vs h2o" % (" QUICK=1" if opts.quick else ""))
    log("Machine: %d cores (%s), Linux %s. The load generator shares these cores and takes"
        " about one of them; the machine is noisy. Compare medians and ratios to nginx;"
        " requests per server CPU-second is the steadiest figure." % (
            machine["nproc"], machine["cpu"], machine["kernel"]))
    log("%d rounds of %d s per workload, servers interleaved in each round, the order "
        "rotated from round to round." % (
        opts.rounds, opts.duration))
    if opts.pin:
        server_cpus, load_cpus = pin_split()
        machine["pinned"] = (cpu_list(server_cpus), cpu_list(load_cpus))
        log("Pinned twins (KEY_pin rows): servers on CPU %s, load generator and upstream on "
            "CPU %s." % machine["pinned"])
    make_docroot()
    make_upstream_docroot()
    make_php_docroot()
    if any(w.variant in TLS_VARIANTS for w in WORKLOADS if not opts.only or w.key in opts.only):
        make_cert()
    shutil.rmtree(RUN, ignore_errors=True)
    os.makedirs(RUN)
    bench = Bench(opts)
    bench.run_all()
    bench.report(machine, versions(opts.bin))
    return 0


def count_lines(path):
    n = 0
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                n += chunk.count(b"\n")
    except OSError:
        return None
    return n


def parse_args(argv):
    global WORKLOADS, GOALS, ALLOC_LIB  # --pin adds the pinned twins
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(OUT, "lfhttpd"), help="lfhttpd binary")
    p.add_argument("--ceiling", default=os.path.join(OUT, "ceiling"),
                   help="the ceiling program (tests/bench/ceiling.c), run in the 1 KiB "
                   "keep-alive workloads; skipped with a note if it is not built")
    p.add_argument("--quick", action="store_true", help="2 rounds of 2 s, one round for the variant "
                   "workloads (access log on, /hello, sites, proxied...), one memory round (QUICK=1)")
    p.add_argument("--rounds", type=int, help="rounds per workload (default 5, quick 2)")
    p.add_argument("--duration", type=int, help="seconds per run (default 5, quick 2)")
    p.add_argument("--warmup", type=int, help="warm-up seconds per server and workload "
                   "(default 1, quick 0)")
    p.add_argument("--mem-rounds", type=int, help="rounds of the memory workload "
                   "(default 3, quick 1)")
    p.add_argument("--ab-requests", type=int, default=20000, help="ab -n (default 20000)")
    p.add_argument("--pin", action="store_true", help="also measure each load workload "
                   "pinned (PIN=1): the servers' threads on the first half of the CPUs, the "
                   "load generator (and a proxy's upstream) on the rest, in the same rounds")
    p.add_argument("--alloc-lib", help="tests/alloc_counter.c built (make bench: "
                   "build/tests/alloc_counter.so): preloaded into lfhttpd of the PHP rows, "
                   "which then count its allocations per request")
    p.add_argument("--only", help="comma-separated workloads: " +
                   ",".join(w.key for w in WORKLOADS))
    o = p.parse_args(argv)
    if o.pin:
        pin_split()  # fails early on a machine of one CPU
        WORKLOADS, GOALS = add_pinned_twins(WORKLOADS, GOALS)
    o.bin = os.path.abspath(o.bin)  # servers run in their own directories
    ALLOC_LIB = os.path.abspath(o.alloc_lib) if o.alloc_lib else None
    o.ceiling = os.path.abspath(o.ceiling)
    o.rounds = o.rounds or (2 if o.quick else 5)
    o.duration = o.duration or (2 if o.quick else 5)
    o.warmup = o.warmup if o.warmup is not None else (0 if o.quick else 1)
    o.mem_rounds = o.mem_rounds or (1 if o.quick else 3)
    o.only = set(o.only.split(",")) if o.only else None
    if o.only and o.pin:  # naming a workload names its pinned twin too
        o.only |= {k + PIN_SUFFIX for k in o.only}
    if o.only and o.only - {w.key for w in WORKLOADS}:
        p.error("unknown workload in --only: %s" % ", ".join(o.only - {w.key for w in WORKLOADS}))
    if o.only:  # a workload's second figure comes with it (https_hs: https_hs_ab)
        o.only |= {w.key for w in WORKLOADS if w.part_of in o.only}
    return o


def main(argv):
    opts = parse_args(argv)
    if not os.access(opts.bin, os.X_OK):
        log("bench: %s is not built" % opts.bin)
        return 2

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    # SIGINT too: a shell that starts us in the background sets it to "ignore", and
    # Python then installs no KeyboardInterrupt handler of its own.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        return run(opts)
    except KeyboardInterrupt:
        log("\nbench: interrupted; servers stopped")
        return 130
    except RuntimeError as e:  # a server that does not start or a rejected configuration
        log("\nbench: %s\nbench: stopped; servers stopped" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
