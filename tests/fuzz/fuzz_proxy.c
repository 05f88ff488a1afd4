/* fuzz_proxy.c — libFuzzer target for the reverse proxy's two heads: the request an
 * upstream gets (mod_proxy's proxy_ops.request) and the answer's head the client gets
 * (proxy_ops.head, then the framing the core adds).
 *
 * Input: one byte that picks a configuration (the low three bits: one of the variants
 * below; bit 3: head() is given no request, as when the core could not keep it), then a
 * client's request head (a body may follow it), a NUL byte, and an upstream's answer
 * (1xx heads first, maybe, then the final head). Each configuration is built once, as a
 * start builds it (generation_build), with a small document root the target makes.
 *
 * The request is parsed (http_parse_request; invalid ones are skipped), placed and
 * answered as fuzz_route does. When the answer is a proxied one (resp.proxy), the body is
 * given as the core gives it (read whole, Content-Length's or the chunks' length), the
 * request's head is written (into a buffer of exactly the core's size, then of exactly
 * the written length, then of one byte less), and the upstream's head is taken as the core
 * takes it (1xx skipped, Transfer-Encoding with Content-Length and an unasked 101
 * refused), given to head(), filtered and framed as http_proxy.c's relay_head does, and
 * finished (resp_finish).
 *
 * What it checks, beyond "no crash, no sanitizer report, no leak":
 *   - the request written parses (strictly) as one whole request of exactly that length,
 *     HTTP/1.0 (1.1 where the location says proxy_http_version 1.1), the client's
 *     method, a target starting with '/', one Host field, no Transfer-Encoding, one
 *     Content-Length equal to the body's length when the client's request had a body
 *     framing and none otherwise; no Keep-Alive, TE, Trailer, Expect or Proxy-* field;
 *     Connection and Upgrade only as proxy_set_header says (nginx's rules), "close"
 *     without a Connection line; no field the client's Connection named, but those the
 *     proxy makes itself;
 *   - the same request written into a buffer of exactly its length gives the same bytes,
 *     and into one byte less, -1 (ASan: nothing written past either);
 *   - the answer's head parses as a response head (http_parse_response) of the upstream's
 *     status with exactly the framing the core chose (chunked, Content-Length, to the
 *     close, or none) and the persistence it chose; its Connection, Transfer-Encoding and
 *     Content-Length fields are the core's only; no Keep-Alive, TE, Trailer, no Upgrade
 *     but a 101's; no line holds a CR or LF inside; no field proxy_hide_header names, nor
 *     one the upstream's Connection names (but those made here).
 *
 * FUZZ_PROXY_TRACE=1: print each request written and each answer's head.
 * Seeds: tests/fuzz/corpus/fuzz_proxy/. Links: every server and module object. Built and
 * run by `make fuzz`.
 */
#include "conn.h"
#include "generation.h"
#include "http_upstream.h"
#include "log.h"
#include "module_level.h"
#include "server.h"
#include "upstream.h"
#include "vars.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define REQUIRE(x)                                                                             \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* The core's sizes (http_proxy.c): the request's head buffer and the upstream head's. */
#define PROXY_REQ_MAX (2 * CONN_BUF_SIZE + REQUEST_PATH_MAX)
#define PROXY_HEAD_MAX 16384
/* Fields in the client's request and in the upstream's head, at most: the proxy adds some,
 * and the parsers that read the results take HTTP_MAX_HEADERS (a limit of theirs, not a
 * fault of the proxy's). */
#define CLIENT_FIELDS_MAX 40
#define UPSTREAM_FIELDS_MAX 48
/* A body larger than this would be refused (413) before the proxy is asked. */
#define BODY_MAX (1u << 20)

/* --- the configurations ------------------------------------------------------------------- */

struct variant {
    const char *text;
    /* Fields the proxy writes itself, besides its defaults (Host, X-Real-IP,
     * X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host): lowercase, ',' apart. */
    const char *set;
    /* Fields proxy_hide_header names for every proxied location: lowercase, ',' apart. */
    const char *hidden;
    /* Fields the answer's filters add (add_header, gzip): lowercase, ',' apart. */
    const char *added;
};

