/* module_route.c — which block answers a request, and the core's part of answering:
 * `return`, `try_files`, internal redirects and `error_page`, in nginx's order.
 *
 * For a request: the server (site_server_for: address, then Host), its rewrite directives
 * (rewrite.h) or its `return` (nginx's server rewrite phase: before any location); else the
 * location (site_location_for), its rewrite directives or `return` (a `last`, or a path
 * they changed, searches again); else the access hooks of the location;
 * else its `try_files`, which may pick a file or directory (the path becomes it, the
 * location stays), answer =CODE, go to a named location, or redirect internally to a URI
 * (the location is searched again). Then the handler. An internal redirect repeats the
 * search at most ROUTE_REDIRECTS_MAX times, then 500 (nginx allows 10 too). A finished
 * response whose status has an `error_page` in its block is answered again, once, by an
 * internal redirect to the page's URI (a GET, as nginx's), with the original status (or
 * =ANSWER): an error the page answers (its `return 405`, its missing file) is the answer,
 * with its plain error, a redirect it answers goes as it is, and a refusal by the page's
 * location's access rules (401, 403) is the answer, as nginx's.
 */
#include "module_chain.h"
#include "module_figures.h"
#include "module_fastcgi.h"
#include "strbuf.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "module_level.h"
#include "referer.h"
#include "secure_link.h"
#include "rewrite.h"
#include "site.h"
#include "tls.h"
#include "vars.h"

#define ROUTE_REDIRECTS_MAX 10

static long route_path_var(const void *request, int which, char *out, size_t cap);

/* $sent_http_NAME: the answer's field, NAME lowercased with '-' (vars.c). */
static struct http_slice sent_field(const void *response, const char *name, size_t len)
{
    char z[128];
    size_t n = 0;
    if (len >= sizeof(z))
        return (struct http_slice){"", 0};
    memcpy(z, name, len);
    z[len] = '\0';
    const char *v = resp_header_get(response, z, &n);
    return v ? (struct http_slice){v, n} : (struct http_slice){"", 0};
}

void module_vars_answer(struct vars_source *src, const struct response *resp)
{
    src->sent_field = sent_field;
    src->response = resp;
}

static void route_connections(const void *request, unsigned long long out[4])
{
    struct server_connections n;
    module_server_connections(request, &n);
    out[0] = n.active;
    out[1] = n.reading;
    out[2] = n.writing;
    out[3] = n.waiting;
}

/* A longer body nginx writes to a file, which its $request_body does not read. */
size_t module_request_body_len(const struct request *req)
{
    size_t len = req->body ? req->body_len : req->read_body ? req->read_body_len : 0;
    return req->level && len <= req->level->limits.client_body_buffer_size ? len : 0;
}

const char *module_request_body(const struct request *req)
{
    return req->body ? req->body : req->read_body;
}

void module_vars_source(const struct request *req, struct vars_source *src)
{
    const struct site_server *s = req->site;
    const struct site_name *first = s && s->n_names ? &s->names[0] : NULL;
    *src = (struct vars_source){
        .http = req->http,
        .uri = req->path,
        .uri_len = req->path_len,
        .peer = req->peer,
        .conn_peer = req->conn_peer,
        .connections = req->server ? route_connections : NULL,
        .proxy_protocol = req->proxy_protocol,
        .local = req->local,
        .local_fd = req->local_fd,
        .https = req->https,
        .server_name = first && first->kind == SITE_NAME_EXACT ? first->text : NULL,
        /* $server_name as written: "*.x" and "x.*" are kept as ".x" and "x."; ".x" is
         * "x", as nginx's */
        .name_before = first && first->kind == SITE_NAME_LEADING && !first->bare_too ? "*" : "",
        .name = first ? first->text + (first->bare_too ? 1 : 0) : "",
        .name_after = first && first->kind == SITE_NAME_TRAILING ? "*" : "",
        .args = &req->args,
        .request_id = req->request_id,
        .captures = &req->captures,
        .server_captures = &req->server_captures,
        .conn_requests = req->conn_requests,
        .pipelined = req->pipelined,
        .conn_number = req->conn_number,
        .request_length = req->request_length,
        .conn_opened_ms = req->conn_opened_ms,
        .start_us = req->start_us,
        .user_var = rewrite_var,
        .user_vars = req,
        .upstream = req->upstream,
        .body_len = req->streamed_whole ? req->streamed_len : req->body_len,
        .body_streams = req->body_streams && !req->streamed_whole,
        .request_body = module_request_body(req),
        .request_body_len = module_request_body_len(req),
        .path_var = route_path_var,
        .limit_req_status = req->marks.limit_req,
        .limit_conn_status = req->marks.limit_conn,
        .tls = req->tls,
        .tls_var = tls_var,
    };
}

/* Point the request at a block's settings: its root, and the file the path names there. */
static void use_level(struct request *req, const struct module_level *l)
{
    req->level = l;
    req->root_fd = l->root->fd;
    req->root_real = l->root->real;
    req->root_id = l->root->id;
    req->file = req->path;
    req->file_len = req->path_len;
    req->mount = l->mount;
}

/* Under `alias`, the file is what follows the location's prefix, beneath the alias
 * directory: /downloads/a.txt in `location /downloads/ { alias /data/; }` is /data/a.txt.
 * What follows must start a new segment: `location /d { alias /x/; }` does not serve
 * /d../etc (nginx's alias traversal). False: no file (404). The file is written in front
 * of the path, in the same buffer: file points into path. */
static bool alias_file(struct request *req)
{
    const struct module_level *l = req->level;
    size_t pl = l->alias_prefix_len;
    if (req->path_len < pl)
        return false;
    if (l->alias_file) { /* `alias FILE`: the location's path itself, nothing beneath */
        req->file = l->alias_file;
        req->file_len = strlen(l->alias_file);
        return req->path_len == pl;
    }
    const char *rest = req->path + pl;
    size_t rl = req->path_len - pl;
    if (pl && req->path[pl - 1] == '/') { /* the prefix's slash starts the rest */
        req->file = rest - 1;
        req->file_len = rl + 1;
        return true;
    }
    if (rl == 0) { /* the location itself: the alias directory */
        req->file = "/";
        req->file_len = 1;
        return true;
    }
    if (rest[0] != '/')
        return false;
    req->file = rest;
    req->file_len = rl;
    return true;
}

/* Does the file exist beneath the request's root, as a directory (dir) or not? A module
 * that knows (the open-file cache) answers first. */
static bool file_exists(const struct module_chain *c, const struct request *req,
                        const char *file, bool dir)
{
    for (unsigned i = 0; i < c->n; i++) {
        if (!c->mods[i]->file_exists)
            continue;
        int known = c->mods[i]->file_exists(c->state[i], req, file, dir);
        if (known >= 0)
            return known > 0;
    }
    const char *rel = file[1] ? file + 1 : ".";
    int fd = open_beneath(req->root_fd, rel, O_PATH, req->root_real);
    if (fd < 0)
        return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && (S_ISDIR(st.st_mode) == dir);
    close(fd);
    return ok;
}

