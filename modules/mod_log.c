/* mod_log.c — nginx's `log_format` and a server's or a location's `access_log`.
 *
 *   log_format NAME [escape=default|json|none] STRING...;   (top level, nginx's http)
 *   access_log PATH [FORMAT [buffer=SIZE] [flush=TIME] [if=CONDITION]];  |  access_log off;
 *
 * A format is compiled once (vars.h), with the escaping its escape= names applied to what
 * the variables bring, and expanded after the response, in the log hook, so that $status
 * and $body_bytes_sent are the answer's. The predefined `combined` is nginx's, the line the
 * top-level access log writes.
 *
 * The blocks inherit as nginx's: a server or location with any access_log has exactly its
 * own list, `off` none; one without takes its outer block's. Each line is one write(2) on
 * a descriptor opened with O_APPEND at start, so lines of several threads never
 * interleave and a line is in the file when the response has gone: buffer= and flush= are
 * read and kept to nginx's meaning by writing at once (a line never waits). The request
 * path allocates nothing: the line is built on the stack.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../server/clock.h"
#include "../server/directive.h"
#include "../server/http_response.h"
#include "../server/module.h"
#include "../server/vars.h"

#define LOG_FORMATS_MAX 64
#define LOG_FORMAT_NAME_MAX 64
#define LOG_LINE_MAX 8192 /* a longer line is left out (the error log says nothing) */

/* nginx's predefined format, the Combined Log Format. */
static const char combined[] = "$remote_addr - $remote_user [$time_local] \"$request\" "
                               "$status $body_bytes_sent \"$http_referer\" "
                               "\"$http_user_agent\"";

struct log_format {
    char name[LOG_FORMAT_NAME_MAX];
    struct vars_value *line;
};

struct log_module {
    unsigned index; /* in the chain: for module_settings() */
    struct log_format formats[LOG_FORMATS_MAX];
    unsigned n_formats;
};

/* One `access_log`: where, how, and when. */
struct log_target {
    int fd;
    const struct log_format *format;
    struct vars_value *cond; /* if=: a line only when it is neither "" nor "0"; or NULL */
};

/* A block's access logs. */
struct log_conf {
    const struct log_module *m; /* the formats, for the setter */
    struct log_target *targets;
    unsigned n_targets;
    bool off; /* `access_log off;`: none here */
};

static const struct log_format *format_named(const struct log_module *m, const char *name)
{
    for (unsigned i = 0; i < m->n_formats; i++)
        if (strcmp(m->formats[i].name, name) == 0)
            return &m->formats[i];
    return NULL;
}

static int add_format(struct log_module *m, const char *name, enum vars_context ctx,
                      const char *text, char *msg, size_t len)
{
    if (format_named(m, name))
        return snprintf(msg, len, "duplicate log_format name \"%s\"", name), -1;
    if (m->n_formats == LOG_FORMATS_MAX || strlen(name) >= LOG_FORMAT_NAME_MAX)
        return snprintf(msg, len, "too many log formats, or a name too long"), -1;
    struct log_format *f = &m->formats[m->n_formats];
    if (vars_compile(text, ctx, &f->line, msg, len) < 0)
        return -1;
    snprintf(f->name, sizeof(f->name), "%s", name);
    m->n_formats++;
    return 0;
}

/* `log_format NAME [escape=default|json|none] STRING...;`: the strings joined. */
static int set_log_format(void *base, const struct conf_node *n, void *ctx, char *msg,
                          size_t len)
{
    (void)ctx;
    struct log_module *m = base;
    unsigned first = 1;
    enum vars_context esc = VARS_LOG_DEFAULT;
    if (strncmp(n->args[1], "escape=", 7) == 0) {
        const char *e = n->args[1] + 7;
        if (strcmp(e, "default") == 0)
            esc = VARS_LOG_DEFAULT;
        else if (strcmp(e, "json") == 0)
            esc = VARS_LOG_JSON;
        else if (strcmp(e, "none") == 0)
            esc = VARS_LOG_NONE;
        else
            return snprintf(msg, len, "unknown log format escaping \"%s\"", e), -1;
        first = 2;
    }
    if (first >= n->n_args)
        return snprintf(msg, len, "log_format %s has no string", n->args[0]), -1;
    size_t total = 1;
    for (unsigned i = first; i < n->n_args; i++)
        total += strlen(n->args[i]);
    char *text = malloc(total);
    if (!text)
        return snprintf(msg, len, "out of memory"), -1;
    text[0] = '\0';
    for (unsigned i = first; i < n->n_args; i++)
        strcat(text, n->args[i]);
    int rc = add_format(m, n->args[0], esc, text, msg, len);
    free(text);
    return rc;
}