static const struct variant variants[8] = {
    {/* the example: a named upstream, a named location, a URI part */
     "upstream app {\n"
     "    server 127.0.0.1:3000 weight=2 max_fails=3 fail_timeout=10s;\n"
     "    server 127.0.0.1:3001;\n"
     "    keepalive 32;\n"
     "    least_conn;\n"
     "}\n"
     "server {\n"
     "    listen 8080;\n"
     "    location / { try_files $uri @app; }\n"
     "    location @app { proxy_pass http://app; }\n"
     "    location /api/ {\n"
     "        proxy_pass http://app/v1/;\n"
     "        proxy_set_header Host $host;\n"
     "        proxy_set_header X-Request-Id $request_id;\n"
     "        proxy_hide_header X-Powered-By;\n"
     "        proxy_read_timeout 60s;\n"
     "    }\n"
     "    location /ws/ { proxy_pass http://127.0.0.1:3002; }\n"
     "}\n",
     "x-request-id", "", ""},
    {/* HOST:PORT (no keepalive: Connection: close), variables in set values */
     "server {\n"
     "    listen 8080;\n"
     "    proxy_hide_header X-Powered-By;\n"
     "    proxy_hide_header Set-Cookie;\n"
     "    location /a/ {\n"
     "        proxy_pass http://127.0.0.1:8081/b/;\n"
     "        proxy_set_header X-Uri $uri;\n"
     "        proxy_set_header X-Args $args;\n"
     "        proxy_set_header X-Y $http_x_y;\n"
     "        proxy_set_header X-Request-Id $request_id;\n"
     "        proxy_set_header X-Target \"$request_method $request_uri\";\n"
     "    }\n"
     "    location / { proxy_pass http://127.0.0.1:8081; proxy_redirect off; }\n"
     "}\n",
     "x-uri,x-args,x-y,x-request-id,x-target", "x-powered-by,set-cookie", ""},
    {/* nginx's usual lines: Host $http_host, X-Forwarded-For $remote_addr */
     "upstream backend {\n"
     "    server 10.0.0.2:8000;\n"
     "    server 10.0.0.3:8000 backup;\n"
     "    keepalive 8;\n"
     "}\n"
     "server {\n"
     "    listen 8080;\n"
     "    server_name example.org;\n"
     "    proxy_pass_header Server;\n"
     "    proxy_pass_header Date;\n"
     "    location / {\n"
     "        proxy_pass http://backend;\n"
     "        proxy_set_header Host $http_host;\n"
     "        proxy_set_header X-Real-IP \"\";\n"
     "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
     "    }\n"
     "}\n",
     "", "", ""},
    {/* inherited set and hide lists, gzip and add_header on the answer, regex and exact
      * locations */
     "gzip on;\n"
     "gzip_types text/plain application/json;\n"
     "upstream app { server 127.0.0.1:3000; keepalive 4; }\n"
     "server {\n"
     "    listen 8080;\n"
     "    proxy_set_header X-Tenant t1;\n"
     "    proxy_hide_header X-Secret;\n"
     "    location /api/ {\n"
     "        add_header X-Frame-Options DENY always;\n"
     "        proxy_pass http://app/;\n"
     "    }\n"
     "    location ~ \\.php$ { proxy_pass http://app; }\n"
     "    location = /exact { proxy_pass http://app/exact-target; }\n"
     "}\n",
     "x-tenant", "x-secret", "x-frame-options,content-encoding,vary,etag"},
    {/* WebSocket as nginx users write it (tunnelled only with these lines, as nginx) */
     "upstream ws { server 127.0.0.1:3002; keepalive 2; }\n"
     "server {\n"
     "    listen 8080;\n"
     "    location /ws/ {\n"
     "        proxy_pass http://ws;\n"
     "        proxy_http_version 1.1;\n"
     "        proxy_set_header Upgrade $http_upgrade;\n"
     "        proxy_set_header Connection \"upgrade\";\n"
     "    }\n"
     "    location / { proxy_pass http://ws; }\n"
     "}\n",
     "upgrade,connection", "", ""},
    {/* an internal redirect to the proxied location (the path changes), relative
      * redirects */
     "upstream app { server 127.0.0.1:3000; keepalive 16; }\n"
     "server {\n"
     "    listen 8080;\n"
     "    absolute_redirect off;\n"
     "    location / { try_files $uri /app$uri; }\n"
     "    location /app/ {\n"
     "        proxy_pass http://app/;\n"
     "        proxy_set_header X-Orig $request_uri;\n"
     "    }\n"
     "}\n",
     "x-orig", "", ""},
    {/* IPv6 and a port, a URI part without a trailing slash */
     "server {\n"
     "    listen 8080;\n"
     "    location /six { proxy_pass http://[::1]:8080/x; }\n"
     "    location / { proxy_pass http://[::1]:8080; proxy_hide_header Link; }\n"
     "}\n",
     "", "", ""},
    {/* fixed Host and scheme, a client field removed by an empty set value */
     "upstream app { server 127.0.0.1:3000; keepalive 1; }\n"
     "server {\n"
     "    listen 8080;\n"
     "    proxy_hide_header X-Runtime;\n"
     "    location / {\n"
     "        proxy_pass http://app;\n"
     "        proxy_set_header Host backend.internal:8443;\n"
     "        proxy_set_header X-Forwarded-Proto https;\n"
     "        proxy_set_header Accept-Encoding \"\";\n"
     "        proxy_set_header Cookie $http_cookie;\n"
     "    }\n"
     "}\n",
     "accept-encoding,cookie", "x-runtime", ""},
};
#define N_VARIANTS (sizeof(variants) / sizeof(variants[0]))

