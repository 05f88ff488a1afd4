/* directive.c — the reader of the directive tables: forms, values, bounds, messages. */
#include "directive.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- messages ---------------------------------------------------------------------------- */

void config_error_append(char *err, size_t err_len, const char *fmt, ...)
{
    if (err_len < 2)
        return;
    size_t used = strnlen(err, err_len - 1);
    if (used > 0 && used + 2 < err_len)
        err[used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + used, err_len - used, fmt, ap);
    va_end(ap);
}

/* --- where a statement stands ------------------------------------------------------------ */

#define CONF_FILES_MAX 4095

/* The included files' names, by tag: the process's, as a compiler's table of files, so
 * that a line alone says where it is. A name is added once, and reloads read it again. */
static struct {
    pthread_mutex_t lock;
    char *names[CONF_FILES_MAX + 1]; /* [0] unused: the reader's own file */
    unsigned n;
} conf_files = {.lock = PTHREAD_MUTEX_INITIALIZER};

unsigned conf_file_tag(const char *path)
{
    unsigned tag = 0;
    pthread_mutex_lock(&conf_files.lock);
    for (unsigned i = 1; i <= conf_files.n && !tag; i++)
        if (strcmp(conf_files.names[i], path) == 0)
            tag = i;
    if (!tag && conf_files.n < CONF_FILES_MAX && (conf_files.names[conf_files.n + 1] = strdup(path)))
        tag = ++conf_files.n;
    pthread_mutex_unlock(&conf_files.lock);
    return tag << CONF_LINE_BITS;
}

const char *conf_line_file(unsigned line, const char *main)
{
    unsigned tag = line >> CONF_LINE_BITS;
    pthread_mutex_lock(&conf_files.lock);
    const char *name = tag && tag <= conf_files.n ? conf_files.names[tag] : main;
    pthread_mutex_unlock(&conf_files.lock);
    return name;
}

unsigned conf_line_no(unsigned line)
{
    return line & ((1u << CONF_LINE_BITS) - 1);
}

int conf_error(struct conf_reader *r, unsigned line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *sep = r->owner[0] ? ": " : "";
    if (line)
        config_error_append(r->err, r->err_len, "%s:%u: %s%s%s", conf_line_file(line, r->file),
                            conf_line_no(line), r->owner, sep, msg);
    else
        config_error_append(r->err, r->err_len, "%s: %s%s%s", r->file, r->owner, sep, msg);
    r->errors++;
    return -1;
}

void conf_notice(struct conf_reader *r, unsigned line, const char *fmt, ...)
{
    if (!r->notes)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    config_error_append(r->notes, r->notes_len, "%s:%u: %s", conf_line_file(line, r->file),
                        conf_line_no(line), msg);
}

/* --- values ------------------------------------------------------------------------------ */