/* Does p[0, len) hold "//"? From one '/' to the next: glibc's memmem prepares a search
 * that costs more than this on a path, which has few slashes. */
static bool has_double_slash(const char *p, size_t len)
{
    const char *end = p + len;
    for (const char *s = p; s + 1 < end && (s = memchr(s, '/', (size_t)(end - s - 1))); s++)
        if (s[1] == '/')
            return true;
    return false;
}

/* Runs of '/' in p[0..n) made one, in place; returns the new length (p NUL-terminated). */
static size_t merge_slashes(char *p, size_t n)
{
    if (!has_double_slash(p, n)) { /* the common case: nothing to move */
        p[n] = '\0';
        return n;
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] != '/' || w == 0 || p[w - 1] != '/')
            p[w++] = p[i];
    p[w] = '\0';
    return w;
}

/* A path made by expanding a value: absolute, without dot segments or NUL bytes (a
 * variable could bring them), so that it names what it seems to. */
static bool clean_path(const char *p, size_t n)
{
    if (n == 0 || p[0] != '/' || memchr(p, '\0', n))
        return false;
    const char *end = p + n;
    for (const char *s = p; (s = memchr(s, '/', (size_t)(end - s))); s++) { /* each '/' */
        if (s + 1 >= end || s[1] != '.')
            continue;
        const char *k = s + 2;
        if (k < end && *k == '.')
            k++;
        if (k == end || *k == '/')
            return false;
    }
    return true;
}

/* nginx's $request_filename for the request's block: its root (a root or alias with
 * variables expanded now) and the part of the path beneath it: the path, or under an
 * alias what follows the location's prefix, or nothing (an alias in a regex location, or
 * `alias FILE`, name the file whole). *root_len: the root's bytes. -1: it does not fit, or
 * the path is not beneath the alias's prefix. */
static long map_uri(const struct request *req, char *out, size_t cap, size_t *root_len)
{
    const struct module_level *l = req->level;
    size_t n;
    if (l->root_value) {
        struct vars_source src;
        module_vars_source(req, &src);
        src.path_var = NULL; /* a root made of $document_root is nginx's loop: empty */
        long e = vars_expand(l->root_value, &src, out, cap);
        if (e < 0)
            return -1;
        n = (size_t)e;
    } else {
        n = l->root_text_len;
        if (n >= cap)
            return -1;
        memcpy(out, l->root_text, n);
    }
    *root_len = n;
    const char *rest = req->path;
    size_t rl = req->path_len;
    if ((l->alias_whole && !req->alias_add_path) || (l->alias && l->alias_file)) {
        out[n] = '\0';
        return (long)n;
    }
    if (l->alias && !l->alias_whole) {
        if (rl < l->alias_prefix_len)
            return -1;
        rest += l->alias_prefix_len;
        rl -= l->alias_prefix_len;
    }
    if (n + rl >= cap)
        return -1;
    memcpy(out + n, rest, rl);
    out[n + rl] = '\0';
    return (long)(n + rl);
}

/* A root or alias with variables: the file it names, written into the request's file
 * room, beneath the anchor (the directory the value's literal text begins with, whose
 * descriptor the request holds). nginx opens whatever the expansion says, so a `..` that a
 * Host, an argument or a capture brings leads it anywhere; here a file whose name holds a
 * dot segment or a NUL is no file (404), and open_beneath keeps the rest, symlinks
 * included, beneath the anchor. Under an alias in a prefix location, what follows the
 * prefix must start a new segment, as for an alias without variables. */
static bool value_file(struct request *req)
{
    const struct module_level *l = req->level;
    char *room = req->file_room;
    size_t root_len;
    if (!room)
        return false;
    long n = map_uri(req, room, REQUEST_FILE_MAX, &root_len);
    if (n < 0 || (size_t)n < l->root_anchor_len)
        return false;
    if (l->alias && !l->alias_whole && (size_t)n > root_len && root_len &&
        room[root_len - 1] != '/' && room[root_len] != '/')
        return false; /* `location /d { alias /x/$v; }` and /d../etc */
    char *file = room + l->root_anchor_len;
    size_t fl = (size_t)n - l->root_anchor_len;
    if (fl == 0) {
        file = room;
        file[0] = '/';
        file[1] = '\0';
        fl = 1;
    }
    size_t k = 1; /* "/srv/" and "/a": one '/' of two, as the kernel reads "//" */
    for (size_t i = 1; i < fl; i++)
        if (file[i] != '/' || file[k - 1] != '/')
            file[k++] = file[i];
    file[k] = '\0';
    fl = k;
    if (!clean_path(file, fl))
        return false;
    req->file = file;
    req->file_len = fl;
    return true;
}

/* The file the request's block names, for the handler to open beneath req->root_fd:
 * the path itself under a root without variables, else alias_file's or value_file's.
 * False: none (404). */
static bool level_file(struct request *req)
{
    const struct module_level *l = req->level;
    if (l->root_value)
        return value_file(req);
    if (l->alias)
        return alias_file(req);
    req->file = req->path;
    req->file_len = req->path_len;
    /* A path a rewrite made with "//" ("$1/index.html" of "/"): the file is what the
     * kernel reads, one '/' of each run, as for nginx; $uri keeps it as it is. */
    if (req->file_room && req->path_len < REQUEST_FILE_MAX &&
        has_double_slash(req->path, req->path_len)) {
        memcpy(req->file_room, req->path, req->path_len);
        req->file = req->file_room;
        req->file_len = merge_slashes(req->file_room, req->path_len);
    }
    return true;
}

/* $document_root, $realpath_root, $request_filename (vars.h), for the block the request
 * is in now. */
static long route_path_var(const void *request, int which, char *out, size_t cap)
{
    const struct request *req = request;
    if (!req->level)
        return 0;
    if (which == VARS_SECURE_LINK || which == VARS_SECURE_LINK_EXPIRES) {
        struct vars_source src;
        module_vars_source(req, &src);
        return secure_link_value(&req->level->secure_link, req, &src,
                                 which == VARS_SECURE_LINK_EXPIRES, out, cap);
    }
    if (which == VARS_INVALID_REFERER) {
        /* kept for the request (a cache of the request's own, as nginx's) */
        unsigned char *kept = (unsigned char *)&req->invalid_referer;
        if (!*kept)
            *kept = referer_valid(req->level->referers, req->http) ? 1 : 2;
        if (*kept == 1)
            return 0;
        if (cap < 2)
            return -1;
        memcpy(out, "1", 2);
        return 1;
    }
    if (which == VARS_FASTCGI_SCRIPT_NAME || which == VARS_FASTCGI_PATH_INFO)
        return module_fastcgi_var(req, which == VARS_FASTCGI_PATH_INFO ? FASTCGI_PATH_INFO
                                                                        : FASTCGI_SCRIPT_NAME,
                                  out, cap);
    size_t root_len;
    char buf[REQUEST_FILE_MAX];
    long n = map_uri(req, buf, sizeof(buf), &root_len);
    if (n < 0)
        return 0;
    if (which == VARS_REQUEST_FILENAME) {
        if ((size_t)n >= cap)
            return -1;
        memcpy(out, buf, (size_t)n + 1);
        return n;
    }
    buf[root_len] = '\0';
    if (which == VARS_REALPATH_ROOT) {
        char real[PATH_MAX];
        if (!realpath(buf, real))
            return 0;
        root_len = strlen(real);
        memcpy(buf, real, root_len + 1);
    }
    if (root_len >= cap)
        return -1;
    memcpy(out, buf, root_len + 1);
    return (long)root_len;
}