static char root[PATH_MAX];
static bool trace, strict; /* FUZZ_PROXY_TRACE, FUZZ_PROXY_STRICT (known findings) */

static void put_file(const char *name, const char *text)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", root, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

static void remove_root(void)
{
    char p[PATH_MAX + 64];
    static const char *const names[] = {"index.html", "a.txt", "app.js"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", root, names[i]);
        unlink(p);
    }
    rmdir(root);
}

static void start(void)
{
    char tmpl[] = "/tmp/fuzz_proxy.XXXXXX";
    REQUIRE(mkdtemp(tmpl) && realpath(tmpl, root));
    atexit(remove_root);
    put_file("index.html", "<h1>site</h1>\n");
    put_file("a.txt", "a\n");
    put_file("app.js", "console.log('app');\n");
    REQUIRE(log_open_error("/dev/null", LOG_LEVEL_ERROR) == 0);
    trace = getenv("FUZZ_PROXY_TRACE") != NULL;
    strict = getenv("FUZZ_PROXY_STRICT") == NULL || strcmp(getenv("FUZZ_PROXY_STRICT"), "0");
}

/* Variant i's generation, built on first use and kept (it lives as long as the process). */
static struct generation *generation_of(unsigned i)
{
    static struct generation *built[N_VARIANTS];
    if (built[i])
        return built[i];
    int fd = memfd_create("fuzz_proxy", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    static const char head[] = "mime_magic off;\nmime_types off;\n";
    size_t len = strlen(variants[i].text);
    REQUIRE(write(fd, head, sizeof(head) - 1) == (ssize_t)(sizeof(head) - 1));
    REQUIRE(write(fd, variants[i].text, len) == (ssize_t)len);
    char conf[64], err[4096];
    snprintf(conf, sizeof(conf), "/proc/self/fd/%d", fd);
    struct generation_source src = {.conf = conf, .root = root};
    built[i] = generation_build(&src, 1, err, sizeof(err));
    if (!built[i])
        fprintf(stderr, "variant %u: %s\n", i, err);
    REQUIRE(built[i]);
    close(fd);
    return built[i];
}

/* --- field helpers ---------------------------------------------------------------------- */

/* Is name (any case) in list (lowercase, ',' apart)? */
static bool in_list(const char *list, struct http_slice name)
{
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == name.len && http_bytes_eq_nocase(name.p, p, n))
            return true;
        p += n + (end ? 1 : 0);
    }
    return false;
}

static unsigned count_fields(const struct http_header *f, unsigned n, const char *lower)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++)
        k += http_slice_eq(f[i].name, lower);
    return k;
}

static const struct http_header *field(const struct http_header *f, unsigned n,
                                       const char *lower)
{
    for (unsigned i = 0; i < n; i++)
        if (http_slice_eq(f[i].name, lower))
            return &f[i];
    return NULL;
}

/* Does a Connection field among f[0..n) list option? */
static bool connection_lists(const struct http_header *f, unsigned n, struct http_slice option)
{
    for (unsigned i = 0; i < n; i++) {
        if (!http_slice_eq(f[i].name, "connection"))
            continue;
        struct http_slice rest = f[i].value, e;
        while (http_list_next(&rest, &e))
            if (e.len == option.len && strncasecmp(e.p, option.p, e.len) == 0)
                return true;
    }
    return false;
}

