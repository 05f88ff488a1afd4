/* config.c — tokenizer, statement tree and directive table for lfhttpd.conf. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void config_defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    config_parse_listen("8080", &cfg->listen[0]);
    cfg->n_listen = 1;
    snprintf(cfg->root, sizeof(cfg->root), "www");
    snprintf(cfg->index[0], sizeof(cfg->index[0]), "index.html");
    cfg->n_index = 1;
    cfg->threads = 0;
    cfg->concurrency = LF_STRATEGY_LEADER_FOLLOWERS;
    cfg->promotion = LF_PROMOTE_LIFO;
    cfg->max_connections = 10000;
    cfg->max_header_size = 8192;
    cfg->max_headers = 64;
    cfg->max_body_size = 1024 * 1024;
    cfg->header_timeout_ms = 10000;
    cfg->keepalive_timeout_ms = 60000;
    cfg->send_timeout_ms = 30000;
    cfg->shutdown_timeout_ms = 10000;
    cfg->keepalive_requests = 10000;
    snprintf(cfg->access_log, sizeof(cfg->access_log), "stdout");
    snprintf(cfg->error_log, sizeof(cfg->error_log), "stderr");
    cfg->error_level = LOG_LEVEL_INFO;
    cfg->server_tokens = true;
}

/* --- values ------------------------------------------------------------------------ */

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
    else
        return -1;
    if (v > UINT32_MAX / mul)
        return -1;
    *out = (unsigned)(v * mul);
    return 0;
}

