/* module_fastcgi.c — $fastcgi_script_name and $fastcgi_path_info (module_fastcgi.h): the
 * request's path split by its block's fastcgi_split_path_info, as nginx splits it each time
 * one of them is expanded; and the parameter lines and field-name lists the FastCGI, uwsgi
 * and SCGI modules read alike. */
#include "module_fastcgi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include <sys/stat.h>

#include "directive.h"
#include "resolver.h"
#include "upstream.h"
#include "module_chain.h"
#include "vars.h"

extern const struct module mod_fastcgi;

long module_fastcgi_var(const struct request *req, enum fastcgi_var which, char *out,
                        size_t cap)
{
    const struct fastcgi_split *sp = module_settings(req, module_chain_index(&mod_fastcgi));
    const char *uri = req->path ? req->path : "";
    size_t uri_len = req->path ? req->path_len : 0;
    const char *script = uri, *info = "";
    size_t script_len = uri_len, info_len = 0;
    struct regex_captures caps;
    if (sp && sp->split &&
        regex_match(sp->split, uri, uri_len, &caps, NULL, 0) == REGEX_MATCH) {
        script = regex_group(&caps, 1, &script_len);
        info = regex_group(&caps, 2, &info_len);
    }
    const char *v = which == FASTCGI_PATH_INFO ? info : script;
    size_t n = which == FASTCGI_PATH_INFO ? info_len : script_len;
    const char *index = which == FASTCGI_SCRIPT_NAME && sp && sp->index && n > 0 &&
                                v[n - 1] == '/' ? sp->index : "";
    size_t index_len = strlen(index);
    if (n + index_len >= cap)
        return -1;
    memcpy(out, v, n);
    memcpy(out + n, index, index_len);
    out[n + index_len] = '\0';
    return (long)(n + index_len);
}

/* --- PREFIX_pass with variables ----------------------------------------------------------- */

int fastcgi_target_eval(const struct vars_value *value, const struct request *req,
                        const struct fastcgi_upstreams *ups, const char *scheme,
                        struct fastcgi_target *t)
{
    char text[1024];
    struct vars_source src;
    module_vars_source(req, &src);
    long n = vars_expand(value, &src, text, sizeof(text));
    t->upstream = NULL;
    t->addr_len = 0;
    t->port = 0;
    t->host[0] = '\0';
    t->status = 500;
    if (n < 0) {
        snprintf(t->why, sizeof(t->why), "the address is longer than %zu bytes",
                 sizeof(text) - 1);
        return -1;
    }
    const char *v = text;
    size_t sl = scheme ? strlen(scheme) : 0;
    if (sl && (size_t)n > sl + 3 && strncasecmp(v, scheme, sl) == 0 &&
        memcmp(v + sl, "://", 3) == 0) {
        v += sl + 3;
        n -= (long)(sl + 3);
    }
    struct upstream_addr a;
    const char *err;
    if (upstream_addr_parse(v, (size_t)n, &a, &err) < 0) {
        snprintf(t->why, sizeof(t->why), "%s in upstream \"%.300s\"", err, v);
        return -1;
    }
    if (a.kind != UPSTREAM_ADDR_UNIX && a.port == 0) /* (a block is named without a port) */
        for (unsigned i = 0; i < ups->n_named; i++)
            if (strlen(ups->named[i]->name) == a.host_len &&
                strncasecmp(ups->named[i]->name, a.host, a.host_len) == 0) {
                t->upstream = ups->named[i];
                return 0;
            }
    if (a.kind == UPSTREAM_ADDR_NAME && a.port != 0) /* (as the line wrote it) */
        for (unsigned i = 0; i < ups->n_implicit; i++)
            if (ups->implicit[i]->n_servers &&
                strcasecmp(ups->implicit[i]->servers[0].written, v) == 0) {
                t->upstream = ups->implicit[i];
                return 0;
            }
    if (a.kind != UPSTREAM_ADDR_UNIX && a.port == 0) {
        snprintf(t->why, sizeof(t->why), "no port in upstream \"%.*s\"", (int)a.host_len,
                 a.host);
        return -1;
    }
    t->port = a.port;
    if (a.kind == UPSTREAM_ADDR_NAME) {
        if (a.host_len >= sizeof(t->host)) {
            snprintf(t->why, sizeof(t->why), "invalid host in upstream \"%.300s\"", v);
            return -1;
        }
        memcpy(t->host, a.host, a.host_len);
        t->host[a.host_len] = '\0';
        return 0;
    }
    t->addr = a.addr;
    t->addr_len = a.addr_len;
    t->port = a.port;
    return 0;
}