static bool slice_is(struct http_slice s, const char *text)
{
    return s.len == strlen(text) && memcmp(s.p, text, s.len) == 0;
}

/* The core's test (http_proxy.c asks_upgrade): an Upgrade field with a value, and
 * "upgrade" in Connection, in an HTTP/1.1 request. */
static bool asks_upgrade(const struct http_request *h)
{
    bool upgrade = false;
    for (unsigned i = 0; i < h->n_headers; i++)
        upgrade |= http_slice_eq(h->headers[i].name, "upgrade") && h->headers[i].value.len > 0;
    return upgrade && h->version_minor > 0 &&
           connection_lists(h->headers, h->n_headers, (struct http_slice){"upgrade", 7});
}

/* --- findings ----------------------------------------------------------------------------
 * Faults of the proxy's that this target found, all fixed since: each is a failure, unless
 * FUZZ_PROXY_STRICT=0 passes it over (for a run that looks for others while one is being
 * fixed). Their reproducers stay as seeds named known_*.
 *   NO_HOST       an HTTP/1.0 request without a Host field (an absolute-form target
 *                 too), where Host is set from a variable that expands to nothing ($host
 *                 without server_name, $http_host): the field is left out, as every empty
 *                 one, and the upstream gets an HTTP/1.1 request with no Host, which it
 *                 must refuse (400);
 *   SET_HOP       proxy_set_header Connection / Upgrade (nginx's WebSocket lines) are
 *                 written besides the proxy's own: two Connection fields ("upgrade" and
 *                 "close", or "upgrade" twice) and two Upgrade fields, and Connection:
 *                 upgrade without Upgrade on a request that asked for no tunnel;
 *   EXACT_ROOM    a request that fits its buffer exactly is refused (-1) when a set field
 *                 that expands to nothing comes after the room ran short: its name is
 *                 written (and then taken back) before its value is known;
 *   BARE_101      a 101 from the upstream without an Upgrade field is relayed, with an
 *                 empty "Upgrade: " made of a slice with no pointer (memcpy from NULL:
 *                 UBSan), where the answer cannot be relayed (RFC 9110 section 15.2.2: a
 *                 101 names the protocol switched to) and ought to be a 502. */
enum known { NO_HOST, SET_HOP, EXACT_ROOM, BARE_101 };

static bool passed_over(enum known k)
{
    static const char *const names[] = {"NO_HOST", "SET_HOP", "EXACT_ROOM", "BARE_101"};
    if (strict) {
        fprintf(stderr, "FAIL known finding %s\n", names[k]);
        abort();
    }
    return true;
}

static void fail(const char *what, const char *text, size_t len)
{
    fprintf(stderr, "FAIL %s\n---\n%.*s---\n", what, (int)len, text);
    abort();
}