/* Keep the captures' bytes through a change of path, as nginx's keep the text they were
 * taken from: they move to the end of the path's buffer, above `floor` (where the new path
 * and its arguments end at most). Returns where they begin (REQUEST_PATH_MAX: nothing
 * kept); the captures are dropped when they do not fit. */
static size_t keep_captures(struct request *req, size_t floor)
{
    struct regex_captures *c = &req->captures;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (unsigned i = 0; i < 2 * c->n; i += 2)
        if (c->ov[i] != UINT32_MAX) {
            lo = c->ov[i] < lo ? c->ov[i] : lo;
            hi = c->ov[i + 1] > hi ? c->ov[i + 1] : hi;
        }
    if (c->n == 0 || lo > hi || hi - lo > REQUEST_PATH_MAX - floor) {
        c->n = 0;
        return REQUEST_PATH_MAX;
    }
    size_t at = REQUEST_PATH_MAX - (hi - lo);
    memmove(req->path + at, c->subject + lo, hi - lo);
    c->subject = req->path + at;
    for (unsigned i = 0; i < 2 * c->n; i++)
        if (c->ov[i] != UINT32_MAX)
            c->ov[i] -= lo;
    return at;
}

/* Make `uri` (an expanded value) the request's path; "?args" in it replace the request's
 * arguments, as nginx's internal redirects do (without them the request's own stay). The
 * arguments are kept after the path in its buffer, any byte that is not visible ASCII (or
 * is '#') %XX-encoded: they go into a Location and a CGI environment; the captures of the
 * location, at the buffer's end. False if the path is not clean or the two do not fit. */
static bool set_path(struct request *req, const char *uri, size_t n)
{
    const char *q = memchr(uri, '?', n);
    size_t pl = q ? (size_t)(q - uri) : n;
    if (pl >= REQUEST_PATH_MAX || !clean_path(uri, pl))
        return false;
    /* Above the new path and its arguments (encoded, at most three bytes for one); without
     * new arguments, above the request's own when they are in this buffer. */
    size_t floor = pl + 1 + (q ? 3 * (n - pl - 1) : 0);
    const char *args_end = req->args.p ? req->args.p + req->args.len : NULL;
    if (!q && args_end > req->path && args_end <= req->path + REQUEST_PATH_MAX &&
        (size_t)(args_end - req->path) > floor)
        floor = (size_t)(args_end - req->path);
    size_t top = floor < REQUEST_PATH_MAX ? keep_captures(req, floor) : REQUEST_PATH_MAX;
    if (top == REQUEST_PATH_MAX)
        req->captures.n = 0;
    memmove(req->path, uri, pl);
    req->path[pl] = '\0';
    req->path_len = pl;
    if (!q)
        return true;
    static const char hex[] = "0123456789ABCDEF";
    char *out = req->path + pl + 1;
    size_t room = top - pl - 1, k = 0;
    for (const char *p = q + 1; p < uri + n; p++) {
        unsigned char c = (unsigned char)*p;
        bool plain = c > 0x20 && c < 0x7f && c != '#';
        if (k + (plain ? 1 : 3) > room)
            return false;
        if (plain) {
            out[k++] = (char)c;
        } else {
            out[k++] = '%';
            out[k++] = hex[c >> 4];
            out[k++] = hex[c & 15];
        }
    }
    req->args = (struct http_slice){out, k};
    req->has_args = true;
    return true;
}

bool module_route_set_path(struct request *req, const char *uri, size_t n)
{
    return set_path(req, uri, n);
}

/* A copy of req to try a candidate file on: the room of its `set` values past those in
 * use (most of a kilobyte, never read) is left out. */
static_assert(sizeof(struct request) - (offsetof(struct request, vars) +
                                        sizeof(struct request_vars)) < _Alignof(struct request),
              "probe_of copies up to the set values' room: they end the request");

static void probe_of(struct request *probe, const struct request *req)
{
    memcpy(probe, req, offsetof(struct request, vars.buf) + req->vars.used);
}

enum try_result { TRY_FOUND, TRY_STATUS, TRY_NAMED, TRY_REDIRECT, TRY_FAILED };

/* `try_files`: the first candidate that exists becomes the path (*status unchanged);
 * else the last argument: =CODE (*status), @NAME (*named), or a URI (the path, to search
 * again). */
static enum try_result try_files(const struct module_chain *c, struct request *req,
                                 const struct module_level *l,
                                 const struct site_location **named, int *status)
{
    struct vars_source src;
    module_vars_source(req, &src);
    char buf[REQUEST_PATH_MAX];
    for (unsigned i = 0; i + 1 < l->n_try; i++) {
        long n = vars_expand(l->try_files[i], &src, buf, sizeof(buf));
        /* Beneath an alias in a regex location the candidate follows the alias, as
         * nginx's: "" names the alias itself. */
        bool whole = l->alias_whole;
        if (n < 0 || (n == 0 && !whole) || (size_t)n >= sizeof(buf))
            continue;
        bool dir = l->try_dir[i]; /* written with a trailing '/', which was taken off */
        buf[n] = '\0';
        n = (long)merge_slashes(buf, (size_t)n); /* `$uri/index.html` of "/" (nginx's file
                                                    system takes "//" as "/") */
        if (n && !clean_path(buf, (size_t)n))
            continue;
        /* The candidate's file, beneath the root or the alias, as the handler will open it. */
        struct request probe;
        probe_of(&probe, req);
        probe.path = buf;
        probe.path_len = (size_t)n;
        probe.alias_add_path = whole && n;
        use_level(&probe, l);
        if (!level_file(&probe))
            continue;
        if (!file_exists(c, &probe, probe.file, dir))
            continue;
        bool same = (size_t)n == req->path_len && memcmp(buf, req->path, (size_t)n) == 0;
        bool keep = whole && (n == 0 || dir); /* nginx: the path stays, the alias names */
        if (!same && !keep && !set_path(req, buf, (size_t)n))
            return TRY_FAILED;
        req->alias_add_path = whole && !keep;
        use_level(req, l);
        if (!level_file(req))
            return TRY_FAILED;
        return TRY_FOUND;
    }
    long n = vars_expand(l->try_files[l->n_try - 1], &src, buf, sizeof(buf) - 1);
    if (n <= 0 || (size_t)n >= sizeof(buf) - 1)
        return TRY_FAILED;
    buf[n] = '\0';
    if (buf[0] == '=') {
        *status = 0;
        for (long i = 1; i < n; i++)
            *status = *status * 10 + (buf[i] - '0');
        return TRY_STATUS;
    }
    if (buf[0] == '@') {
        *named = req->site ? site_named_location(req->site, buf) : NULL;
        return *named ? TRY_NAMED : TRY_FAILED;
    }
    return set_path(req, buf, (size_t)n) ? TRY_REDIRECT : TRY_FAILED;
}

