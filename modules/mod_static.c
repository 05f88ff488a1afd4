/* mod_static.c — files from the document root.
 *
 * GET and HEAD only (405 otherwise). The request path arrives decoded and normalized; the
 * file is opened beneath the root (open_beneath: openat2 RESOLVE_BENEATH), so no
 * "..", absolute path or symlink can leave the root.
 *
 * Directories: a 301 adds the missing trailing slash; otherwise the index files are tried
 * in order; none: 403. Files: Last-Modified, a strong ETag, the conditional requests of
 * RFC 9110 section 13 in its order of evaluation, and Range (single and multipart) with
 * If-Range. The body is sent by the core with sendfile.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "module.h"

#define STATIC_MAX_RANGES 16


/* --- opening beneath the root -------------------------------------------------------- */

static int open_file(const struct request *req, int dirfd, const char *rel)
{
    return open_beneath(dirfd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY, req->root_real);
}


/* --- validators and conditionals ----------------------------------------------------- */

struct validators {
    char etag[64];        /* quoted */
    char last_mod[30];    /* IMF-fixdate */
    int64_t mtime_s;
};

static void make_validators(const struct stat *sb, struct validators *v)
{
    /* "inode-size-mtime_ns" in hex: changes when the file is replaced or rewritten. */
    char *p = v->etag;
    *p++ = '"';
    p = http_fmt_hex(p, (uint64_t)sb->st_ino);
    *p++ = '-';
    p = http_fmt_hex(p, (uint64_t)sb->st_size);
    *p++ = '-';
    p = http_fmt_hex(p, (uint64_t)sb->st_mtim.tv_sec * 1000000000ull +
                            (uint64_t)sb->st_mtim.tv_nsec);
    *p++ = '"';
    *p = '\0';
    v->mtime_s = sb->st_mtim.tv_sec;
    memcpy(v->last_mod, http_last_modified(v->mtime_s), sizeof(v->last_mod));
}


/* RFC 9110 section 13.2.2, steps 1 to 4. Returns 0 to go on, or 304 / 412. */
static int check_preconditions(const struct http_request *h, const struct validators *v)
{
    int64_t t;
    if (h->if_match.len) {
        if (!http_etag_list_matches(h->if_match, v->etag, false))
            return 412;
    } else if (h->if_unmodified_since.len && http_date_parse(h->if_unmodified_since, &t) == 0) {
        if (v->mtime_s > t)
            return 412;
    }
    if (h->if_none_match.len) {
        if (http_etag_list_matches(h->if_none_match, v->etag, true))
            return 304;
    } else if (h->if_modified_since.len && http_date_parse(h->if_modified_since, &t) == 0) {
        if (v->mtime_s <= t)
            return 304;
    }
    return 0;
}

/* If-Range (RFC 9110 section 13.1.5): the range applies only if the validator matches. */
static bool if_range_holds(struct http_slice ir, const struct validators *v)
{
    if (ir.len == 0)
        return true;
    if (ir.p[0] == '"' || (ir.len > 2 && ir.p[0] == 'W' && ir.p[1] == '/'))
        return ir.len == strlen(v->etag) && memcmp(ir.p, v->etag, ir.len) == 0;
    int64_t t;
    return http_date_parse(ir, &t) == 0 && t == v->mtime_s;
}

/* --- responses ------------------------------------------------------------------------ */

static void add_file_headers(struct response *resp, const struct validators *v)
{
    resp_header(resp, "Last-Modified", v->last_mod);
    resp_header(resp, "ETag", v->etag);
}

static void multipart(struct response *resp, int fd, uint64_t size, const char *type,
                      const struct http_range *r, unsigned n)
{
    static _Thread_local unsigned long long counter;
    char boundary[40];
    snprintf(boundary, sizeof(boundary), "lfhttpd-%016llx",
             (unsigned long long)(uintptr_t)&counter * 2654435761u ^ ++counter);
    resp_headerf(resp, "Content-Type: multipart/byteranges; boundary=%s", boundary);
    for (unsigned i = 0; i < n; i++) {
        char part[512];
        int len = snprintf(part, sizeof(part),
                           "%s--%s\r\nContent-Type: %s\r\nContent-Range: bytes %llu-%llu/%llu"
                           "\r\n\r\n",
                           i ? "\r\n" : "", boundary, type, (unsigned long long)r[i].first,
                           (unsigned long long)r[i].last, (unsigned long long)size);
        resp_body_copy(resp, part, (size_t)len);
        resp_body_file(resp, fd, r[i].first, r[i].last - r[i].first + 1);
    }
    char tail[64];
    int len = snprintf(tail, sizeof(tail), "\r\n--%s--\r\n", boundary);
    resp_body_copy(resp, tail, (size_t)len);
}