/* What follows FORMAT: buffer=SIZE, flush=TIME (read, lines are written at once) and
 * if=CONDITION. */
static int read_option(struct log_target *t, const char *a, char *msg, size_t len)
{
    if (strncmp(a, "buffer=", 7) == 0 || strncmp(a, "flush=", 6) == 0)
        return 0;
    if (strcmp(a, "gzip") == 0 || strncmp(a, "gzip=", 5) == 0)
        return snprintf(msg, len, "gzip is not supported"), -1;
    if (strncmp(a, "if=", 3) == 0) {
        if (t->cond)
            return snprintf(msg, len, "duplicate \"if=\""), -1;
        return vars_compile(a + 3, VARS_RAW, &t->cond, msg, len);
    }
    return snprintf(msg, len, "invalid parameter \"%s\"", a), -1;
}

/* `access_log PATH [FORMAT [buffer=SIZE] [flush=TIME] [if=CONDITION]];` or `off`. */
static int set_access_log(void *base, const struct conf_node *n, void *ctx, char *msg,
                          size_t len)
{
    (void)ctx;
    struct log_conf *c = base;
    if (strcmp(n->args[0], "off") == 0) {
        if (n->n_args > 1)
            return snprintf(msg, len, "\"off\" takes no other parameter"), -1;
        c->off = true;
        return 0;
    }
    struct log_target t = {.fd = -1};
    const char *name = n->n_args > 1 ? n->args[1] : "combined";
    t.format = format_named(c->m, name);
    if (!t.format)
        return snprintf(msg, len, "unknown log format \"%s\"", name), -1;
    for (unsigned i = 2; i < n->n_args; i++) {
        if (read_option(&t, n->args[i], msg, len) < 0) {
            vars_free(t.cond);
            return -1;
        }
    }
    struct log_target *grown = realloc(c->targets, (c->n_targets + 1) * sizeof(*grown));
    if (!grown) {
        vars_free(t.cond);
        return snprintf(msg, len, "out of memory"), -1;
    }
    c->targets = grown;
    if (strcmp(n->args[0], "stderr") == 0 || strcmp(n->args[0], "stdout") == 0)
        t.fd = n->args[0][3] == 'e' ? 2 : 1;
    else
        t.fd = open(n->args[0], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (t.fd < 0) {
        vars_free(t.cond);
        return snprintf(msg, len, "\"%s\": %s", n->args[0], strerror(errno)), -1;
    }
    c->targets[c->n_targets++] = t;
    return 0;
}

static const struct conf_directive log_directives[] = {
    {"log_format", CONF_LIST, CONF_TOP, CONF_REPEATS, .min_args = 2, .max_args = CONFIG_MAX_ARGS,
     .set = set_log_format, .usage = "NAME [escape=default|json|none] STRING...",
     .doc = "A format for `access_log` in a server or location: the strings joined, with "
            "variables (`$status`, `$body_bytes_sent`, `$request`, `$time_local`... expanded "
            "after the response). What a variable brings is escaped as nginx's: `default` "
            "writes `\"`, `\\` and bytes below 32 or above 126 as `\\xHH`, and an empty value "
            "as `-`; `json` as in a JSON string; `none` not at all. `combined` is predefined, "
            "nginx's."},
    {"access_log", CONF_LIST, CONF_SERVER | CONF_LOCATION, CONF_REPEATS, .min_args = 1,
     .max_args = 5, .set = set_access_log,
     .usage = "PATH [FORMAT [buffer=SIZE] [flush=TIME] [if=CONDITION]] | off",
     .doc = "In a server or location: one more log of its requests, in FORMAT (`combined` "
            "when not named); several write the same request each. A block with any "
            "`access_log` has exactly its own (`off`: none), one without its outer block's, "
            "as nginx. `if=`: a line only when CONDITION expands to neither \"\" nor `0`. "
            "Each line is written at once, one `write` (so `buffer=` and `flush=` are met "
            "by never waiting); not reopened on `SIGUSR1`."},
    {.name = NULL},
};

/* --- the module --------------------------------------------------------------------------- */

static void log_target_write(const struct log_target *t, const struct vars_source *src)
{
    char line[LOG_LINE_MAX + 1];
    if (t->cond) {
        long n = vars_expand(t->cond, src, line, sizeof(line));
        if (n <= 0 || (n == 1 && line[0] == '0'))
            return;
    }
    long n = vars_expand(t->format->line, src, line, LOG_LINE_MAX);
    if (n < 0)
        return; /* longer than a line may be */
    line[n++] = '\n';
    ssize_t w = write(t->fd, line, (size_t)n);
    (void)w; /* a full disk must not stop serving */
}

static void log_log(void *state, const struct request *req, const struct response *resp)
{
    const struct log_module *m = state;
    const struct log_conf *c = module_settings(req, m->index);
    if (!c || c->n_targets == 0)
        return;
    struct vars_source src;
    module_vars_source(req, &src);
    src.answered = true;
    src.status = resp->status;
    src.body_bytes = resp->head_only || resp->no_length ? 0 : resp->content_length;
    src.head_bytes = resp->head_len;
    src.start_us = req->start_us;
    src.now_us = clock_now_us();
    src.request_length = req->request_length;
    src.conn_requests = req->conn_requests;
    for (unsigned i = 0; i < c->n_targets; i++)
        log_target_write(&c->targets[i], &src);
}

/* A block with its own access_log, or `off`, replaces the top-level log. */
static bool log_logs_request(void *state, const struct request *req)
{
    const struct log_module *m = state;
    const struct log_conf *c = module_settings(req, m->index);
    return c && (c->n_targets || c->off);
}

static void log_fini(void *state)
{
    struct log_module *m = state;
    for (unsigned i = 0; i < m->n_formats; i++)
        vars_free(m->formats[i].line);
    free(m);
}

static int log_init(struct module_init *mi, void **state)
{
    struct log_module *m = calloc(1, sizeof(*m));
    if (!m)
        return module_error(mi, NULL, "out of memory");
    m->index = mi->index;
    char msg[256];
    if (add_format(m, "combined", VARS_LOG_DEFAULT, combined, msg, sizeof(msg)) < 0 ||
        module_read_directives(mi, m) < 0) {
        log_fini(m);
        return -1;
    }
    *state = m;
    return 0;
}

static void log_block_free(void *state, void *settings)
{
    (void)state;
    struct log_conf *c = settings;
    for (unsigned i = 0; i < c->n_targets; i++) {
        if (c->targets[i].fd > 2)
            close(c->targets[i].fd);
        vars_free(c->targets[i].cond);
    }
    free(c->targets);
    free(c);
}

/* The top level's access_log statements, when they are nginx's (config.h): the core's
 * table has the directive there, so they are read here one by one. */
static int top_block(const struct module_block *b, struct log_conf *c)
{
    if (!b->mi->cfg->access_log_by_format)
        return 0;
    for (const struct conf_node *n = module_directive(b->mi, "access_log"); n;
         n = module_directive_next(b->mi, "access_log", n)) {
        char msg[256];
        if (set_access_log(c, n, NULL, msg, sizeof(msg)) < 0)
            return module_error(b->mi, n, "%s", msg);
    }
    return 0;
}

/* A block with any access_log has its own list (none after `off`); one without shares its
 * outer block's. */
static void *log_block(void *state, const struct module_block *b)
{
    if (b->outer && !module_block_has(b))
        return (void *)b->outer;
    struct log_conf *c = calloc(1, sizeof(*c));
    if (!c) {
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    c->m = state;
    /* At the top level the core logs, unless the statements are nginx's (top_block). */
    int rc = b->context == CONF_TOP ? top_block(b, c) : module_block_read(b, c);
    if (rc == 0 && c->off && c->n_targets)
        rc = module_error(b->mi, b->node, "access_log off with another access_log");
    if (rc < 0) {
        log_block_free(state, c);
        return NULL;
    }
    return c;
}

const struct module mod_log = {
    .name = "log",
    .directives = log_directives,
    .init = log_init,
    .fini = log_fini,
    .log = log_log,
    .logs_request = log_logs_request,
    .block = log_block,
    .block_free = log_block_free,
};