static bool prefix_matches(const struct module_mount *m, const char *path, size_t len);

/* `index`, as nginx's index module: a GET, HEAD or POST for a directory ("/d/") of a
 * location without a handler (its own, or a top-level `handler PREFIX`) redirects
 * internally to the first index name whose file exists ("/d/index.html"), or to an
 * absolute one ("/index.html") as it is, and the location is searched again. Names may
 * hold variables. False: no redirect (the handler answers the directory: a listing, 403
 * or 404). */
static bool index_redirect(const struct module_chain *c, struct request *req,
                           const struct module_level *l)
{
    enum http_method m = req->http->method;
    if (!req->path_len || req->path[req->path_len - 1] != '/' || l->mount ||
        (m != HTTP_METHOD_GET && m != HTTP_METHOD_HEAD && m != HTTP_METHOD_POST))
        return false;
    for (unsigned i = 0; i < c->n_mounts; i++)
        if (!c->mounts[i].level_only && prefix_matches(&c->mounts[i], req->path, req->path_len))
            return false; /* the handler answers the directory's own path */
    struct vars_source src;
    module_vars_source(req, &src);
    char buf[REQUEST_PATH_MAX];
    for (unsigned i = 0; i < l->n_index; i++) {
        const char *name = l->index[i];
        size_t nl = strlen(name);
        char expanded[256];
        if (l->index_values[i]) {
            long n = vars_expand(l->index_values[i], &src, expanded, sizeof(expanded));
            if (n <= 0 || (size_t)n >= sizeof(expanded))
                continue;
            name = expanded, nl = (size_t)n;
        }
        if (name[0] == '/')
            return set_path(req, name, nl);
        if (memchr(name, '/', nl) || req->path_len + nl >= sizeof(buf))
            continue;
        memcpy(buf, req->path, req->path_len);
        memcpy(buf + req->path_len, name, nl);
        buf[req->path_len + nl] = '\0';
        struct request probe;
        probe_of(&probe, req);
        probe.path = buf;
        probe.file = buf;
        probe.path_len = probe.file_len = req->path_len + nl;
        if (l->alias && !alias_file(&probe))
            continue;
        if (file_exists(c, &probe, probe.file, false))
            return set_path(req, buf, probe.path_len);
    }
    return false;
}

/* The top level's settings answer a request the sites do not place (no server blocks,
 * or an address none of them listens on: a class's, or one given by -l). */
static const struct site_server *server_for(const struct module_chain *c,
                                            struct request *req)
{
    const struct site_set *set = c->sites;
    if (!set || !set->n_servers)
        return NULL;
    const struct site_server *s = site_server_find(set, req->local, req->http->host,
                                                   &req->server_captures);
    if (!s && set->n_addrs) /* listening where no server does: the first address's */
        s = set->addrs[0].default_server ? set->addrs[0].default_server
                                         : set->addrs[0].servers[0];
    return s;
}

/* --- the location memo -------------------------------------------------------------------
 *
 * A server with regex locations pays a regex_match for each, in file order, for most
 * paths. A thread remembers its last answers: (build, server, path) -> location, in a
 * small direct-mapped table of its own, so that a path seen again costs a hash and a
 * comparison, and one match more when the location's regex has groups (the captures are
 * the request's own). The build's id is never reused, so an answer of an older
 * configuration is never taken for a newer one's. Paths longer than a slot, and paths a
 * regex could not decide (over its limits), are not remembered. Allocated on first use
 * (never static TLS: thread_per_connection's stacks are small) and freed when the thread
 * ends. */
#define MEMO_SLOTS 64
#define MEMO_PATH 112

struct memo_slot {
    uint64_t build;
    const struct site_server *server;
    const struct site_location *loc;
    uint32_t len;
    char path[MEMO_PATH];
};

static pthread_key_t memo_key;
static pthread_once_t memo_once = PTHREAD_ONCE_INIT;
static _Thread_local struct memo_slot *memo;

static void memo_key_make(void)
{
    pthread_key_create(&memo_key, free);
}

static struct memo_slot *memo_table(void)
{
    if (!memo) {
        pthread_once(&memo_once, memo_key_make);
        memo = calloc(MEMO_SLOTS, sizeof(*memo));
        if (memo)
            pthread_setspecific(memo_key, memo);
    }
    return memo;
}

/* The location for the request's path, and its captures in req->captures. -1: a regex went
 * over its limits (logged): the request is answered 500. */
static int location_for(const struct module_chain *c, struct request *req,
                        const struct site_server *s, const struct site_location **out)
{
    const char *path = req->path;
    size_t len = req->path_len;
    char why[128] = "";
    struct memo_slot *t, *m = NULL;
    if (s->n_regex && len < MEMO_PATH && (t = memo_table())) {
        uint32_t h = 2166136261u; /* FNV-1a */
        for (size_t i = 0; i < len; i++)
            h = (h ^ (unsigned char)path[i]) * 16777619u;
        m = &t[(h ^ (uint32_t)(uintptr_t)s) % MEMO_SLOTS];
        if (m->build == c->id && m->server == s && m->len == len &&
            memcmp(m->path, path, len) == 0) {
            const struct site_location *loc = *out = m->loc;
            req->captures.n = 0;
            if (!loc || loc->re.n_groups == 0) /* not a regex, or one without groups */
                return 0;
            if (regex_match(&loc->re, path, len, &req->captures, why, sizeof(why)) ==
                REGEX_MATCH)
                return 0;
            m = NULL; /* the remembered answer cannot be repeated: search again */
        }
    }
    if (site_location_find(s, path, len, out, &req->captures, why, sizeof(why)) < 0) {
        log_error("a regex location over its limits (%s) for \"%.*s\": 500", why,
                  (int)(len > 200 ? 200 : len), path);
        return -1;
    }
    if (m) {
        m->build = c->id;
        m->server = s;
        m->loc = *out;
        m->len = (uint32_t)len;
        memcpy(m->path, path, len);
    }
    return 0;
}

/* nginx's auto_redirect: /api, which no exact or prefix location names as it is, while
 * `location /api/` is answered by an upstream, is redirected there (before the regexes:
 * nginx's prefix search ends with it). */