static void serve_file(const struct request *req, struct response *resp, int fd,
                       const struct stat *sb, const char *name)
{
    const struct http_request *h = req->http;
    struct validators v;
    make_validators(sb, &v);
    resp->file_fd = fd; /* the core closes it once the response is sent */
    uint64_t size = (uint64_t)sb->st_size;

    int pre = check_preconditions(h, &v);
    if (pre == 304) {
        resp_start(resp, 304);
        add_file_headers(resp, &v);
        return;
    }
    if (pre) {
        resp_error(resp, pre);
        return;
    }
    /* After the preconditions: a 304 or 412 has no use for it (and it may cost libmagic). */
    const char *type = module_content_type(req, name, fd, sb);

    struct http_range ranges[STATIC_MAX_RANGES];
    unsigned n = 0;
    enum http_range_result rr = HTTP_RANGE_IGNORE;
    if (h->method == HTTP_METHOD_GET && h->range.len && if_range_holds(h->if_range, &v))
        rr = http_range_parse(h->range, size, ranges, STATIC_MAX_RANGES, &n);

    if (rr == HTTP_RANGE_UNSATISFIABLE) {
        resp_error(resp, 416);
        resp_headerf(resp, "Content-Range: bytes */%llu", (unsigned long long)size);
        add_file_headers(resp, &v);
        return;
    }
    if (rr == HTTP_RANGE_OK) {
        resp_start(resp, 206);
        add_file_headers(resp, &v);
        resp_header(resp, "Accept-Ranges", "bytes");
        if (n == 1) {
            resp_header(resp, "Content-Type", type);
            resp_headerf(resp, "Content-Range: bytes %llu-%llu/%llu",
                         (unsigned long long)ranges[0].first,
                         (unsigned long long)ranges[0].last, (unsigned long long)size);
            resp_body_file(resp, fd, ranges[0].first, ranges[0].last - ranges[0].first + 1);
        } else {
            multipart(resp, fd, size, type, ranges, n);
        }
        return;
    }
    resp_start(resp, 200);
    resp_header(resp, "Content-Type", type);
    add_file_headers(resp, &v);
    resp_header(resp, "Accept-Ranges", "bytes");
    resp_body_file(resp, fd, 0, size);
}

/* The directory `dirfd` was asked for with its trailing slash: try the index files. */
static void serve_index(const struct request *req,
                        struct response *resp, int dirfd)
{
    const struct config *cfg = req->cfg;
    for (unsigned i = 0; i < cfg->n_index; i++) {
        int fd = open_file(req, dirfd, cfg->index[i]);
        if (fd < 0) {
            if (fd == -ENOENT)
                continue;
            resp_error(resp, http_status_for_errno(-fd));
            return;
        }
        struct stat sb;
        if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
            close(fd);
            continue;
        }
        serve_file(req, resp, fd, &sb, cfg->index[i]);
        return;
    }
    resp_error(resp, 403); /* no index file, and listings are not enabled */
}

/* 301 to the directory with its slash. The Location is made from the normalized path,
 * percent-encoded, never from the raw target: "//evil.example/../sub" names /sub, and
 * must not send a browser to the host evil.example; a decoded %0d%0a must not start a
 * header. A Location too long for the response head is a 414. */
static void redirect_slash(const struct request *req, struct response *resp)
{
    const struct http_request *h = req->http;
    char loc[2048];
    long n = http_path_encode(req->path, req->path_len, loc, sizeof(loc) - 2);
    size_t q = h->has_query ? h->query.len + 1 : 0;
    if (n < 0 || (size_t)n + 1 + q >= sizeof(loc)) {
        resp_error(resp, 414);
        return;
    }
    loc[n++] = '/';
    if (h->has_query) {
        loc[n++] = '?';
        memcpy(loc + n, h->query.p, h->query.len); /* visible ASCII, checked by the parser */
        n += (long)h->query.len;
    }
    loc[n] = '\0';
    resp_error(resp, 301);
    resp_header(resp, "Location", loc);
}

static enum mod_result static_handle(void *state, const struct request *req,
                                     struct response *resp)
{
    (void)state;
    const struct http_request *h = req->http;
    if (h->method != HTTP_METHOD_GET && h->method != HTTP_METHOD_HEAD) {
        resp_error(resp, 405);
        resp_header(resp, "Allow", "GET, HEAD");
        return MOD_HANDLED;
    }
    const char *rel = req->path[1] ? req->path + 1 : ".";
    int fd = open_file(req, req->root_fd, rel);
    if (fd < 0) {
        resp_error(resp, http_status_for_errno(-fd));
        return MOD_HANDLED;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        close(fd);
        resp_error(resp, 500);
        return MOD_HANDLED;
    }
    if (S_ISDIR(sb.st_mode)) {
        if (req->path[req->path_len - 1] != '/')
            redirect_slash(req, resp);
        else
            serve_index(req, resp, fd);
        close(fd);
        return MOD_HANDLED;
    }
    if (!S_ISREG(sb.st_mode)) { /* FIFOs, devices, sockets: never served */
        close(fd);
        resp_error(resp, 403);
        return MOD_HANDLED;
    }
    serve_file(req, resp, fd, &sb, req->path);
    return MOD_HANDLED;
}

const struct module mod_static = {
    .name = "static",
    .handle = static_handle,
};