int fastcgi_resolver_read(struct fastcgi_resolver *r, const struct module_block *b,
                          const struct fastcgi_resolver *outer)
{
    *r = (struct fastcgi_resolver){.timeout_ms = 0};
    for (const struct conf_node *n = b->first; n; n = n->next) {
        char msg[300];
        if (strcmp(n->name, "resolver") == 0) {
            if (r->owned)
                resolver_free(r->resolver);
            r->resolver = resolver_read(n, msg, sizeof(msg));
            r->owned = r->resolver != NULL;
            if (!r->resolver)
                return module_error(b->mi, n, "resolver: %s", msg);
        } else if (strcmp(n->name, "resolver_timeout") == 0 && n->n_args == 1 &&
                   config_parse_duration_ms(n->args[0], &r->timeout_ms) < 0) {
            return module_error(b->mi, n, "resolver_timeout: invalid value \"%s\"",
                                n->args[0]);
        }
    }
    if (!r->resolver && outer)
        r->resolver = outer->resolver;
    if (!r->timeout_ms)
        r->timeout_ms = outer ? outer->timeout_ms : 30000; /* nginx's */
    return 0;
}

void fastcgi_resolver_free(struct fastcgi_resolver *r)
{
    if (r->owned)
        resolver_free(r->resolver);
    r->resolver = NULL;
    r->owned = false;
}

/* --- the directives the FastCGI family shares -------------------------------------------- */

static bool param_name_ok(const char *name)
{
    if (!*name)
        return false;
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
    return true;
}

int fastcgi_param_add(struct fastcgi_param_line **lines, unsigned *n_lines, bool *owned,
                      const struct conf_node *n, char *msg, size_t len)
{
    if (n->n_args == 3 && strcmp(n->args[2], "if_not_empty") != 0)
        return snprintf(msg, len, "invalid parameter \"%s\" (only \"if_not_empty\")",
                        n->args[2]), -1;
    if (!param_name_ok(n->args[0]))
        return snprintf(msg, len, "\"%s\" is not a parameter name", n->args[0]), -1;
    if (*n_lines == FASTCGI_PARAM_LINES_MAX)
        return snprintf(msg, len, "too many (%d at most)", FASTCGI_PARAM_LINES_MAX), -1;
    if (!*owned) {
        *lines = calloc(FASTCGI_PARAM_LINES_MAX, sizeof(**lines));
        if (!*lines)
            return snprintf(msg, len, "out of memory"), -1;
        *owned = true;
        *n_lines = 0;
    }
    struct fastcgi_param_line *l = &(*lines)[*n_lines];
    l->name = strdup(n->args[0]);
    if (!l->name)
        return snprintf(msg, len, "out of memory"), -1;
    l->name_len = strlen(l->name);
    l->if_not_empty = n->n_args == 3;
    char why[256];
    if (vars_compile(n->args[1], VARS_RAW, &l->value, why, sizeof(why)) < 0) {
        free(l->name);
        return snprintf(msg, len, "%s", why), -1;
    }
    (*n_lines)++;
    return 0;
}

int fastcgi_name_add(char (**list)[64], unsigned *n, bool *owned, const char *name, char *msg,
                     size_t len)
{
    if (!param_name_ok(name) || strchr(name, ':') || strlen(name) >= 64)
        return snprintf(msg, len, "\"%s\" is not a field name", name), -1;
    if (*n == FASTCGI_NAMES_MAX)
        return snprintf(msg, len, "too many (%d at most)", FASTCGI_NAMES_MAX), -1;
    if (!*list) {
        *list = calloc(FASTCGI_NAMES_MAX, 64);
        if (!*list)
            return snprintf(msg, len, "out of memory"), -1;
        *owned = true;
    }
    snprintf((*list)[(*n)++], 64, "%s", name);
    return 0;
}