static bool slash_redirect(struct request *req, const struct site_server *s,
                           const struct site_location *loc)
{
    if (loc && loc->match != SITE_REGEX && loc->match != SITE_REGEX_ICASE &&
        loc->pattern_len == req->path_len)
        return false; /* the path itself is a location */
    const struct site_location *to = site_location_slashed(s, req->path, req->path_len);
    if (!to || !to->level->slash_redirect)
        return false;
    /* answered as that location's, as nginx's search ends in it: its add_header, expires */
    use_level(req, to->level);
    req->first_level = to->level;
    req->return_status = 301;
    req->return_text = NULL;
    req->slash_to = to->pattern;
    return true;
}

/* A location search found l: a Content-Length must fit its client_max_body_size too. The
 * server's `return` or rewrite answers before any search, and a named location is reached
 * without one, so neither counts (nginx's find-config phase). */
static void note_body_limit(struct request *req, const struct module_level *l)
{
    uint64_t max = l->limits.max_body_size;
    if (max != 0 && (req->body_max == 0 || max < req->body_max))
        req->body_max = max;
}

/* Find the location for the request's path (or take `named`), apply its `return` and
 * `try_files`; loop on internal redirects. Returns 0 (req->level set), or a status. */
static int place(const struct module_chain *c, struct request *req,
                 const struct site_location *named)
{
    const struct site_server *s = req->site;
    for (unsigned hops = 0; hops <= ROUTE_REDIRECTS_MAX; hops++) {
        const struct site_location *loc = named;
        req->alias_add_path = false;
        if (!loc && location_for(c, req, s, &loc) < 0)
            return 500;
        bool searched = !named;
        named = NULL;
        const struct module_level *l = loc ? loc->level : s->level;
        /* limit_except: a method it does not name is the block's, as nginx's implicit
         * location (the location's rewrite, return and try_files are not its). */
        if (l->limit_except && req->http &&
            !(l->limit_except_lets & (1u << req->http->method)))
            l = l->limit_except;
        use_level(req, l);
        if (!req->first_level)
            req->first_level = l;
        if (searched)
            note_body_limit(req, l);
        if (searched && slash_redirect(req, s, loc))
            return 0;
        if (l->internal && hops == 0 && !req->internal) { /* named by the request itself */
            req->return_status = 404;
            req->return_text = NULL;
            return 0;
        }
        /* A location's list; a server's ran before the search, and runs not again where
         * no location matches (nginx skips the server's null location). */
        if (loc && l->rewrite) {
            switch (rewrite_run(l->rewrite, req, true, l->return_status, l->return_text)) {
            case REWRITE_GO_ON: /* the path may be new; a true `if` gave its settings */
                l = req->level;
                use_level(req, l);
                break;
            case REWRITE_SEARCH: req->first_level = NULL; continue;
            case REWRITE_RETURN: return 0;
            case REWRITE_ERROR: return 500;
            }
        }
        if (!level_file(req)) {
            req->try_status = 404; /* answered after access, with its error_page */
            return 0;
        }
        if (l->return_status && !l->rewrite) {
            req->return_status = l->return_status;
            req->return_text = l->return_text;
            return 0;
        }
        if (!l->n_try) {
            if (index_redirect(c, req, l))
                continue;
            return 0;
        }
        int status = 0;
        switch (try_files(c, req, l, &named, &status)) {
        case TRY_FOUND:
            if (index_redirect(c, req, l))
                continue;
            return 0;
        case TRY_STATUS: req->try_status = status; return 0;
        case TRY_NAMED: continue;
        case TRY_REDIRECT: continue;
        case TRY_FAILED: return 500;
        }
    }
    req->try_status = 500; /* a redirect loop: answered after access (nginx's try_files
                              runs after its access phase) */
    return 0;
}

/* The mount the path falls under, among the top-level ones (`handler PREFIX NAME;`): the
 * longest prefix. */
static bool prefix_matches(const struct module_mount *m, const char *path, size_t len)
{
    if (len < m->prefix_len || memcmp(path, m->prefix, m->prefix_len) != 0)
        return false;
    return len == m->prefix_len || m->prefix[m->prefix_len - 1] == '/' ||
           path[m->prefix_len] == '/';
}

static void find_mount(const struct module_chain *c, struct request *req)
{
    if (req->level && req->level->mount)
        return; /* the location's own handler */
    req->mount = NULL;
    for (unsigned i = 0; i < c->n_mounts; i++) {
        const struct module_mount *m = &c->mounts[i];
        if (!m->level_only && prefix_matches(m, req->path, req->path_len) &&
            (!req->mount || m->prefix_len > req->mount->prefix_len))
            req->mount = m;
    }
}

static int route_from(const struct module_chain *c, struct request *req,
                      const struct site_location *named)
{
    int status = 0;
    const struct module_level *sl = req->site ? req->site->level : NULL;
    enum rewrite_result rw = REWRITE_GO_ON;
    if (sl && sl->rewrite && !named) { /* nginx's server rewrite phase, in its settings */
        use_level(req, sl);
        rw = rewrite_run(sl->rewrite, req, false, sl->return_status, sl->return_text);
    }
    if (rw == REWRITE_ERROR) {
        use_level(req, sl);
        req->first_level = req->level;
        status = 500;
    } else if (rw == REWRITE_RETURN) {
        use_level(req, sl);
        req->first_level = req->level;
    } else if (sl && sl->rewrite) {
        status = place(c, req, named);
    } else if (!req->site) {
        use_level(req, &c->levels[0]);
        req->first_level = req->level;
        note_body_limit(req, req->level);
        if (!level_file(req)) /* a root with variables that names no file */
            req->try_status = 404;
    } else if (req->site->level->return_status && !named) {
        use_level(req, req->site->level); /* the server's `return`: before any location */
        req->first_level = req->level;
        req->return_status = req->level->return_status;
        req->return_text = req->level->return_text;
    } else {
        status = place(c, req, named);
    }
    for (unsigned k = 0; k < c->n_rewrite_mods; k++) {
        unsigned i = c->rewrite_mods[k];
        c->mods[i]->rewrite(c->state[i], req);
    }
    find_mount(c, req);
    return status;
}

unsigned module_chain_class(const struct module_chain *c, const struct sockaddr *local,
                            struct http_slice host, const char *path, size_t len)
{
    const struct site_set *set = c->sites;
    if (!set || !set->n_servers)
        return 0;
    const struct site_server *s = site_server_for(set, local, host);
    if (!s)
        return 0;
    const struct site_location *loc = site_location_for(s, path, len);
    return loc ? loc->level->class_index : s->level->class_index;
}