#define EXPECT(x, text, len)                                                                   \
    do {                                                                                       \
        if (!(x))                                                                              \
            fail(#x, text, len);                                                               \
    } while (0)

/* --- the request the upstream gets ------------------------------------------------------ */

struct sent {
    const struct http_request *client;
    const struct variant *v;
    uint64_t body_len;
    bool keep_alive; /* the upstream keeps connections */
    bool tunnel;     /* the client asked to switch protocols */
};

/* Is a field in the written request one the proxy makes itself? */
static bool made_here(const struct sent *s, struct http_slice name)
{
    static const char defaults[] =
        "host,x-real-ip,x-forwarded-for,x-forwarded-proto,x-forwarded-host,content-length,"
        "connection";
    return in_list(defaults, name) || in_list(s->v->set, name) ||
           (s->tunnel && http_slice_eq(name, "upgrade"));
}

static void check_hop_by_hop(const struct sent *s, const struct http_request *w,
                             const char *out, size_t len)
{
    const struct http_header *f = w->headers;
    unsigned n = w->n_headers;
    EXPECT(count_fields(f, n, "keep-alive") == 0, out, len);
    EXPECT(count_fields(f, n, "te") == 0, out, len);
    EXPECT(count_fields(f, n, "trailer") == 0, out, len);
    EXPECT(count_fields(f, n, "expect") == 0, out, len);
    for (unsigned i = 0; i < n; i++) /* Proxy-Authorization, Proxy-Connection... */
        EXPECT(!(f[i].name.len > 6 && http_bytes_eq_nocase(f[i].name.p, "proxy-", 6)), out,
               len);
    /* nginx's rules: Connection and Upgrade go as proxy_set_header says (an empty value:
     * none), the client's never; without a Connection line, "close" */
    bool set_conn = in_list(s->v->set, (struct http_slice){"connection", 10});
    bool set_upgrade = in_list(s->v->set, (struct http_slice){"upgrade", 7});
    const struct http_header *conn = field(f, n, "connection");
    EXPECT(count_fields(f, n, "connection") <= 1, out, len);
    EXPECT(count_fields(f, n, "upgrade") <= (set_upgrade ? 1u : 0u), out, len);
    if (!set_conn)
        EXPECT(conn && slice_is(conn->value, "close"), out, len);
    /* the fields the client's Connection named stay behind */
    for (unsigned i = 0; i < n; i++)
        if (connection_lists(s->client->headers, s->client->n_headers, f[i].name))
            EXPECT(made_here(s, f[i].name), out, len);
}

/* Is there a Host field line (parsing would refuse an HTTP/1.1 request without)? */
static bool has_host_line(const char *out, size_t len)
{
    for (const char *p = out; (p = memchr(p, '\n', (size_t)(out + len - p))) != NULL;) {
        p++;
        if ((size_t)(out + len - p) >= 5 && strncasecmp(p, "host:", 5) == 0)
            return true;
    }
    return false;
}

static void check_written(const struct sent *s, const char *out, size_t len)
{
    struct http_limits lim = {.max_header_bytes = len, .max_headers = HTTP_MAX_HEADERS};
    static struct http_request w;
    const struct http_request *c = s->client;
    if (!field(c->headers, c->n_headers, "host") && !has_host_line(out, len) &&
        passed_over(NO_HOST))
        return;
    int rc = http_parse_request(out, len, &lim, &w);
    EXPECT(rc > 0 && (size_t)rc == len && w.header_bytes == len, out, len);
    /* HTTP/1.0 unless proxy_http_version 1.1, as nginx's: only the variant that sets
     * Connection (the WebSocket one) says 1.1, in one of its locations */
    bool may_be_11 = in_list(s->v->set, (struct http_slice){"connection", 10});
    EXPECT((w.version_minor == 0 || (may_be_11 && w.version_minor == 1)) &&
               out[len - 1] == '\n', out, len);
    EXPECT(w.method_name.len == s->client->method_name.len &&
               memcmp(w.method_name.p, s->client->method_name.p, w.method_name.len) == 0,
           out, len);
    EXPECT(w.target.len > 0 && w.target.p[0] == '/', out, len);
    EXPECT(count_fields(w.headers, w.n_headers, "host") == 1, out, len);
    EXPECT(count_fields(w.headers, w.n_headers, "transfer-encoding") == 0, out, len);
    unsigned lengths = count_fields(w.headers, w.n_headers, "content-length");
    if (s->client->framing == HTTP_BODY_NONE) {
        EXPECT(lengths == 0 && w.framing == HTTP_BODY_NONE, out, len);
    } else {
        EXPECT(lengths == 1 && w.framing == HTTP_BODY_LENGTH, out, len);
        EXPECT(w.content_length == s->body_len, out, len);
    }
    check_hop_by_hop(s, &w, out, len);
}

/* Write the request as the core does, into a buffer of exactly cap bytes: the length. */
static long write_request(const struct proxy_params *p, const struct request *r, bool keep,
                          size_t cap, char **out)
{
    *out = malloc(cap ? cap : 1);
    REQUIRE(*out);
    return p->ops->request(p->conf, r, NULL, &keep, *out, cap);
}

static void check_request_sent(const struct proxy_params *p, const struct request *r,
                               const struct sent *s)
{
    char *out, *again;
    long len = write_request(p, r, s->keep_alive, PROXY_REQ_MAX, &out);
    if (len < 0) { /* too large to forward: 500 */
        free(out);
        return;
    }
    REQUIRE(len > 0 && (size_t)len <= PROXY_REQ_MAX);
    if (trace)
        fprintf(stderr, ">>> request\n%.*s", (int)len, out);
    check_written(s, out, (size_t)len);
    long exact = write_request(p, r, s->keep_alive, (size_t)len, &again);
    REQUIRE(exact == len || (exact == -1 && passed_over(EXACT_ROOM)));
    REQUIRE(exact == -1 || memcmp(out, again, (size_t)len) == 0);
    free(again);
    REQUIRE(write_request(p, r, s->keep_alive, (size_t)len - 1, &again) == -1);
    free(again);
    free(out);
}

/* --- the answer the client gets --------------------------------------------------------- */

/* The upstream's final head, taken as http_proxy.c's read_head takes it: 1xx but 101
 * skipped; false when the core would answer 502 instead (or the head is not whole). */
static bool upstream_head(const char *buf, size_t len, enum http_method m, bool tunnel,
                          struct http_response_head *uh)
{
    static const struct http_limits lim = {PROXY_HEAD_MAX, HTTP_MAX_HEADERS};
    size_t off = 0;
    for (;;) {
        int used = http_parse_response(buf + off, len - off, &lim, m, uh);
        if (used <= 0 || uh->te_and_length)
            return false;
        if (uh->status >= 100 && uh->status < 200 && uh->status != 101) {
            off += (size_t)used;
            continue;
        }
        return !(uh->status == 101 && (!tunnel || uh->upgrade.len == 0)) &&
               uh->n_headers <= UPSTREAM_FIELDS_MAX;
    }
}

/* The filters, as http_source.c's http_source_filter_head runs them on an upstream's head. */
static void filter_head(struct generation *g, const struct request *r,
                        const struct proxy_params *p, struct response *resp)
{
    resp->streaming = true;
    resp->stream_head = true;
    resp->proxy = p;
    resp->upstream_head = true;
    module_chain_filter(&g->chain, r, resp);
    resp->streaming = false;
    resp->stream_head = false;
    resp->proxy = NULL;
    resp->upstream_head = false;
}

/* The framing, as http_proxy.c's relay_head chooses it. */
static void frame(struct response *resp, const struct http_response_head *uh, bool http10)
{
    bool gzip = resp->body_filter && !resp->no_length;
    if (resp->status == 101) {
        resp->no_length = true;
        resp->keep_alive = true;
    } else if (uh->framing == HTTP_BODY_NONE && !gzip) {
        resp->content_length = uh->has_content_length ? uh->content_length : 0;
        if (resp->status == 204 || resp->status == 304 || resp->status < 200)
            resp->no_length = true;
    } else if (uh->framing == HTTP_BODY_LENGTH && !gzip) {
        resp->content_length = uh->content_length;
    } else if (http10) {
        resp->keep_alive = false;
        resp->no_length = true;
    } else {
        resp->chunked = true;
    }
}

/* Every line of the head ends with CRLF and holds no other CR or LF. */
static void check_lines(const char *head, size_t len)
{
    EXPECT(len >= 4 && memcmp(head + len - 4, "\r\n\r\n", 4) == 0, head, len);
    for (size_t i = 0; i < len; i++) {
        if (head[i] == '\r')
            EXPECT(i + 1 < len && head[i + 1] == '\n', head, len);
        if (head[i] == '\n')
            EXPECT(i > 0 && head[i - 1] == '\r', head, len);
    }
}

/* The Connection fields are the core's (resp_finish) and head()'s for a 101, only. */
static void check_connection(const struct response *resp, const struct http_response_head *ch,
                             bool http10)
{
    const char *head = resp->head;
    size_t len = resp->head_len;
    unsigned want = (!resp->keep_alive || http10) + (resp->status == 101);
    EXPECT(count_fields(ch->headers, ch->n_headers, "connection") == want, head, len);
    for (unsigned i = 0; i < ch->n_headers; i++) {
        if (!http_slice_eq(ch->headers[i].name, "connection"))
            continue;
        struct http_slice v = ch->headers[i].value;
        EXPECT(slice_is(v, "close") || slice_is(v, "keep-alive") || slice_is(v, "upgrade"),
               head, len);
    }
}

static void check_framing(const struct response *resp, const struct http_response_head *ch,
                          enum http_method m)
{
    const char *head = resp->head;
    size_t len = resp->head_len;
    unsigned te = count_fields(ch->headers, ch->n_headers, "transfer-encoding");
    unsigned cl = count_fields(ch->headers, ch->n_headers, "content-length");
    EXPECT(te == (resp->chunked ? 1u : 0u), head, len);
    EXPECT(cl == (!resp->chunked && !resp->no_length ? 1u : 0u), head, len);
    EXPECT(!ch->te_and_length, head, len);
    int s = resp->status;
    bool bodiless = m == HTTP_METHOD_HEAD || s < 200 || s == 204 || s == 304;
    enum http_framing want = bodiless          ? HTTP_BODY_NONE
                             : resp->chunked   ? HTTP_BODY_CHUNKED
                             : resp->no_length ? HTTP_BODY_CLOSE
                                               : HTTP_BODY_LENGTH;
    EXPECT(ch->framing == want, head, len);
    if (cl)
        EXPECT(ch->content_length == resp->content_length, head, len);
    if (s != 101 && want != HTTP_BODY_CLOSE)
        EXPECT(ch->keep_alive == resp->keep_alive, head, len);
}

/* A field the answer may carry though the upstream's Connection named it: made here. */
static bool answer_made_here(const struct variant *v, struct http_slice name)
{
    static const char ours[] = "date,server,content-length,transfer-encoding,connection,upgrade";
    return in_list(ours, name) || in_list(v->added, name);
}

static void check_answer(const struct response *resp, const struct http_response_head *uh,
                         enum http_method m, bool http10, const struct variant *v)
{
    const char *head = resp->head;
    size_t len = resp->head_len;
    REQUIRE(len <= RESP_HEAD_CAP);
    if (trace)
        fprintf(stderr, "<<< answer\n%.*s", (int)len, head);
    check_lines(head, len);
    static const struct http_limits lim = {RESP_HEAD_CAP, HTTP_MAX_HEADERS};
    static struct http_response_head ch;
    int rc = http_parse_response(head, len, &lim, m, &ch);
    EXPECT(rc > 0 && (size_t)rc == len, head, len);
    EXPECT(ch.status == uh->status && resp->status == uh->status, head, len);
    EXPECT(ch.version_minor == 1, head, len);
    check_connection(resp, &ch, http10);
    check_framing(resp, &ch, m);
    const struct http_header *f = ch.headers;
    unsigned n = ch.n_headers;
    EXPECT(count_fields(f, n, "keep-alive") == 0, head, len);
    EXPECT(count_fields(f, n, "te") == 0 && count_fields(f, n, "trailer") == 0, head, len);
    EXPECT(count_fields(f, n, "proxy-connection") == 0, head, len);
    EXPECT(count_fields(f, n, "upgrade") == (resp->status == 101 ? 1u : 0u), head, len);
    for (unsigned i = 0; i < n; i++) {
        EXPECT(!in_list(v->hidden, f[i].name), head, len);
        if (connection_lists(uh->headers, uh->n_headers, f[i].name))
            EXPECT(answer_made_here(v, f[i].name), head, len);
    }
}

/* Make the client's answer from the upstream's head as relay_head does, and check it. */
static void check_answer_made(struct generation *g, const struct proxy_params *p,
                              const struct request *r, const struct http_response_head *uh,
                              bool no_request, bool keep_alive, const struct variant *v)
{
    const struct http_request *h = r->http;
    bool http10 = h->version_minor == 0;
    if (uh->status == 101 && uh->upgrade.len == 0 && !strict) /* strict: see UBSan say it */
        return;
    static struct response resp;
    resp_init(&resp);
    resp.head_only = h->method == HTTP_METHOD_HEAD;
    if (p->ops->head(p->conf, no_request ? NULL : r, uh, &resp) < 0 || resp_failed(&resp))
        return; /* 502: the head cannot be relayed */
    REQUIRE(resp.head_len <= RESP_HEAD_CAP);
    resp.length_known = uh->framing == HTTP_BODY_LENGTH ||
                        (uh->framing == HTTP_BODY_NONE && uh->has_content_length);
    resp.content_length = resp.length_known ? uh->content_length : 0;
    if (resp.status != 101 && !no_request)
        filter_head(g, r, p, &resp);
    if (resp_failed(&resp))
        return; /* 502: too large with the fields added here */
    resp.keep_alive = keep_alive;
    frame(&resp, uh, http10);
    resp_finish(&resp, http10);
    check_answer(&resp, uh, h->method, http10, v);
}

/* --- one input ---------------------------------------------------------------------------- */

/* The body the proxy is given: read whole by the core before it asks (a Content-Length's
 * bytes, or the chunks decoded from what follows the head). False: the core would not
 * get this far (too large, or chunks that do not end in the input). */
static bool take_body(const struct http_request *h, char *rest, size_t n, struct request *r)
{
    if (h->framing == HTTP_BODY_LENGTH) {
        if (h->content_length > BODY_MAX)
            return false;
        r->body = n >= h->content_length ? rest : NULL;
        r->body_len = (size_t)h->content_length;
        return true;
    }
    if (h->framing != HTTP_BODY_CHUNKED)
        return true;
    struct http_chunked c;
    http_chunked_init(&c);
    size_t used, out;
    if (http_chunked_decode(&c, rest, n, BODY_MAX, &used, &out) != HTTP_CHUNKED_DONE)
        return false;
    r->body = rest;
    r->body_len = out;
    return true;
}

static void proxied(struct generation *g, const struct variant *v, struct request *r,
                    const struct proxy_params *p, const char *up, size_t up_len,
                    bool no_request)
{
    const struct http_request *h = r->http;
    struct sent s = {
        .client = h,
        .v = v,
        .body_len = r->body_len,
        .keep_alive = p->upstream->keepalive > 0,
        .tunnel = asks_upgrade(h),
    };
    check_request_sent(p, r, &s);
    static struct http_response_head uh;
    if (!upstream_head(up, up_len, h->method, s.tunnel, &uh))
        return;
    check_answer_made(g, p, r, &uh, no_request, h->keep_alive, v);
}

static void serve(unsigned knob, char *req, size_t req_len, const char *up, size_t up_len)
{
    const struct variant *v = &variants[knob % N_VARIANTS];
    struct generation *g = generation_of(knob % N_VARIANTS);
    struct http_limits lim = g->limits;
    lim.max_headers = CLIENT_FIELDS_MAX < lim.max_headers ? CLIENT_FIELDS_MAX : lim.max_headers;
    static struct http_request h;
    int rc = http_parse_request(req, req_len, &lim, &h);
    if (rc <= 0)
        return;
    if (h.method == HTTP_METHOD_UNKNOWN || h.method == HTTP_METHOD_CONNECT ||
        (h.method == HTTP_METHOD_OPTIONS && h.target.len == 1 && h.target.p[0] == '*'))
        return; /* answered before routing */
    static char path[REQUEST_PATH_MAX];
    long n = http_path_normalize(h.path, path, sizeof(path));
    if (n < 0)
        return;
    static struct server server;
    char id[VARS_REQUEST_ID_SIZE] = "";
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(40000),
                               .sin_addr.s_addr = htonl(0x7f000001)};
    struct sockaddr_in local = {.sin_family = AF_INET, .sin_port = htons(8080),
                                .sin_addr.s_addr = htonl(0x7f000001)};
    struct request r = {
        .http = &h,
        .path = path,
        .path_len = (size_t)n,
        .peer = (const struct sockaddr *)&peer,
        .local = (const struct sockaddr *)&local,
        .request_id = id,
        .now_s = 1700000000,
        .cfg = &g->cfg,
        .root_fd = g->root_fd,
        .root_real = g->root_real,
        .args = h.query,
        .has_args = h.has_query,
        .file = path,
        .file_len = (size_t)n,
        .level = g->chain.levels,
        .server = &server,
        .chain = &g->chain,
    };
    if (module_chain_route(&g->chain, &r) != 0)
        return;
    if (r.mount && r.mount->wants_body &&
        !take_body(&h, req + rc, req_len - (size_t)rc, &r))
        return;
    static struct response resp;
    resp_init(&resp);
    resp.head_only = h.method == HTTP_METHOD_HEAD;
    module_chain_answer(&g->chain, &r, &resp);
    if (resp.proxy) {
        proxied(g, v, &r, resp.proxy, up, up_len, knob & 8);
        return;
    }
    resp_finish(&resp, h.version_minor == 0); /* a file or an error: let go as fuzz_route */
    resp_file_close(&resp);
    if (resp.release)
        resp.release(resp.release_ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool started;
    if (!started) {
        start();
        started = true;
    }
    if (size < 2 || size > 65536)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const char *nul = memchr(text, '\0', len);
    if (!nul)
        return 0;
    /* each part in a buffer of its own size: a read past either is reported */
    size_t req_len = (size_t)(nul - text), up_len = len - req_len - 1;
    char *req = malloc(req_len ? req_len : 1), *up = malloc(up_len ? up_len : 1);
    REQUIRE(req && up);
    memcpy(req, text, req_len);
    memcpy(up, nul + 1, up_len);
    serve(data[0], req, req_len, up, up_len);
    free(req);
    free(up);
    return 0;
}