/* PREFIX_temp_path DIR [LEVEL...]: as proxy_temp_path (module_temp_path_read). */
static int temp_path_set(struct fastcgi_buffering *b, const struct conf_node *n, char *msg,
                         size_t len)
{
    if (module_temp_path_read(n, msg, len) < 0)
        return -1;
    b->temp_path = n->args[0];
    return 0;
}

/* PREFIX_buffers NUMBER SIZE: as nginx, at least 2 buffers. */
static int buffers_set(struct fastcgi_buffering *b, const struct conf_node *n, char *msg,
                       size_t len)
{
    char *end;
    unsigned long num = strtoul(n->args[0], &end, 10);
    uint64_t size;
    if (*n->args[0] < '0' || *n->args[0] > '9' || *end || num > 65536)
        return snprintf(msg, len, "invalid value \"%s\" (a number of buffers)", n->args[0]), -1;
    if (num < 2)
        return snprintf(msg, len, "there must be at least 2 \"%s\"", n->name), -1;
    if (config_parse_size(n->args[1], &size) < 0 || size == 0 || size > (64u << 20))
        return snprintf(msg, len, "invalid value \"%s\" (a size, 64m at most)", n->args[1]), -1;
    if ((uint64_t)num * size > (1ull << 30))
        return snprintf(msg, len, "%s: more than 1g in all", n->name), -1;
    b->buffers_n = (unsigned)num;
    b->buffers_size = size;
    return 0;
}

int fastcgi_buffering_set(struct fastcgi_buffering *b, const struct conf_node *n, char *msg,
                          size_t len)
{
    const char *name = strchr(n->name, '_'); /* after the prefix: "_buffering"... */
    if (!name)
        return snprintf(msg, len, "unknown directive"), -1;
    if (strcmp(name, "_buffering") == 0) {
        static const struct conf_name words[] = {{"off", 0}, {"on", 1}, {NULL, 0}};
        if (conf_name_value(words, n->args[0], &b->buffering) < 0)
            return snprintf(msg, len, "invalid value \"%s\" (on or off)", n->args[0]), -1;
        return 0;
    }
    if (strcmp(name, "_buffers") == 0)
        return buffers_set(b, n, msg, len);
    if (strcmp(name, "_temp_path") == 0)
        return temp_path_set(b, n, msg, len);
    uint64_t size;
    if (config_parse_size(n->args[0], &size) < 0 || size > (1ull << 40))
        return snprintf(msg, len, "invalid value \"%s\" (a size)", n->args[0]), -1;
    if (strcmp(name, "_max_temp_file_size") == 0) {
        b->max_temp = size;
        b->max_temp_set = true;
        return 0;
    }
    if (size == 0)
        return snprintf(msg, len, "invalid value \"%s\" (a size above 0)", n->args[0]), -1;
    return 0; /* _buffer_size, _busy_buffers_size, _temp_file_write_size: accepted */
}

void fastcgi_buffering_merge(struct fastcgi_buffering *b, const struct fastcgi_buffering *outer,
                             bool http_block, struct proxy_params *p)
{
    if (outer) {
        if (b->buffering < 0)
            b->buffering = outer->buffering;
        if (!b->buffers_n) {
            b->buffers_n = outer->buffers_n;
            b->buffers_size = outer->buffers_size;
        }
        if (!b->max_temp_set) {
            b->max_temp = outer->max_temp;
            b->max_temp_set = true;
        }
        if (!b->temp_path)
            b->temp_path = outer->temp_path;
    } else {
        if (b->buffering < 0) /* nginx's default in nginx's files; streaming in ours */
            b->buffering = http_block;
        if (!b->buffers_n) {
            b->buffers_n = 8;
            b->buffers_size = 4096;
        }
        if (!b->max_temp_set) {
            b->max_temp = 1024ull << 20;
            b->max_temp_set = true;
        }
        if (!b->temp_path)
            b->temp_path = P_tmpdir;
    }
    p->buffering = b->buffering > 0;
    p->buffers_bytes = (size_t)b->buffers_n * b->buffers_size;
    p->max_temp_bytes = b->max_temp;
    p->temp_path = b->temp_path;
}