const struct config_limits *module_chain_default_limits(const struct module_chain *c,
                                                        const struct sockaddr *local)
{
    const struct site_addr *a = c->sites ? site_addr_for(c->sites, local) : NULL;
    if (!a && c->sites && c->sites->n_addrs)
        a = &c->sites->addrs[0];
    if (!a || !a->n_servers)
        return &c->levels[0].limits;
    return &(a->default_server ? a->default_server : a->servers[0])->level->limits;
}

void module_set_peer(struct request *req, const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET6)
        req->real_peer.in6 = *(const struct sockaddr_in6 *)(const void *)sa;
    else
        req->real_peer.in = *(const struct sockaddr_in *)(const void *)sa;
    req->peer = &req->real_peer.sa;
    req->peer_replaced = true;
}

/* The post_read hooks some block asked for, with the settings of level l (nginx's post-read
 * phase with the server's, its preaccess phase with the location's). False: one failed. */
static bool post_read(const struct module_chain *c, struct request *req,
                      const struct module_level *l)
{
    const struct module_level *was = req->level;
    req->level = l;
    bool ok = true;
    for (unsigned k = 0; k < c->n_post_read_mods && ok; k++) {
        unsigned i = c->post_read_mods[k];
        ok = c->mods[i]->post_read(c->state[i], req) != MOD_ERROR;
    }
    req->level = was;
    return ok;
}

int module_chain_route(const struct module_chain *c, struct request *req)
{
    req->site = server_for(c, req);
    /* The client certificate, checked as nginx does once the request's head is read (the
     * handshake accepted whatever came): 495 or 496, answered as a 400 by the server's
     * settings (its add_header ... always, its error_page), before any location. */
    struct http_slice host = req->http ? req->http->host : (struct http_slice){NULL, 0};
    int refused = req->tls ? tls_client_refused(req->tls, req->site, host) : 0;
    if (refused) {
        use_level(req, req->site ? req->site->level : &c->levels[0]);
        req->first_level = req->level;
        req->return_status = refused;
        req->return_text = NULL;
        return 0;
    }
    if (c->n_post_read_mods &&
        !post_read(c, req, req->site ? req->site->level : &c->levels[0]))
        return 500;
    return route_from(c, req, NULL);
}

/* --- redirects ---------------------------------------------------------------------------- */

/* The host a redirect names: the server's first name with server_name_in_redirect on;
 * else the request's Host (validated by the parser as an authority), lowercased, without
 * port or trailing dot; else (no Host) the server's first name; else, or when the Host is
 * empty without its dot, the address the connection came in on, as nginx's. */
static size_t redirect_host(const struct request *req, char *out, size_t cap)
{
    struct http_slice h = req->http ? req->http->host : (struct http_slice){NULL, 0};
    const struct site_server *s = req->site;
    bool by_name = req->level && req->level->name_in_redirect;
    size_t n = 0;
    if (h.len && !by_name) {
        const char *end = h.p[0] == '[' ? memchr(h.p, ']', h.len) : NULL;
        const char *colon = memchr(end ? end : h.p, ':', h.len - (size_t)((end ? end : h.p) - h.p));
        n = colon ? (size_t)(colon - h.p) : h.len;
        if (n && h.p[n - 1] == '.')
            n--;
        if (n >= cap)
            return 0;
        for (size_t i = 0; i < n; i++)
            out[i] = (char)(h.p[i] >= 'A' && h.p[i] <= 'Z' ? h.p[i] + 32 : h.p[i]);
        if (n)
            return n;
    }
    if ((!h.len || by_name) && s && s->n_names && s->names[0].kind == SITE_NAME_EXACT &&
        s->names[0].len && s->names[0].len < cap) {
        memcpy(out, s->names[0].text, s->names[0].len);
        return s->names[0].len;
    }
    char ip[INET6_ADDRSTRLEN];
    const struct sockaddr *sa = req->local;
    if (sa && sa->sa_family == AF_INET6 &&
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, ip,
                  sizeof(ip))) {
        int w = snprintf(out, cap, "[%s]", ip);
        return w > 0 && (size_t)w < cap ? (size_t)w : 0;
    }
    if (sa && sa->sa_family == AF_INET &&
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, ip,
                  sizeof(ip))) {
        int w = snprintf(out, cap, "%s", ip);
        return w > 0 && (size_t)w < cap ? (size_t)w : 0;
    }
    return 0;
}