int config_parse_count(const char *s, uint64_t *out)
{
    char *end;
    if (!isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

int config_parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift)
        end++;
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int config_parse_duration_ms(const char *s, unsigned *out)
{
    char *end;
    if (!isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned long long mul;
    if (strcmp(end, "ms") == 0)
        mul = 1;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        mul = 1000;
    else if (strcmp(end, "m") == 0)
        mul = 60000;
    else if (strcmp(end, "h") == 0)
        mul = 3600000;
    else if (strcmp(end, "d") == 0)
        mul = 86400000;
    else
        return -1;
    if (v > UINT32_MAX / mul)
        return -1;
    *out = (unsigned)(v * mul);
    return 0;
}

/* "16k", "1m", "300": a size as a reader writes it. */
static void format_size(uint64_t v, char *out, size_t len)
{
    static const char units[] = "gmk";
    for (int i = 0; i < 3; i++) {
        unsigned shift = (unsigned)(30 - 10 * i);
        if (v && v % (1ull << shift) == 0) {
            snprintf(out, len, "%llu%c", (unsigned long long)(v >> shift), units[i]);
            return;
        }
    }
    snprintf(out, len, "%llu", (unsigned long long)v);
}

/* "1h", "30s", "250ms": a duration as a reader writes it. */
static void format_ms(uint64_t v, char *out, size_t len)
{
    static const struct {
        uint64_t ms;
        const char *unit;
    } units[] = {{3600000, "h"}, {60000, "m"}, {1000, "s"}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (v && v % units[i].ms == 0) {
            snprintf(out, len, "%llu%s", (unsigned long long)(v / units[i].ms), units[i].unit);
            return;
        }
    }
    snprintf(out, len, "%llums", (unsigned long long)v);
}

/* --- the table --------------------------------------------------------------------------- */

int conf_name_value(const struct conf_name *names, const char *word, int *value)
{
    for (const struct conf_name *c = names; c->name; c++) {
        if (strcmp(c->name, word) == 0) {
            *value = c->value;
            return 0;
        }
    }
    return -1;
}

const struct conf_directive *conf_table_find(const struct conf_directive *table,
                                             const char *name, unsigned context)
{
    const struct conf_directive *any = NULL;
    for (const struct conf_directive *d = table; d && d->name; d++) {
        if (strcmp(d->name, name) != 0)
            continue;
        if (d->contexts & context)
            return d;
        if (!any)
            any = d;
    }
    return any;
}

/* The largest value the field of d holds. */
static uint64_t field_max(const struct conf_directive *d)
{
    return d->size >= 8 ? UINT64_MAX : (1ull << (8 * d->size)) - 1;
}

static uint64_t upper_bound(const struct conf_directive *d)
{
    uint64_t fm = field_max(d);
    return d->max && d->max < fm ? d->max : fm;
}

/* Store v in the field of d, whatever its width (bool, unsigned, size_t, uint64_t, enum). */
static void store(void *base, const struct conf_directive *d, uint64_t v)
{
    char *p = (char *)base + d->offset;
    if (d->size == 1) {
        uint8_t x = (uint8_t)v;
        memcpy(p, &x, 1);
    } else if (d->size == 2) {
        uint16_t x = (uint16_t)v;
        memcpy(p, &x, 2);
    } else if (d->size == 4) {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
    } else {
        memcpy(p, &v, 8);
    }
}

/* What follows the name in a usage line: the table's, or the kind's. */
static const char *usage_of(const struct conf_directive *d, char *buf, size_t len)
{
    if (d->usage)
        return d->usage;
    switch (d->kind) {
    case CONF_FLAG: return "on|off";
    case CONF_COUNT: return "NUMBER";
    case CONF_SIZE: return d->off ? "SIZE|off" : "SIZE";
    case CONF_DURATION: return "TIME";
    case CONF_PATH: return "PATH";
    case CONF_ENUM: {
        size_t used = 0;
        buf[0] = '\0';
        for (const struct conf_name *c = d->names; c->name && used < len; c++)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", c == d->names ? "" : "|",
                                     c->name);
        return buf;
    }
    default: return "VALUE";
    }
}

/* Does n have the form d wants: so many values, and a block or not? */
static bool form_ok(const struct conf_directive *d, const struct conf_node *n)
{
    if (d->kind == CONF_LIST || d->kind == CONF_BLOCK)
        return n->is_block == (d->kind == CONF_BLOCK) && n->n_args >= d->min_args &&
               n->n_args <= d->max_args;
    return !n->is_block && n->n_args == 1;
}

static int form_error(struct conf_reader *r, const struct conf_directive *d,
                      const struct conf_node *n)
{
    char count[64], buf[256];
    unsigned lo = 1, hi = 1;
    if (d->kind == CONF_LIST || d->kind == CONF_BLOCK)
        lo = d->min_args, hi = d->max_args;
    if (lo == hi)
        snprintf(count, sizeof(count), lo == 1 ? "one value" : "%u values", lo);
    else if (hi >= CONFIG_MAX_ARGS)
        snprintf(count, sizeof(count), lo == 1 ? "one or more values" : "%u or more values", lo);
    else
        snprintf(count, sizeof(count), "%u to %u values", lo, hi);
    bool block = d->kind == CONF_BLOCK;
    return conf_error(r, n->line, "%s takes %s%s; usage: %s %s%s", d->name, count,
                      block ? " and a { block }" : "", d->name, usage_of(d, buf, sizeof(buf)),
                      block ? " { ... }" : ";");
}

/* " (256 to 16k)", " (at least 1ms)", or "" when only the field bounds the value. */
static void bounds_text(const struct conf_directive *d, char *out, size_t len)
{
    void (*fmt)(uint64_t, char *, size_t) = d->kind == CONF_DURATION ? format_ms : format_size;
    char lo[32], hi[32];
    uint64_t max = upper_bound(d);
    out[0] = '\0';
    if (d->kind == CONF_COUNT) {
        snprintf(out, len, " (%llu to %llu)", (unsigned long long)d->min,
                 (unsigned long long)max);
        return;
    }
    bool bounded_above = d->max && d->max < field_max(d);
    if (!bounded_above && d->min == 0)
        return;
    fmt(d->min, lo, sizeof(lo));
    fmt(max, hi, sizeof(hi));
    if (!bounded_above)
        snprintf(out, len, " (at least %s)", lo);
    else
        snprintf(out, len, " (%s%s to %s)", d->off ? "off, or " : "", lo, hi);
}

/* A count, size or duration: parsed, bounded, stored. */
static int apply_number(struct conf_reader *r, const struct conf_directive *d,
                        const struct conf_node *n, void *base)
{
    const char *a = n->args[0];
    uint64_t v = 0;
    unsigned ms;
    int rc;
    if (d->kind == CONF_DURATION) {
        rc = config_parse_duration_ms(a, &ms);
        v = ms;
    } else if (d->kind == CONF_SIZE) {
        rc = d->off && strcmp(a, "off") == 0 ? 0 : config_parse_size(a, &v);
    } else {
        rc = config_parse_count(a, &v);
    }
    if (rc == 0 && v >= d->min && v <= upper_bound(d)) {
        store(base, d, v);
        return 0;
    }
    static const char *const what[] = {[CONF_COUNT] = "number", [CONF_SIZE] = "size",
                                       [CONF_DURATION] = "duration"};
    char bounds[96];
    bounds_text(d, bounds, sizeof(bounds));
    return conf_error(r, n->line, "%s: invalid %s \"%s\"%s", d->name, what[d->kind], a, bounds);
}

static int apply_enum(struct conf_reader *r, const struct conf_directive *d,
                      const struct conf_node *n, void *base)
{
    const char *a = n->args[0];
    char expected[512] = "";
    size_t used = 0;
    int value;
    if (conf_name_value(d->names, a, &value) == 0) {
        store(base, d, (uint64_t)(int64_t)value);
        return 0;
    }
    for (const struct conf_name *c = d->names; c->name; c++) {
        const char *sep = c == d->names ? "" : c[1].name ? ", " : " or ";
        if (used < sizeof(expected))
            used += (size_t)snprintf(expected + used, sizeof(expected) - used, "%s\"%s\"", sep,
                                     c->name);
    }
    return conf_error(r, n->line, "%s: expected %s, not \"%s\"", d->name, expected, a);
}

static int apply_text(struct conf_reader *r, const struct conf_directive *d,
                      const struct conf_node *n, void *base)
{
    size_t len = strlen(n->args[0]);
    if (len >= d->size)
        return conf_error(r, n->line, "%s: longer than %zu bytes", d->name, d->size - 1);
    memcpy((char *)base + d->offset, n->args[0], len + 1);
    return 0;
}

int conf_apply(struct conf_reader *r, const struct conf_directive *d, const struct conf_node *n,
               void *base)
{
    if (!form_ok(d, n))
        return form_error(r, d, n);
    if (d->set) {
        char msg[1024] = "";
        if (d->set(base, n, r->ctx, msg, sizeof(msg)) == 0)
            return 0;
        if (!msg[0]) { /* the setter reported itself */
            r->errors++;
            return -1;
        }
        return conf_error(r, n->line, "%s: %s", d->name, msg);
    }
    switch (d->kind) {
    case CONF_FLAG:
        if (strcmp(n->args[0], "on") != 0 && strcmp(n->args[0], "off") != 0)
            return conf_error(r, n->line, "%s: expected \"on\" or \"off\", not \"%s\"",
                              d->name, n->args[0]);
        store(base, d, strcmp(n->args[0], "on") == 0);
        return 0;
    case CONF_COUNT:
    case CONF_SIZE:
    case CONF_DURATION: return apply_number(r, d, n, base);
    case CONF_ENUM: return apply_enum(r, d, n, base);
    case CONF_STRING:
    case CONF_PATH: return apply_text(r, d, n, base);
    default: return conf_error(r, n->line, "%s: nothing reads it", d->name); /* a table bug */
    }
}

/* --- blocks ------------------------------------------------------------------------------ */

static const char *context_name(unsigned context)
{
    switch (context) {
    case CONF_CLASS: return "in a class";
    case CONF_SERVER: return "in a server block";
    case CONF_LOCATION: return "in a location block";
    case CONF_EVENTS: return "in events";
    default: return "at the top level";
    }
}

/* The earlier statement among n's siblings (from first) with n's name, or NULL. */
static const struct conf_node *earlier(const struct conf_node *first, const struct conf_node *n)
{
    for (const struct conf_node *m = first; m && m != n; m = m->next)
        if (strcmp(m->name, n->name) == 0)
            return m;
    return NULL;
}

/* nginx's modules that lfhttpd does not have, by their directives (a name, or a prefix
 * ending in '_'), so that a configuration that uses one is told which, rather than only
 * that a name is unknown. */
static const struct {
    const char *name; /* "proxy_cache" also matches "proxy_cache_valid" and the like */
    const char *module;
    const char *what; /* what it would do, or what to do instead */
} nginx_lacking[] = {
    {"auth_request", "nginx's ngx_http_auth_request_module", "subrequests for access"},
    {"sub_filter", "nginx's ngx_http_sub_module", "replacing text in answers"},
    {"ssi", "nginx's ngx_http_ssi_module", "server-side includes"},
    {"dav_methods", "nginx's ngx_http_dav_module", "WebDAV"},
    {"dav_access", "nginx's ngx_http_dav_module", "WebDAV"},
    {"create_full_put_path", "nginx's ngx_http_dav_module", "WebDAV"},
    {"min_delete_depth", "nginx's ngx_http_dav_module", "WebDAV"},
    {"userid", "nginx's ngx_http_userid_module", "identifying cookies"},
    {"mirror", "nginx's ngx_http_mirror_module", "mirrored subrequests"},
    {"add_before_body", "nginx's ngx_http_addition_module", "text added to answers"},
    {"add_after_body", "nginx's ngx_http_addition_module", "text added to answers"},
    {"addition_types", "nginx's ngx_http_addition_module", "text added to answers"},
    {"flv", "nginx's ngx_http_flv_module", "FLV pseudo-streaming"},
    {"mp4", "nginx's ngx_http_mp4_module", "MP4 pseudo-streaming"},
    {"random_index", "nginx's ngx_http_random_index_module", "a random index file"},
    {"slice", "nginx's ngx_http_slice_module", "sliced subrequests"},
    {"image_filter", "nginx's ngx_http_image_filter_module", "image transformation"},
    {"xslt_", "nginx's ngx_http_xslt_module", "XSLT"},
    {"xml_entities", "nginx's ngx_http_xslt_module", "XSLT"},
    {"perl", "nginx's ngx_http_perl_module", "embedded Perl"},
    {"geoip_", "nginx's ngx_http_geoip_module", "GeoIP databases"},
    {"memcached_", "nginx's ngx_http_memcached_module", "answers from memcached"},
    {"grpc_", "nginx's ngx_http_grpc_module", "gRPC upstreams"},
    {"js_", "nginx's njs", "JavaScript"},
    {"proxy_cache", "nginx's proxy cache", "answers are never cached here; without the "
                                           "line every request goes upstream"},
    {"fastcgi_cache", "nginx's FastCGI cache", "answers are never cached here; without the "
                                               "line every request goes to the application"},
    {"uwsgi_cache", "nginx's uwsgi cache", "answers are never cached here"},
    {"scgi_cache", "nginx's SCGI cache", "answers are never cached here"},
    {"more_set_headers", "the third-party headers-more module", "use add_header"},
    {"more_clear_headers", "the third-party headers-more module", "use proxy_hide_header"},
};

const char *conf_unknown_hint(const char *name)
{
    static _Thread_local char hint[192];
    for (size_t i = 0; i < sizeof(nginx_lacking) / sizeof(nginx_lacking[0]); i++) {
        const char *p = nginx_lacking[i].name;
        size_t n = strlen(p);
        if (strncmp(name, p, n) != 0 ||
            (name[n] != '\0' && name[n] != '_' && p[n - 1] != '_'))
            continue;
        snprintf(hint, sizeof(hint), " (%s, which lfhttpd does not have: %s)",
                 nginx_lacking[i].module, nginx_lacking[i].what);
        return hint;
    }
    return "";
}

int conf_read_block(struct conf_reader *r, const struct conf_directive *table,
                    config_known_fn known, const struct conf_node *first, void *base)
{
    unsigned before = r->errors;
    for (const struct conf_node *n = first; n; n = n->next) {
        const struct conf_directive *d = conf_table_find(table, n->name, r->context);
        bool ours = d && (d->contexts & r->context);
        if (!ours && known) {
            const struct conf_directive *k = known(n->name, r->context);
            if (k && (!d || (k->contexts & r->context)))
                d = k;
        }
        const struct conf_node *m = NULL;
        if (!d)
            conf_error(r, n->line, "unknown directive \"%s\"%s", n->name,
                       conf_unknown_hint(n->name));
        else if (!(d->contexts & r->context))
            conf_error(r, n->line, "\"%s\" directive is not allowed %s", n->name,
                       context_name(r->context));
        else if (d->repeat == CONF_ONCE && (m = earlier(first, n)))
            conf_error(r, n->line, "\"%s\" directive is duplicate (first at %s:%u)", n->name,
                       conf_line_file(m->line, r->file), conf_line_no(m->line));
        else if (ours)
            conf_apply(r, d, n, base);
    }
    return r->errors > before ? -1 : 0;
}

int conf_read_owned(struct conf_reader *r, const struct conf_directive *table,
                    const struct conf_node *first, void *base)
{
    unsigned before = r->errors;
    for (const struct conf_node *n = first; n; n = n->next) {
        const struct conf_directive *d = conf_table_find(table, n->name, r->context);
        if (d && (d->contexts & r->context))
            conf_apply(r, d, n, base);
    }
    return r->errors > before ? -1 : 0;
}

int conf_set_later(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)base;
    (void)n;
    (void)ctx;
    (void)msg;
    (void)len;
    return 0;
}