static int parse_port(const char *s, uint16_t *port)
{
    char *end;
    if (!isdigit((unsigned char)s[0]))
        return -1;
    unsigned long v = strtoul(s, &end, 10);
    if (*end != '\0' || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

int config_parse_listen(const char *text, struct config_listen *l)
{
    char host[80];
    const char *port_s;
    uint16_t port;

    memset(l, 0, sizeof(*l));
    if (strlen(text) >= sizeof(l->text))
        return -1;
    snprintf(l->text, sizeof(l->text), "%s", text);

    if (text[0] == '[') { /* [v6]:port */
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof(host))
            return -1;
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        port_s = close + 2;
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&l->addr;
        if (parse_port(port_s, &port) < 0 || inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
            return -1;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        l->addr_len = sizeof(*a6);
        return 0;
    }

    const char *colon = strrchr(text, ':');
    struct sockaddr_in *a4 = (struct sockaddr_in *)&l->addr;
    a4->sin_family = AF_INET;
    l->addr_len = sizeof(*a4);
    if (!colon) { /* a bare port */
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
        if (parse_port(text, &port) < 0)
            return -1;
        a4->sin_port = htons(port);
        return 0;
    }
    if ((size_t)(colon - text) >= sizeof(host))
        return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    if (parse_port(colon + 1, &port) < 0)
        return -1;
    a4->sin_port = htons(port);
    if (strcmp(host, "*") == 0) {
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
        return 0;
    }
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    return inet_pton(AF_INET, host, &a4->sin_addr) == 1 ? 0 : -1;
}

/* --- tokenizer and statement tree --------------------------------------------------- */

struct conf_lexer {
    const char *p, *end;
    unsigned line;
    const char *file;
    char *err;
    size_t err_len;
};

enum tok { TOK_WORD, TOK_SEMI, TOK_OPEN, TOK_CLOSE, TOK_EOF, TOK_ERROR };

__attribute__((format(printf, 2, 3))) static int lex_error(struct conf_lexer *lx,
                                                          const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(lx->err, lx->err_len, "%s:%u: %s", lx->file, lx->line, msg);
    return TOK_ERROR;
}

/* Reads the next token; a word is returned as a fresh string in *word. */
static enum tok lex_next(struct conf_lexer *lx, char **word)
{
    for (;;) {
        while (lx->p < lx->end && isspace((unsigned char)*lx->p)) {
            if (*lx->p == '\n')
                lx->line++;
            lx->p++;
        }
        if (lx->p < lx->end && *lx->p == '#') {
            while (lx->p < lx->end && *lx->p != '\n')
                lx->p++;
            continue;
        }
        break;
    }
    if (lx->p >= lx->end)
        return TOK_EOF;
    char c = *lx->p;
    if (c == ';' || c == '{' || c == '}') {
        lx->p++;
        return c == ';' ? TOK_SEMI : c == '{' ? TOK_OPEN : TOK_CLOSE;
    }
    char buf[CONFIG_PATH_MAX];
    size_t n = 0;
    if (c == '"' || c == '\'') {
        lx->p++;
        while (lx->p < lx->end && *lx->p != c) {
            if (*lx->p == '\\' && lx->p + 1 < lx->end)
                lx->p++;
            if (*lx->p == '\n')
                lx->line++;
            if (n + 1 >= sizeof(buf))
                return lex_error(lx, "quoted value too long");
            buf[n++] = *lx->p++;
        }
        if (lx->p >= lx->end)
            return lex_error(lx, "unterminated quoted value");
        lx->p++;
    } else {
        while (lx->p < lx->end && !isspace((unsigned char)*lx->p) && *lx->p != ';' &&
               *lx->p != '{' && *lx->p != '}' && *lx->p != '#') {
            if (n + 1 >= sizeof(buf))
                return lex_error(lx, "value too long");
            buf[n++] = *lx->p++;
        }
    }
    buf[n] = '\0';
    *word = strdup(buf);
    if (!*word)
        return lex_error(lx, "out of memory");
    return TOK_WORD;
}

static void conf_tree_free(struct conf_node *n)
{
    while (n) {
        struct conf_node *next = n->next;
        free(n->name);
        for (unsigned i = 0; i < n->n_args; i++)
            free(n->args[i]);
        conf_tree_free(n->children);
        free(n);
        n = next;
    }
}

/* Parses statements until '}' (when nested) or end of file. */
static int conf_parse_block(struct conf_lexer *lx, struct conf_node **out, int depth)
{
    struct conf_node **tail = out;
    for (;;) {
        char *word = NULL;
        enum tok t = lex_next(lx, &word);
        if (t == TOK_ERROR)
            return -1;
        if (t == TOK_EOF) {
            if (depth > 0)
                return lex_error(lx, "unexpected end of file, expecting \"}\""), -1;
            return 0;
        }
        if (t == TOK_CLOSE) {
            if (depth == 0)
                return lex_error(lx, "unexpected \"}\""), -1;
            return 0;
        }
        if (t != TOK_WORD)
            return lex_error(lx, "unexpected \"%c\"", t == TOK_SEMI ? ';' : '{'), -1;

        struct conf_node *n = calloc(1, sizeof(*n));
        if (!n) {
            free(word);
            return lex_error(lx, "out of memory"), -1;
        }
        n->name = word;
        n->line = lx->line;
        *tail = n;
        tail = &n->next;
        for (;;) {
            char *arg = NULL;
            t = lex_next(lx, &arg);
            if (t == TOK_ERROR)
                return -1;
            if (t == TOK_SEMI)
                break;
            if (t == TOK_OPEN) {
                n->is_block = true;
                if (depth >= 8)
                    return lex_error(lx, "blocks nested too deep"), -1;
                if (conf_parse_block(lx, &n->children, depth + 1) < 0)
                    return -1;
                break;
            }
            if (t == TOK_WORD) {
                if (n->n_args == CONFIG_MAX_ARGS) {
                    free(arg);
                    return lex_error(lx, "too many values for \"%s\"", n->name), -1;
                }
                n->args[n->n_args++] = arg;
                continue;
            }
            return lex_error(lx, "directive \"%s\" is not terminated by \";\"", n->name), -1;
        }
    }
}

/* --- directives -------------------------------------------------------------------- */

struct directive {
    const char *name;
    unsigned min_args, max_args;
    int (*apply)(struct config *cfg, const struct conf_node *n, char *msg, size_t len);
};

static int set_listen(struct config *cfg, const struct conf_node *n, char *msg, size_t len)
{
    if (cfg->n_listen == CONFIG_MAX_LISTEN)
        return snprintf(msg, len, "too many listen directives"), -1;
    if (config_parse_listen(n->args[0], &cfg->listen[cfg->n_listen]) < 0)
        return snprintf(msg, len, "invalid listen address \"%s\"", n->args[0]), -1;
    cfg->n_listen++;
    return 0;
}

static int set_path(char *dst, const struct conf_node *n, char *msg, size_t len)
{
    if (strlen(n->args[0]) >= CONFIG_PATH_MAX)
        return snprintf(msg, len, "path too long"), -1;
    snprintf(dst, CONFIG_PATH_MAX, "%s", n->args[0]);
    return 0;
}

static int set_root(struct config *cfg, const struct conf_node *n, char *msg, size_t len)
{
    return set_path(cfg->root, n, msg, len);
}

static int set_index(struct config *cfg, const struct conf_node *n, char *msg, size_t len)
{
    if (n->n_args > CONFIG_MAX_INDEX)
        return snprintf(msg, len, "at most %d index files", CONFIG_MAX_INDEX), -1;
    for (unsigned i = 0; i < n->n_args; i++) {
        const char *a = n->args[i];
        if (strlen(a) >= sizeof(cfg->index[0]) || strchr(a, '/') || a[0] == '\0')
            return snprintf(msg, len, "invalid index file name \"%s\"", a), -1;
        snprintf(cfg->index[i], sizeof(cfg->index[i]), "%s", a);
    }
    cfg->n_index = n->n_args;
    return 0;
}

static int parse_uint(const char *s, unsigned long max, unsigned *out)
{
    char *end;
    if (!isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > max)
        return -1;
    *out = (unsigned)v;
    return 0;
}

#define UINT_DIRECTIVE(field, max)                                                             \
    static int set_##field(struct config *cfg, const struct conf_node *n, char *msg, size_t len) \
    {                                                                                          \
        if (parse_uint(n->args[0], (max), &cfg->field) < 0)                                    \
            return snprintf(msg, len, "invalid number \"%s\" (0 to %lu)", n->args[0],          \
                            (unsigned long)(max)),                                             \
                   -1;                                                                         \
        return 0;                                                                              \
    }
UINT_DIRECTIVE(threads, 1024)
UINT_DIRECTIVE(max_connections, 10000000)
UINT_DIRECTIVE(max_headers, 64)
UINT_DIRECTIVE(keepalive_requests, 4000000000u)

#define DURATION_DIRECTIVE(field)                                                              \
    static int set_##field(struct config *cfg, const struct conf_node *n, char *msg, size_t len) \
    {                                                                                          \
        if (config_parse_duration_ms(n->args[0], &cfg->field) < 0)                             \
            return snprintf(msg, len, "invalid duration \"%s\"", n->args[0]), -1;              \
        return 0;                                                                              \
    }
DURATION_DIRECTIVE(header_timeout_ms)
DURATION_DIRECTIVE(keepalive_timeout_ms)
DURATION_DIRECTIVE(send_timeout_ms)
DURATION_DIRECTIVE(shutdown_timeout_ms)

static int set_max_header_size(struct config *cfg, const struct conf_node *n, char *msg,
                               size_t len)
{
    uint64_t v;
    if (config_parse_size(n->args[0], &v) < 0 || v < 256 || v > CONFIG_MAX_HEADER_SIZE)
        return snprintf(msg, len, "invalid size \"%s\" (256 to 16k)", n->args[0]), -1;
    cfg->max_header_size = (size_t)v;
    return 0;
}

static int set_max_body_size(struct config *cfg, const struct conf_node *n, char *msg,
                             size_t len)
{
    if (config_parse_size(n->args[0], &cfg->max_body_size) < 0)
        return snprintf(msg, len, "invalid size \"%s\"", n->args[0]), -1;
    return 0;
}

static int set_access_log(struct config *cfg, const struct conf_node *n, char *msg, size_t len)
{
    return set_path(cfg->access_log, n, msg, len);
}

static int set_access_log_format(struct config *cfg, const struct conf_node *n, char *msg,
                                 size_t len)
{
    if (strcmp(n->args[0], "combined") != 0 && strcmp(n->args[0], "json") != 0)
        return snprintf(msg, len, "expected \"combined\" or \"json\", not \"%s\"",
                        n->args[0]), -1;
    cfg->access_log_json = strcmp(n->args[0], "json") == 0;
    return 0;
}

static int set_error_log(struct config *cfg, const struct conf_node *n, char *msg, size_t len)
{
    static const char *levels[] = {"error", "warn", "info", "debug"};
    if (strcmp(n->args[0], "off") == 0)
        return snprintf(msg, len, "the error log cannot be off; use a level instead"), -1;
    if (set_path(cfg->error_log, n, msg, len) < 0)
        return -1;
    if (n->n_args == 1)
        return 0;
    for (unsigned i = 0; i < 4; i++) {
        if (strcmp(n->args[1], levels[i]) == 0) {
            cfg->error_level = (enum log_level)i;
            return 0;
        }
    }
    return snprintf(msg, len, "invalid level \"%s\" (error, warn, info, debug)", n->args[1]),
           -1;
}

static int set_server_tokens(struct config *cfg, const struct conf_node *n, char *msg,
                             size_t len)
{
    if (strcmp(n->args[0], "on") != 0 && strcmp(n->args[0], "off") != 0)
        return snprintf(msg, len, "expected \"on\" or \"off\", not \"%s\"", n->args[0]), -1;
    cfg->server_tokens = strcmp(n->args[0], "on") == 0;
    return 0;
}

/* --- concurrency strategy ---------------------------------------------------------- */

static int set_concurrency(struct config *cfg, const struct conf_node *n, char *msg,
                           size_t len)
{
    static const struct {
        const char *name;
        enum lf_strategy strategy;
    } names[] = {
        {"leader_followers", LF_STRATEGY_LEADER_FOLLOWERS},
        {"half_sync_half_async", LF_STRATEGY_HALF_SYNC_HALF_ASYNC},
        {"thread_per_connection", LF_STRATEGY_THREAD_PER_CONNECTION},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(n->args[0], names[i].name) == 0) {
            cfg->concurrency = names[i].strategy;
            return 0;
        }
    }
    return snprintf(msg, len, "expected \"leader_followers\", \"half_sync_half_async\" or "
                    "\"thread_per_connection\", not \"%s\"", n->args[0]), -1;
}

static int set_promotion(struct config *cfg, const struct conf_node *n, char *msg, size_t len)
{
    if (strcmp(n->args[0], "lifo") != 0 && strcmp(n->args[0], "condvar") != 0)
        return snprintf(msg, len, "expected \"lifo\" or \"condvar\", not \"%s\"",
                        n->args[0]), -1;
    cfg->promotion = strcmp(n->args[0], "lifo") == 0 ? LF_PROMOTE_LIFO : LF_PROMOTE_CONDVAR;
    return 0;
}

static const struct directive directives[] = {
    {"listen", 1, 1, set_listen},
    {"root", 1, 1, set_root},
    {"index", 1, CONFIG_MAX_INDEX, set_index},
    {"threads", 1, 1, set_threads},
    {"concurrency", 1, 1, set_concurrency},
    {"promotion", 1, 1, set_promotion},
    {"max_connections", 1, 1, set_max_connections},
    {"max_header_size", 1, 1, set_max_header_size},
    {"max_headers", 1, 1, set_max_headers},
    {"max_body_size", 1, 1, set_max_body_size},
    {"header_timeout", 1, 1, set_header_timeout_ms},
    {"keepalive_timeout", 1, 1, set_keepalive_timeout_ms},
    {"send_timeout", 1, 1, set_send_timeout_ms},
    {"shutdown_timeout", 1, 1, set_shutdown_timeout_ms},
    {"keepalive_requests", 1, 1, set_keepalive_requests},
    {"access_log", 1, 1, set_access_log},
    {"access_log_format", 1, 1, set_access_log_format},
    {"error_log", 1, 2, set_error_log},
    {"server_tokens", 1, 1, set_server_tokens},
};

/* --- directives set once ------------------------------------------------------------ */

/* The directives that add to one another when repeated: listeners, service classes, the
 * modules' mounts (`handler`, `cgi`) and a class's `match` rules. Every other directive
 * sets one value, and a second statement of it is an error, as in nginx: a silent "the
 * last one wins" hides the line that does nothing. */
static const char *const repeatable[] = {"listen", "class", "handler", "cgi", "match"};

/* The earlier statement that n repeats among its siblings (from first), or NULL. */
static const struct conf_node *duplicate_of(const struct conf_node *first,
                                            const struct conf_node *n)
{
    for (size_t i = 0; i < sizeof(repeatable) / sizeof(repeatable[0]); i++)
        if (strcmp(n->name, repeatable[i]) == 0)
            return NULL;
    for (const struct conf_node *m = first; m && m != n; m = m->next)
        if (strcmp(m->name, n->name) == 0)
            return m;
    return NULL;
}

/* "FILE:LINE: [context]"NAME" directive is duplicate (first at FILE:LINE)" when n repeats
 * an earlier sibling. Returns 0 or -1. */
static int check_duplicate(const struct conf_node *first, const struct conf_node *n,
                           const char *path, const char *context, char *err, size_t err_len)
{
    const struct conf_node *m = duplicate_of(first, n);
    if (!m)
        return 0;
    snprintf(err, err_len, "%s:%u: %s\"%s\" directive is duplicate (first at %s:%u)", path,
             n->line, context, n->name, path, m->line);
    return -1;
}

/* --- service classes ------------------------------------------------------------- */

static int parse_cidr(const char *text, struct config_cidr *c)
{
    char addr[64];
    const char *slash = strchr(text, '/');
    size_t len = slash ? (size_t)(slash - text) : strlen(text);
    if (len >= sizeof(addr))
        return -1;
    memcpy(addr, text, len);
    addr[len] = '\0';
    memset(c, 0, sizeof(*c));
    if (inet_pton(AF_INET, addr, c->addr) == 1) {
        c->family = AF_INET;
        c->prefix_bits = 32;
    } else if (inet_pton(AF_INET6, addr, c->addr) == 1) {
        c->family = AF_INET6;
        c->prefix_bits = 128;
    } else {
        return -1;
    }
    if (slash) {
        unsigned bits;
        if (parse_uint(slash + 1, c->prefix_bits, &bits) < 0)
            return -1;
        c->prefix_bits = bits;
    }
    return 0;
}

bool config_cidr_match(const struct config_cidr *c, const struct sockaddr *sa)
{
    const uint8_t *a;
    uint8_t mapped[4];
    if (sa->sa_family == AF_INET && c->family == AF_INET) {
        a = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    } else if (sa->sa_family == AF_INET6 && c->family == AF_INET6) {
        a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    } else if (sa->sa_family == AF_INET6 && c->family == AF_INET &&
               IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr)) {
        memcpy(mapped, ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr + 12, 4);
        a = mapped;
    } else {
        return false;
    }
    unsigned full = c->prefix_bits / 8, rest = c->prefix_bits % 8;
    if (memcmp(a, c->addr, full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[full] & mask) == (c->addr[full] & mask);
}

static int class_priority(const char *v, int *nice)
{
    if (strcmp(v, "high") == 0)
        *nice = -10;
    else if (strcmp(v, "normal") == 0)
        *nice = 0;
    else if (strcmp(v, "low") == 0)
        *nice = 10;
    else {
        char *end;
        long n = strtol(v, &end, 10);
        if (*v == '\0' || *end || n < -20 || n > 19)
            return -1;
        *nice = (int)n;
    }
    return 0;
}

static int class_rule(struct config_class *k, const struct conf_node *n, char *msg, size_t len)
{
    if (n->n_args != 2)
        return snprintf(msg, len, "match takes a kind and a value: path, host or addr"), -1;
    const char *kind = n->args[0], *v = n->args[1];
    if (strcmp(kind, "path") == 0) {
        if (v[0] != '/' || strlen(v) >= sizeof(k->paths[0]) || k->n_paths == CONFIG_CLASS_RULES)
            return snprintf(msg, len, "invalid path prefix \"%s\"", v), -1;
        snprintf(k->paths[k->n_paths++], sizeof(k->paths[0]), "%s", v);
    } else if (strcmp(kind, "host") == 0) {
        if (strlen(v) >= sizeof(k->hosts[0]) || k->n_hosts == CONFIG_CLASS_RULES)
            return snprintf(msg, len, "invalid host \"%s\"", v), -1;
        char *h = k->hosts[k->n_hosts++];
        for (size_t i = 0; v[i]; i++)
            h[i] = (char)tolower((unsigned char)v[i]), h[i + 1] = '\0';
    } else if (strcmp(kind, "addr") == 0) {
        if (k->n_addrs == CONFIG_CLASS_RULES || parse_cidr(v, &k->addrs[k->n_addrs]) < 0)
            return snprintf(msg, len, "invalid address or network \"%s\"", v), -1;
        k->n_addrs++;
    } else {
        return snprintf(msg, len, "unknown match kind \"%s\" (path, host, addr)", kind), -1;
    }
    return 0;
}

static int class_directive(struct config_class *k, const struct conf_node *n, char *msg,
                           size_t len)
{
    if (n->is_block)
        return snprintf(msg, len, "\"%s\" cannot be a block", n->name), -1;
    if (strcmp(n->name, "match") == 0)
        return class_rule(k, n, msg, len);
    if (n->n_args != 1)
        return snprintf(msg, len, "invalid number of values for \"%s\"", n->name), -1;
    const char *v = n->args[0];
    if (strcmp(n->name, "threads") == 0) {
        if (parse_uint(v, 1024, &k->threads) < 0)
            return snprintf(msg, len, "invalid number \"%s\"", v), -1;
    } else if (strcmp(n->name, "priority") == 0) {
        if (class_priority(v, &k->nice) < 0)
            return snprintf(msg, len, "priority is high, normal, low or -20..19, not \"%s\"",
                            v), -1;
    } else if (strcmp(n->name, "max_connections") == 0) {
        if (parse_uint(v, 10000000, &k->max_connections) < 0)
            return snprintf(msg, len, "invalid number \"%s\"", v), -1;
    } else if (strcmp(n->name, "listen") == 0) {
        if (k->n_listen == CONFIG_MAX_LISTEN ||
            config_parse_listen(v, &k->listen[k->n_listen]) < 0)
            return snprintf(msg, len, "invalid listen address \"%s\"", v), -1;
        k->n_listen++;
    } else {
        return snprintf(msg, len, "unknown directive \"%s\" in a class", n->name), -1;
    }
    return 0;
}

static bool same_listen(const struct config_listen *a, const struct config_listen *b)
{
    /* Port 0 asks the kernel for a free port: two such listeners never collide. */
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&a->addr;
    if (a4->sin_port == 0) /* sin_port and sin6_port sit at the same offset */
        return false;
    return a->addr_len == b->addr_len && memcmp(&a->addr, &b->addr, a->addr_len) == 0;
}

/* A rule may send traffic to one class only: two classes with the same path prefix, host
 * or listener would make the choice depend on the order of the file. */
static int class_overlap(const struct config *cfg, const struct config_class *k, char *msg,
                         size_t len)
{
    for (unsigned i = 0; i < cfg->n_classes; i++) {
        const struct config_class *o = &cfg->classes[i];
        if (strcmp(o->name, k->name) == 0)
            return snprintf(msg, len, "class \"%s\" is defined twice", k->name), -1;
        for (unsigned a = 0; a < k->n_paths; a++)
            for (unsigned b = 0; b < o->n_paths; b++)
                if (strcmp(k->paths[a], o->paths[b]) == 0)
                    return snprintf(msg, len, "path \"%s\" is matched by class \"%s\" too",
                                    k->paths[a], o->name), -1;
        for (unsigned a = 0; a < k->n_hosts; a++)
            for (unsigned b = 0; b < o->n_hosts; b++)
                if (strcmp(k->hosts[a], o->hosts[b]) == 0)
                    return snprintf(msg, len, "host \"%s\" is matched by class \"%s\" too",
                                    k->hosts[a], o->name), -1;
        for (unsigned a = 0; a < k->n_listen; a++)
            for (unsigned b = 0; b < o->n_listen; b++)
                if (same_listen(&k->listen[a], &o->listen[b]))
                    return snprintf(msg, len, "listen %s belongs to class \"%s\" too",
                                    k->listen[a].text, o->name), -1;
    }
    return 0;
}

static int apply_class(struct config *cfg, const struct conf_node *n, const char *path,
                       char *err, size_t err_len)
{
    char msg[512];
    if (!n->is_block || n->n_args != 1) {
        snprintf(err, err_len, "%s:%u: class takes a name and a { block }", path, n->line);
        return -1;
    }
    if (cfg->n_classes == CONFIG_MAX_CLASSES) {
        snprintf(err, err_len, "%s:%u: at most %d classes", path, n->line, CONFIG_MAX_CLASSES);
        return -1;
    }
    const char *name = n->args[0];
    if (strlen(name) >= sizeof(cfg->classes[0].name) || strcmp(name, "default") == 0 ||
        !isalpha((unsigned char)name[0])) {
        snprintf(err, err_len, "%s:%u: invalid class name \"%s\" (\"default\" is taken)", path,
                 n->line, name);
        return -1;
    }
    struct config_class *k = &cfg->classes[cfg->n_classes];
    memset(k, 0, sizeof(*k));
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->line = n->line;
    k->threads = 1;
    char context[64];
    snprintf(context, sizeof(context), "class %s: ", name);
    for (const struct conf_node *d = n->children; d; d = d->next) {
        if (class_directive(k, d, msg, sizeof(msg)) < 0) {
            snprintf(err, err_len, "%s:%u: class %s: %s", path, d->line, name, msg);
            return -1;
        }
        if (check_duplicate(n->children, d, path, context, err, err_len) < 0)
            return -1;
    }
    if (class_overlap(cfg, k, msg, sizeof(msg)) < 0) {
        snprintf(err, err_len, "%s:%u: %s", path, n->line, msg);
        return -1;
    }
    cfg->n_classes++;
    return 0;
}

/* The default class listens on the top-level `listen` lines; the built-in 8080 only when
 * no listen appears anywhere. A class's listener must be its own. */
static int check_class_listens(struct config *cfg, const char *path, char *err, size_t err_len)
{
    bool top_level = config_next(cfg, "listen", NULL) != NULL;
    bool in_classes = false;
    for (unsigned i = 0; i < cfg->n_classes; i++)
        in_classes |= cfg->classes[i].n_listen > 0;
    if (!top_level && in_classes)
        cfg->n_listen = 0;
    for (unsigned i = 0; i < cfg->n_classes; i++) {
        const struct config_class *k = &cfg->classes[i];
        for (unsigned a = 0; a < k->n_listen; a++)
            for (unsigned b = 0; b < cfg->n_listen; b++)
                if (same_listen(&k->listen[a], &cfg->listen[b])) {
                    snprintf(err, err_len, "%s:%u: listen %s belongs to class \"%s\" and to "
                             "the default class", path, k->line, k->listen[a].text, k->name);
                    return -1;
                }
    }
    return 0;
}

static int apply_directives(struct config *cfg, const char *path, config_known_fn known,
                            char *err, size_t err_len)
{
    bool saw_listen = false;
    for (const struct conf_node *n = cfg->tree; n; n = n->next) {
        if (strcmp(n->name, "class") == 0) {
            if (apply_class(cfg, n, path, err, err_len) < 0)
                return -1;
            continue;
        }
        const struct directive *d = NULL;
        for (size_t i = 0; i < sizeof(directives) / sizeof(directives[0]); i++)
            if (strcmp(directives[i].name, n->name) == 0)
                d = &directives[i];
        if (!d && !(known && known(n->name))) {
            snprintf(err, err_len, "%s:%u: unknown directive \"%s\"", path, n->line, n->name);
            return -1;
        }
        if (check_duplicate(cfg->tree, n, path, "", err, err_len) < 0)
            return -1;
        if (!d)
            continue; /* a module's: its owner reads it */
        if (n->is_block || n->n_args < d->min_args || n->n_args > d->max_args) {
            snprintf(err, err_len, "%s:%u: invalid number of values for \"%s\"", path, n->line,
                     n->name);
            return -1;
        }
        if (strcmp(n->name, "listen") == 0 && !saw_listen) {
            cfg->n_listen = 0; /* the first listen replaces the default */
            saw_listen = true;
        }
        char msg[512];
        if (d->apply(cfg, n, msg, sizeof(msg)) < 0) {
            snprintf(err, err_len, "%s:%u: %s: %s", path, n->line, n->name, msg);
            return -1;
        }
    }
    return 0;
}

/* `promotion` chooses which waiting Leader/Followers thread leads next: with another
 * strategy nothing reads it, and a setting that does nothing must not pass for one. */
static int check_promotion(const struct config *cfg, const char *path, char *err,
                           size_t err_len)
{
    const struct conf_node *p = config_next(cfg, "promotion", NULL);
    if (!p || cfg->concurrency == LF_STRATEGY_LEADER_FOLLOWERS)
        return 0;
    const struct conf_node *c = config_next(cfg, "concurrency", NULL);
    snprintf(err, err_len, "%s:%u: promotion: only Leader/Followers promotes a thread, and "
             "concurrency is %s (%s:%u)", path, p->line, c ? c->args[0] : "?", path,
             c ? c->line : 0);
    return -1;
}

const struct conf_node *config_next(const struct config *cfg, const char *name,
                                    const struct conf_node *after)
{
    for (const struct conf_node *n = after ? after->next : cfg->tree; n; n = n->next)
        if (strcmp(n->name, name) == 0)
            return n;
    return NULL;
}

int config_load(struct config *cfg, const char *path, config_known_fn known, char *err,
                size_t err_len)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                snprintf(err, err_len, "%s: out of memory", path);
                return -1;
            }
            text = t;
        }
        memcpy(text + len, chunk, n);
        len += n;
    }
    fclose(f);

    snprintf(cfg->file, sizeof(cfg->file), "%s", path);
    const char *start = text ? text : ""; /* an empty file: no buffer, no statements */
    struct conf_lexer lx = {start, start + len, 1, path, err, err_len};
    int rc = conf_parse_block(&lx, &cfg->tree, 0);
    free(text);
    if (rc < 0)
        return -1;
    if (apply_directives(cfg, path, known, err, err_len) < 0 ||
        check_promotion(cfg, path, err, err_len) < 0)
        return -1;
    return check_class_listens(cfg, path, err, err_len);
}

void config_free(struct config *cfg)
{
    conf_tree_free(cfg->tree);
    cfg->tree = NULL;
}