static unsigned local_port(const struct sockaddr *sa)
{
    if (sa && sa->sa_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
    if (sa && sa->sa_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
    return 0;
}

size_t module_redirect_base(const struct request *req, char *out, size_t cap)
{
    bool absolute = req->level ? !req->level->relative_redirect
                               : req->cfg && req->cfg->absolute_redirect;
    char host[512];
    size_t hl = absolute ? redirect_host(req, host, sizeof(host)) : 0;
    if (hl == 0)
        return 0;
    if (hl + 8 + 7 >= cap) /* "https://" HOST ":65535" and the NUL */
        return 0;
    size_t sl = req->https ? 8 : 7;
    memcpy(out, req->https ? "https://" : "http://", sl);
    memcpy(out + sl, host, hl);
    char *p = out + sl + hl;
    unsigned port = req->level && req->level->no_port_in_redirect ? 0 : local_port(req->local);
    if (port && port != (req->https ? 443 : 80)) {
        *p++ = ':';
        p = http_fmt_u64(p, port);
    }
    *p = '\0';
    return (size_t)(p - out);
}

void module_redirect(const struct request *req, struct response *resp, int status,
                     const char *location)
{
    resp_error(resp, status);
    bool absolute = req->level ? !req->level->relative_redirect
                               : req->cfg && req->cfg->absolute_redirect;
    if (location[0] != '/' || !absolute) {
        resp_header(resp, "Location", location);
        return;
    }
    char host[512];
    size_t hl = redirect_host(req, host, sizeof(host));
    if (hl == 0) {
        resp_header(resp, "Location", location);
        return;
    }
    host[hl] = '\0';
    unsigned port = req->level && req->level->no_port_in_redirect ? 0 : local_port(req->local);
    char port_text[8] = "";
    if (port && port != (req->https ? 443 : 80))
        snprintf(port_text, sizeof(port_text), ":%u", port);
    char url[REQUEST_PATH_MAX + 600];
    int n = snprintf(url, sizeof(url), "%s://%s%s%s", req->https ? "https" : "http", host,
                     port_text, location);
    if (n < 0 || (size_t)n >= sizeof(url))
        resp_error(resp, 414);
    else
        resp_header(resp, "Location", url);
}

/* --- answering ---------------------------------------------------------------------------- */

static bool call_handle(const struct module_chain *c, unsigned i, const struct request *req,
                        struct response *resp)
{
    enum mod_result r = c->mods[i]->handle(c->state[i], req, resp);
    if (r == MOD_ERROR)
        resp_error(resp, 500);
    return r != MOD_DECLINED;
}

/* The access hooks with the settings of level l: true if one answered (a refusal). */
static bool refused(const struct module_chain *c, struct request *req,
                    const struct module_level *l, struct response *resp)
{
    const struct module_level *was = req->level;
    req->level = l;
    bool answered = false;
    for (unsigned k = 0; k < c->n_access_mods && !answered; k++) {
        unsigned i = c->access_mods[k];
        enum mod_result r = c->mods[i]->access(c->state[i], req, resp);
        if (r == MOD_ERROR)
            resp_error(resp, 500);
        answered = r != MOD_DECLINED;
    }
    req->level = was;
    return answered;
}

/* The preaccess hooks, once per request, with the settings of the block the path first
 * matched: true if one answered (a limit's refusal, to which error_page applies). */
static bool limited(const struct module_chain *c, struct request *req, struct response *resp)
{
    req->marks.preaccess_done = true;
    const struct module_level *was = req->level;
    req->level = req->first_level;
    bool answered = false;
    for (unsigned i = 0; i < c->n && !answered; i++) {
        if (!c->mods[i]->preaccess)
            continue;
        enum mod_result r = c->mods[i]->preaccess(c->state[i], req, resp);
        if (r == MOD_ERROR)
            resp_error(resp, 500);
        if (r == MOD_DELAY) /* the core puts the request aside (module.h) */
            resp->delay_ms = req->marks.may_delay && req->marks.delay_ms ? req->marks.delay_ms
                                                                         : 0;
        answered = r != MOD_DECLINED && (r != MOD_DELAY || resp->delay_ms);
    }
    req->level = was;
    return answered;
}

/* A rewrite's redirect to url[0, n): the request's arguments after '?', or after '&' when
 * the URL has its own, as nginx's. Returns the new length, or -1 if it does not fit cap
 * (with a NUL). */
static long redirect_args(const struct request *req, char *url, size_t n, size_t cap)
{
    if (!req->has_args || !req->args.len)
        return (long)n;
    if (n + 1 + req->args.len >= cap)
        return -1;
    url[n] = memchr(url, '?', n) ? '&' : '?';
    memcpy(url + n + 1, req->args.p, req->args.len);
    return (long)(n + 1 + req->args.len);
}

/* `return CODE [TEXT|URL]`. */
static void answer_return(struct request *req, struct response *resp)
{
    int status = req->return_status;
    if (status == 444) { /* nginx's: close the connection, answer nothing */
        resp_start(resp, 444);
        resp_drop(resp);
        return;
    }
    const struct vars_value *v = req->return_text;
    char buf[4096];
    long n = 0;
    if (v) {
        struct vars_source src;
        module_vars_source(req, &src);
        n = vars_expand(v, &src, buf, sizeof(buf) - 1);
        if (n < 0 || (size_t)n >= sizeof(buf) - 1 ||
            (req->return_args && (n = redirect_args(req, buf, (size_t)n, sizeof(buf))) < 0)) {
            resp_error(resp, 500);
            return;
        }
        buf[n] = '\0';
    }
    if (req->slash_to) { /* the location's name, as written: percent-encoded, as nginx's */
        struct strbuf b = STRBUF_INIT(sizeof(buf) - 1);
        strbuf_url_path(&b, req->slash_to, strlen(req->slash_to));
        if (req->args.len) {
            strbuf_add(&b, "?", 1);
            strbuf_add(&b, req->args.p, req->args.len);
        }
        if (b.failed) {
            resp_error(resp, 414);
        } else {
            memcpy(buf, b.p, b.len);
            buf[b.len] = '\0';
            module_redirect(req, resp, status, buf);
        }
        free(b.p);
        return;
    }
    bool redirect = status == 301 || status == 302 || status == 303 || status == 307 ||
                    status == 308;
    if (redirect) {
        if (v)
            module_redirect(req, resp, status, buf);
        else
            resp_error(resp, status);
        return;
    }
    if (!v && (status < 200 || status >= 300 || status == 204)) {
        resp_error(resp, status);
        return;
    }
    /* a text, or none for a 2xx: as nginx, `return 200;` is an empty body */
    resp_start(resp, status);
    if (!resp->no_length) {
        /* The block's default_type, as nginx types a returned text. */
        resp_header(resp, "Content-Type", module_content_type(req, "", -1, NULL));
        resp_body_copy(resp, buf, (size_t)n);
    }
}

/* Answer the placed request. Returns true when the access rules refused it (resp holds
 * the 401 or 403): an error page keeps that refusal as its answer, as nginx does. */
static bool handle(const struct module_chain *c, struct request *req, struct response *resp)
{
    if (req->return_status) {
        answer_return(req, resp);
        return false;
    }
    if (c->n_post_read_mods && !post_read(c, req, req->level)) {
        resp_error(resp, 500);
        return false;
    }
    if (!req->marks.preaccess_done && limited(c, req, resp))
        return false;
    if (refused(c, req, req->first_level, resp))
        return true;
    if (req->level != req->first_level && refused(c, req, req->level, resp))
        return true;
    if (req->try_status) {
        resp_error(resp, req->try_status);
        return false;
    }
    if (!req->mount && req->root_fd < 0) { /* a root or alias missing at load */
        module_log(req, LOG_LEVEL_ERROR, "\"%.*s\": %s \"%s\" does not exist: 404",
                   (int)(req->path_len > 200 ? 200 : req->path_len), req->path,
                   req->level->alias ? "alias" : "root", req->root_real);
        resp_error(resp, 404);
        return false;
    }
    if (req->mount) {
        /* Only the owner: a handler that declines must not let static files serve, say,
         * a CGI script's source. */
        unsigned i = req->mount->module;
        if (!(c->mods[i]->handle && call_handle(c, i, req, resp)))
            resp_error(resp, 404);
        return false;
    }
    for (unsigned i = 0; i < c->n; i++)
        if (c->mods[i]->handle && !c->has_mounts[i] && call_handle(c, i, req, resp))
            return false;
    resp_error(resp, 404);
    return false;
}

static const struct level_error_page *error_page_for(const struct module_level *l, int status)
{
    for (unsigned i = 0; l && i < l->n_error_pages; i++)
        if (l->error_pages[i].status == status)
            return &l->error_pages[i];
    return NULL;
}

/* Answer with the error page p for the status of resp: an internal redirect, a GET. */
static void answer_error_page(const struct module_chain *c, struct request *req,
                              struct response *resp, const struct level_error_page *p)
{
    bool own = p->answer == LEVEL_ANSWER_OWN;
    int status = resp->status, answer = p->answer > 0 ? p->answer : status;
    char buf[REQUEST_PATH_MAX];
    struct vars_source src;
    module_vars_source(req, &src);
    long n = vars_expand(p->uri, &src, buf, sizeof(buf) - 1);
    if (n <= 0 || (size_t)n >= sizeof(buf) - 1)
        return; /* the plain error stays */
    buf[n] = '\0';
    /* The challenge of a 401 stays, as nginx keeps it: without it no browser asks. */
    char challenge[640] = "";
    size_t cl;
    const char *ch = resp->status == 401 ? resp_header_get(resp, "WWW-Authenticate", &cl) : NULL;
    if (ch && cl < sizeof(challenge)) {
        memcpy(challenge, ch, cl);
        challenge[cl] = '\0';
    }
    resp_file_close(resp);
    resp_body_clear(resp);
    if (buf[0] != '/' && buf[0] != '@') { /* a URL: a redirect, 302 unless =ANSWER says */
        resp_error(resp, p->answer > 0 && p->answer != status ? p->answer : 302);
        resp_header(resp, "Location", buf);
        return;
    }
    /* The error page is fetched as a GET (HEAD stays HEAD), without conditions or ranges,
     * and its own errors are not redirected again: the plain error, or the refusal of its
     * location's access rules (a 401 with that location's challenge, a 403), as nginx. */
    struct http_request h = *req->http;
    if (h.method != HTTP_METHOD_HEAD)
        h.method = HTTP_METHOD_GET;
    h.if_none_match.len = h.if_modified_since.len = h.if_match.len = 0;
    h.if_unmodified_since.len = h.range.len = h.if_range.len = 0;
    h.framing = HTTP_BODY_NONE;
    struct request r = *req;
    r.http = &h;
    r.first_level = NULL;
    r.return_status = r.try_status = 0;
    r.return_text = NULL;
    r.return_args = false;
    r.slash_to = NULL;
    r.internal = true;
    if (req->body) {
        r.read_body = req->body;
        r.read_body_len = req->body_len;
    }
    r.body = NULL;
    r.body_len = 0;
    const struct site_location *named = NULL;
    int rc = 0;
    bool page_refused = false; /* the page's own access rules answered: their 401 or 403 */
    bool page_redirects = false; /* the page answered a redirect: it goes as it is */
    int page_status = 0;         /* the page answered an error of its own: this one */
    if (buf[0] == '@') {
        named = req->site ? site_named_location(req->site, buf) : NULL;
        rc = named ? 0 : 404;
    } else if (!set_path(&r, buf, (size_t)n)) {
        rc = 500;
    }
    if (!rc)
        rc = route_from(c, &r, named);
    if (!rc) {
        page_refused = handle(c, &r, resp);
        /* A redirect the page answers (its `return 302 URL`, a directory's missing slash)
         * is sent with its own status and Location, as nginx sends a special response of
         * the page's (the first request's Location is gone with its answer). */
        size_t ll;
        page_redirects = !page_refused && !resp->streaming && resp->status >= 300 &&
                         resp->status < 400 && resp_header_get(resp, "Location", &ll);
        /* The page's own error (its `return 405`, its file missing) is the answer, as
         * nginx's special response of the page; a stream gives the first answer's plain
         * error; another answer (a 204) is sent with the first answer's status. */
        if (!page_refused && !page_redirects &&
            (resp->streaming || (resp->status >= 400 && !own))) {
            page_status = resp->streaming ? answer : resp->status;
            resp_file_close(resp);
            resp_body_clear(resp);
        }
    }
    if (rc)
        resp_error(resp, answer);
    else if (page_status)
        resp_error(resp, page_status);
    else if (!own && answer != 200 && !page_refused && !page_redirects)
        resp_set_status(resp, answer);
    if (challenge[0] && answer == 401 && !page_refused)
        resp_header(resp, "WWW-Authenticate", challenge);
    r.http = req->http; /* h is gone on return */
    *req = r; /* the filters and the log see the error page's request, as nginx's */
    if (r.peer == &r.real_peer.sa) /* its own address, decided for the page: req's copy */
        req->peer = &req->real_peer.sa;
}

bool module_chain_error_page(const struct module_chain *c, struct request *req,
                             struct response *resp)
{
    const struct level_error_page *p = error_page_for(req->level, resp->status);
    if (!p)
        return false;
    answer_error_page(c, req, resp, p);
    module_chain_filter(c, req, resp);
    return true;
}

int module_chain_accel_redirect(const struct module_chain *c, struct request *req,
                                struct response *resp, const char *uri, size_t n)
{
    struct http_request h = *req->http;
    if (h.method != HTTP_METHOD_HEAD)
        h.method = HTTP_METHOD_GET;
    h.framing = HTTP_BODY_NONE;
    struct request r = *req;
    r.http = &h;
    r.first_level = NULL;
    r.return_status = r.try_status = 0;
    r.return_text = NULL;
    r.return_args = false;
    r.slash_to = NULL;
    r.internal = true;
    r.body = NULL;
    r.body_len = 0;
    r.args = (struct http_slice){NULL, 0}; /* the URI's own arguments, or none (nginx's) */
    r.has_args = false;
    const struct site_location *named = NULL;
    int rc = 0;
    if (n > 0 && uri[0] == '@') {
        char name[256];
        if (n >= sizeof(name))
            rc = 404;
        else {
            memcpy(name, uri, n);
            name[n] = '\0';
            named = req->site ? site_named_location(req->site, name) : NULL;
            rc = named ? 0 : 404;
        }
    } else if (!set_path(&r, uri, n)) {
        rc = 404; /* not absolute, dot segments: nginx's unsafe URI */
    }
    if (!rc)
        rc = route_from(c, &r, named);
    if (!rc)
        handle(c, &r, resp);
    else
        resp_error(resp, rc);
    int result = 0;
    if (resp->streaming) { /* another source would answer: not followed here */
        resp_file_close(resp);
        resp_body_clear(resp);
        resp_init(resp);
        resp_error(resp, 500);
        result = -1;
    }
    r.http = req->http; /* h is gone on return */
    *req = r;           /* the filters and the log see the redirected request, as nginx's */
    if (r.peer == &r.real_peer.sa)
        req->peer = &req->real_peer.sa;
    return result;
}

bool module_chain_has_error_page(const struct request *req, int status)
{
    return error_page_for(req->level, status) != NULL;
}

void module_chain_filter(const struct module_chain *c, const struct request *req,
                         struct response *resp)
{
    for (unsigned k = 0; k < c->n_filter_mods; k++) {
        unsigned i = c->filter_mods[k];
        c->mods[i]->filter(c->state[i], req, resp);
    }
}

void module_chain_answer(const struct module_chain *c, struct request *req,
                         struct response *resp)
{
    handle(c, req, resp);
    if (resp->delay_ms)
        return; /* put aside: answered when it runs again */
    /* nginx's 495 and 496 go out as a 400, but their error_page is theirs, not 400's */
    int error = resp->status;
    if (error == 400 && (req->return_status == 495 || req->return_status == 496))
        error = req->return_status;
    const struct level_error_page *p;
    if (!resp->streaming && resp->status >= 300 && (p = error_page_for(req->level, error)))
        answer_error_page(c, req, resp, p);
    for (unsigned k = 0; k < c->n_filter_mods; k++) {
        unsigned i = c->filter_mods[k];
        c->mods[i]->filter(c->state[i], req, resp);
    }
}