/* --- the reference ------------------------------------------------------------------------ */

/* The contexts of d, as the reference names them. */
static void contexts_text(unsigned contexts, char *out, size_t len)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{CONF_TOP, "top"}, {CONF_SERVER, "server"}, {CONF_LOCATION, "location"},
                 {CONF_CLASS, "class"}, {CONF_EVENTS, "events"}};
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && used < len; i++)
        if (contexts & names[i].bit)
            used += (size_t)snprintf(out + used, len - used, "%s%s", used ? "," : "",
                                     names[i].name);
}

void conf_dump_table(FILE *out, const char *owner, const struct conf_directive *table)
{
    for (const struct conf_directive *d = table; d && d->name; d++) {
        char buf[256], where[64];
        const char *usage = usage_of(d, buf, sizeof(buf));
        contexts_text(d->contexts, where, sizeof(where));
        bool block = d->kind == CONF_BLOCK && !strchr(usage, '{');
        fprintf(out, "%s\t%s\t%s%s%s%s\t%s\t%s\t%s\t%s\n", owner, d->name, d->name,
                usage[0] ? " " : "", usage, block ? " { ... }" : ";", d->dflt ? d->dflt : "",
                where, d->repeat == CONF_REPEATS ? "repeats" : "once", d->doc ? d->doc : "");
    }
}
