/* config.c — tokenizer, statement tree and directive table for lfhttpd.conf. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <limits.h>
#include <errno.h>
#include <glob.h>
#include <grp.h>
#include <pwd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "vars.h"

void config_defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    config_parse_listen("8080", &cfg->listen[0]);
    cfg->n_listen = 1;
    snprintf(cfg->root, sizeof(cfg->root), "www");
    snprintf(cfg->index[0], sizeof(cfg->index[0]), "index.html");
    cfg->n_index = 1;
    cfg->threads = 0;
    cfg->groups = CONFIG_GROUPS_UNSET;
    cfg->reactivation = LF_REACTIVATE_EDGE;
    cfg->concurrency = LF_STRATEGY_LEADER_FOLLOWERS;
    cfg->promotion = LF_PROMOTE_LIFO;
    cfg->max_connections = 10000;
    cfg->max_header_size = 8192;
    cfg->max_headers = 64;
    cfg->max_body_size = 1024 * 1024;
    cfg->max_body_memory = (uint64_t)64 << 20;
    cfg->client_body_buffer_size = 16 * 1024; /* nginx's on 64-bit systems */
    cfg->client_body_min_rate = 500; /* Apache's RequestReadTimeout MinRate */
    cfg->header_timeout_ms = 10000;
    cfg->client_body_timeout_ms = 10000;
    cfg->keepalive_timeout_ms = 60000;
    cfg->send_timeout_ms = 30000;
    /* 1 KiB/s: below any real link (a GPRS phone gets several); what it cuts is a client
     * that reads a few bytes per send_timeout to hold a response and a connection. */
    cfg->send_min_rate = 1024;
    /* 256 MiB: four of the largest memory body (a 64 MiB listing) fit, so no single
     * response is refused by default; a thousand parked copies are not. */
    cfg->max_parked_size = (uint64_t)256 << 20;
    cfg->shutdown_timeout_ms = 10000;
    cfg->keepalive_requests = 10000;
    cfg->keepalive_time_ms = 3600000; /* nginx's 1h */
    cfg->keepalive_disable = CONFIG_KA_DISABLE_MSIE6;
    snprintf(cfg->access_log, sizeof(cfg->access_log), "stdout");
    snprintf(cfg->error_log, sizeof(cfg->error_log), "stderr");
    cfg->error_level = LOG_LEVEL_INFO;
    cfg->server_tokens = true;
    cfg->sendfile = true;
    cfg->absolute_redirect = true;
}

/* --- listen addresses ---------------------------------------------------------------- */

static int parse_one_listen(const char *text, struct config_listen *l);

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
    unsigned ports;
    int rc = config_parse_listen_range(text, l, &ports);
    return rc < 0 || ports != 1 ? -1 : 0;
}

/* text's port part, FIRST or FIRST-LAST, taken off into range (NUL-ended): the text left
 * is what parse_one reads, with FIRST alone. */
static int split_range(const char *text, char *one, size_t cap, unsigned *ports)
{
    *ports = 1;
    if (strncmp(text, "unix:", 5) == 0) { /* a path: no port, its '-' a name's */
        if (strlen(text) >= cap)
            return -1;
        snprintf(one, cap, "%s", text);
        return 0;
    }
    const char *close = text[0] == '[' ? strchr(text, ']') : NULL;
    const char *colon = strrchr(close ? close : text, ':');
    const char *port = colon ? colon + 1 : text;
    const char *dash = strchr(port, '-');
    if (strlen(text) >= cap)
        return -1;
    snprintf(one, cap, "%s", text);
    if (!dash)
        return 0;
    uint16_t first, last;
    char first_s[8];
    size_t fl = (size_t)(dash - port);
    if (fl == 0 || fl >= sizeof(first_s))
        return -1;
    memcpy(first_s, port, fl);
    first_s[fl] = '\0';
    if (parse_port(first_s, &first) < 0 || parse_port(dash + 1, &last) < 0 || first == 0)
        return -1;
    if (last < first)
        return -2;
    one[(size_t)(port - text) + fl] = '\0';
    *ports = (unsigned)(last - first) + 1;
    return 0;
}

int config_parse_listen_range(const char *text, struct config_listen *l, unsigned *ports)
{
    char one[sizeof(l->text)];
    int rc = split_range(text, one, sizeof(one), ports);
    if (rc < 0)
        return rc;
    return parse_one_listen(one, l);
}

void config_listen_nth(struct config_listen *l, unsigned k)
{
    if (l->addr.ss_family == AF_UNIX) /* a path: one address, no port */
        return;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&l->addr;
    unsigned port = ntohs(a4->sin_port) + k; /* sin_port and sin6_port: the same offset */
    a4->sin_port = htons((uint16_t)port);
    char *colon = strrchr(l->text, ':');
    char *at = colon ? colon + 1 : l->text;
    snprintf(at, sizeof(l->text) - (size_t)(at - l->text), "%u", port);
}

unsigned config_listen_count(const struct conf_node *first)
{
    unsigned n = 0;
    for (const struct conf_node *c = first; c; c = c->next) {
        struct config_listen l;
        unsigned ports = 1;
        if (strcmp(c->name, "listen") == 0 && c->n_args >= 1 &&
            config_parse_listen_range(c->args[0], &l, &ports) < 0)
            ports = 1;
        n += strcmp(c->name, "listen") == 0 ? ports : 0;
    }
    return n;
}

static int parse_one_listen(const char *text, struct config_listen *l)
{
    char host[80];
    const char *port_s;
    uint16_t port;

    memset(l, 0, sizeof(*l));
    if (strlen(text) >= sizeof(l->text))
        return -1;
    snprintf(l->text, sizeof(l->text), "%s", text);

    if (strncmp(text, "unix:", 5) == 0) { /* unix:PATH: a Unix-domain socket, as nginx */
        struct sockaddr_un *un = (struct sockaddr_un *)&l->addr;
        size_t n = strlen(text + 5);
        if (n == 0 || n >= sizeof(un->sun_path))
            return -1;
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, text + 5, n + 1);
        l->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        return 0;
    }
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

bool config_listen_is_wildcard(const struct config_listen *l)
{
    if (l->addr.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&l->addr)->sin_addr.s_addr == htonl(INADDR_ANY);
    return l->addr.ss_family == AF_INET6 &&
           IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&l->addr)->sin6_addr);
}

/* nginx's time in seconds, so_keepalive's idle and interval: "30", "1m", "1h30m" (units y M
 * w d h m s; a number without one, last, is seconds). Returns 0 or -1. */
static int parse_seconds(const char *s, size_t n, int *out)
{
    static const char units[] = "yMwdhms";
    static const long long unit_s[] = {365 * 86400LL, 30 * 86400LL, 7 * 86400LL, 86400, 3600,
                                       60, 1};
    long long total = 0;
    size_t i = 0;
    if (n == 0)
        return -1;
    while (i < n) {
        long long v = 0;
        size_t start = i;
        while (i < n && isdigit((unsigned char)s[i]) && v <= INT_MAX)
            v = v * 10 + (s[i++] - '0');
        if (i == start || v > INT_MAX)
            return -1;
        const char *u = i < n ? memchr(units, s[i], sizeof(units) - 1) : NULL;
        if (i < n && !u)
            return -1;
        total += v * (u ? unit_s[u - units] : 1);
        i += u ? 1 : 0;
        if (total > INT_MAX)
            return -1;
    }
    *out = (int)total;
    return 0;
}

/* `so_keepalive=on|off|[IDLE]:[INTVL]:[CNT]`, v the part after '=': nginx's rules (each
 * field may be empty, not all of them; a zero is "the kernel's"). */
static int parse_so_keepalive(struct config_listen *l, const char *v)
{
    if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0) {
        l->so_keepalive = v[1] == 'n' ? 1 : 2;
        return 0;
    }
    const char *c1 = strchr(v, ':');
    const char *f2 = c1 ? c1 + 1 : v + strlen(v);
    const char *c2 = c1 ? strchr(f2, ':') : NULL;
    const char *f3 = c2 ? c2 + 1 : f2 + strlen(f2);
    size_t n1 = (size_t)((c1 ? c1 : f2) - v), n2 = (size_t)((c2 ? c2 : f3) - f2);
    if (n1 && parse_seconds(v, n1, &l->keepidle_s) < 0)
        return -1;
    if (n2 && parse_seconds(f2, n2, &l->keepintvl_s) < 0)
        return -1;
    uint64_t cnt = 0;
    if (*f3 && (config_parse_count(f3, &cnt) < 0 || cnt > INT_MAX))
        return -1;
    l->keepcnt = (int)cnt;
    if (!l->keepidle_s && !l->keepintvl_s && !l->keepcnt)
        return -1;
    l->so_keepalive = 1;
    return 0;
}

/* rcvbuf= and sndbuf=: a size with k or m, as nginx's (no g), that an int holds. */
static int parse_buf_size(const char *v, int *out)
{
    uint64_t n;
    size_t len = strlen(v);
    if (len && (v[len - 1] == 'g' || v[len - 1] == 'G'))
        return -1;
    if (config_parse_size(v, &n) < 0 || n > INT_MAX)
        return -1;
    *out = (int)n;
    return 0;
}

/* value of word when it starts with name (as "backlog="), else NULL */
static const char *param_value(const char *word, const char *name)
{
    size_t n = strlen(name);
    return strncmp(word, name, n) == 0 ? word + n : NULL;
}

/* nginx's socket parameters: each says the address's options, and gives it a socket of
 * its own. Returns as config_listen_param. */
static enum config_listen_word socket_param(struct config_listen *l, const char *word,
                                            char *msg, size_t len)
{
    const char *v;
    uint64_t n;
    if (strcmp(word, "bind") == 0) {
        /* nothing more than what every parameter here does */
    } else if (strcmp(word, "deferred") == 0) {
        l->deferred = true;
    } else if ((v = param_value(word, "backlog="))) {
        if (config_parse_count(v, &n) < 0 || n == 0 || n > INT_MAX)
            return snprintf(msg, len, "invalid backlog \"%s\"", word), CONFIG_LISTEN_INVALID;
        l->backlog = (int)n;
    } else if ((v = param_value(word, "rcvbuf="))) {
        if (parse_buf_size(v, &l->rcvbuf_bytes) < 0)
            return snprintf(msg, len, "invalid rcvbuf \"%s\"", word), CONFIG_LISTEN_INVALID;
    } else if ((v = param_value(word, "sndbuf="))) {
        if (parse_buf_size(v, &l->sndbuf_bytes) < 0)
            return snprintf(msg, len, "invalid sndbuf \"%s\"", word), CONFIG_LISTEN_INVALID;
    } else if ((v = param_value(word, "fastopen="))) {
        if (config_parse_count(v, &n) < 0 || n > INT_MAX)
            return snprintf(msg, len, "invalid fastopen \"%s\"", word), CONFIG_LISTEN_INVALID;
        l->fastopen = true;
        l->fastopen_qlen = (int)n;
    } else if ((v = param_value(word, "ipv6only="))) {
        if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
            return snprintf(msg, len, "invalid ipv6only flags \"%s\"", v),
                   CONFIG_LISTEN_INVALID;
        l->ipv6only_off = strcmp(v, "off") == 0;
    } else if ((v = param_value(word, "so_keepalive="))) {
        if (parse_so_keepalive(l, v) < 0)
            return snprintf(msg, len, "invalid so_keepalive value: \"%s\"", v),
                   CONFIG_LISTEN_INVALID;
    } else {
        return CONFIG_LISTEN_UNKNOWN;
    }
    l->options_set = true;
    l->bind = true;
    return CONFIG_LISTEN_SET;
}

enum config_listen_word config_listen_param(struct config_listen *l, const char *word,
                                            char *msg, size_t len)
{
    if (strcmp(word, "ssl") == 0) {
        l->ssl = true;
    } else if (strcmp(word, "reuseport") == 0) {
        l->reuseport = true; /* a socket option too, in nginx: said once, bound apart */
        l->options_set = true;
        l->bind = true;
    } else if (strcmp(word, "proxy_protocol") == 0) {
        l->proxy_protocol = true;
    } else if (param_value(word, "accept_filter=")) {
        snprintf(msg, len, "\"%s\": ignored: accept filters are FreeBSD's (nginx on Linux "
                 "ignores them too; every listener here has TCP_DEFER_ACCEPT)", word);
        return CONFIG_LISTEN_IGNORED;
    } else if (param_value(word, "setfib=")) {
        snprintf(msg, len, "unsupported parameter \"%s\" (setfib is FreeBSD's: nginx on "
                 "Linux refuses it too)", word);
        return CONFIG_LISTEN_INVALID;
    } else {
        return socket_param(l, word, msg, len);
    }
    return CONFIG_LISTEN_SET;
}

/* Both bound, a and b could not listen at once on Linux: the same port, one of them the
 * wildcard of the other's family (or a [::] taking IPv4 too, beside an IPv4 address), and
 * not both with SO_REUSEPORT. */
static bool listen_overlaps(const struct config_listen *a, const struct config_listen *b)
{
    int fa = a->addr.ss_family, fb = b->addr.ss_family;
    if (fa == AF_UNIX || fb == AF_UNIX || (a->reuseport && b->reuseport))
        return false;
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&a->addr;
    const struct sockaddr_in *b4 = (const struct sockaddr_in *)&b->addr;
    if (a4->sin_port != b4->sin_port || a4->sin_port == 0) /* sin6_port sits there too */
        return false;
    if (fa == fb)
        return config_listen_is_wildcard(a) || config_listen_is_wildcard(b);
    const struct config_listen *v6 = fa == AF_INET6 ? a : b;
    return config_listen_is_wildcard(v6) && v6->ipv6only_off;
}

int config_listen_settle(struct config_listen *ls, unsigned n, unsigned *at, char *msg,
                         size_t len)
{
    for (unsigned i = 0; i < n; i++) {
        ls[i].via_wildcard = false;
        if (ls[i].bind || config_listen_is_wildcard(&ls[i]) || ls[i].addr.ss_family == AF_UNIX)
            continue;
        for (unsigned j = 0; j < n; j++)
            if (j != i && ls[j].addr.ss_family == ls[i].addr.ss_family &&
                config_listen_is_wildcard(&ls[j]) && listen_overlaps(&ls[i], &ls[j]))
                ls[i].via_wildcard = true;
        /* both reuseport: the kernel lets both listen, and prefers the exact address */
    }
    for (unsigned i = 0; i < n; i++) {
        for (unsigned j = i + 1; j < n; j++) {
            if (ls[i].via_wildcard || ls[j].via_wildcard || !listen_overlaps(&ls[i], &ls[j]))
                continue;
            *at = j;
            return snprintf(msg, len, "%s and %s cannot both be listened on: on Linux an "
                            "address with a socket of its own (`bind` or another socket "
                            "parameter) beside the wildcard of its port, or a [::] with "
                            "`ipv6only=off` beside an IPv4 address of its port, fails to "
                            "bind, as nginx's start does there", ls[i].text, ls[j].text), -1;
        }
    }
    return 0;
}

/* --- tokenizer and statement tree --------------------------------------------------- */

struct conf_lexer {
    const char *p, *end;
    unsigned line;
    const char *file;
    char *err;
    size_t err_len;
    unsigned tag; /* conf_file_tag of an included file, ORed into its statements' lines */
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
            /* nginx's escapes: \" \' \\ stand for the character, \n \r \t for the
             * control; any other backslash stays (a quoted regex keeps its "\."). */
            char out = *lx->p;
            if (out == '\\' && lx->p + 1 < lx->end) {
                char e = lx->p[1];
                const char *from = "\"'\\nrt", *to = "\"'\\\n\r\t";
                const char *k = e ? strchr(from, e) : NULL;
                if (k) {
                    out = to[k - from];
                    lx->p++;
                }
            }
            if (*lx->p == '\n')
                lx->line++;
            if (n + 1 >= sizeof(buf))
                return lex_error(lx, "quoted value too long");
            buf[n++] = out;
            lx->p++;
        }
        if (lx->p >= lx->end)
            return lex_error(lx, "unterminated quoted value");
        lx->p++;
    } else {
        /* As nginx: "${" opens a variable's name inside a word ("${host}.log"), whose
         * braces are part of the word, not a block. */
        bool in_var = false;
        while (lx->p < lx->end) {
            char ch = *lx->p;
            if (isspace((unsigned char)ch) || ch == ';' || ch == '#')
                break;
            if (ch == '{' && (in_var || n == 0 || buf[n - 1] != '$'))
                break;
            if (ch == '}' && !in_var)
                break;
            if (ch == '{' || ch == '}')
                in_var = ch == '{';
            if (n + 1 >= sizeof(buf))
                return lex_error(lx, "value too long");
            buf[n++] = ch;
            lx->p++;
        }
    }
    buf[n] = '\0';
    *word = strdup(buf);
    if (!*word)
        return lex_error(lx, "out of memory");
    return TOK_WORD;
}

void conf_tree_free(struct conf_node *n)
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
        n->line = lx->line | lx->tag;
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


int conf_parse_text(const char *file, const char *text, size_t len, struct conf_node **tree,
                    char *err, size_t err_len)
{
    if (err_len)
        err[0] = '\0';
    *tree = NULL;
    struct conf_lexer lx = {text, text + len, 1, file, err, err_len, 0};
    if (conf_parse_block(&lx, tree, 0) == 0)
        return 0;
    conf_tree_free(*tree);
    *tree = NULL;
    return -1;
}

/* --- directives with a setter ------------------------------------------------------- */

/* What the core's setters are given: the reader, for a class's statements, and the
 * modules' directives, which a class block may not hold either. */
struct core_read {
    struct conf_reader *r;
    const struct conf_directive *table;
    config_known_fn known;
};

/* "invalid ..." for what config_parse_listen_range said of text. */
static int bad_listen(int rc, const char *text, char *msg, size_t len)
{
    if (rc == -2)
        return snprintf(msg, len, "invalid port range in \"%s\"", text), -1;
    return snprintf(msg, len, "invalid listen address \"%s\"", text), -1;
}

/* text's addresses (a port range's each) after l[0 .. *n); *added says how many. */
static int add_listen(struct config_listen *l, unsigned *n, const char *text, unsigned *added,
                      char *msg, size_t len)
{
    struct config_listen first;
    unsigned ports;
    int rc = config_parse_listen_range(text, &first, &ports);
    if (rc < 0)
        return bad_listen(rc, text, msg, len);
    if (*n + ports > CONFIG_MAX_LISTEN)
        return snprintf(msg, len, "at most %d listen addresses", CONFIG_MAX_LISTEN), -1;
    for (unsigned k = 0; k < ports; k++) {
        l[*n] = first;
        config_listen_nth(&l[(*n)++], k);
    }
    *added = ports;
    return 0;
}

/* The parameters of a top-level `listen` (n's words after the address) on its addresses
 * l[0 .. added). */
static int listen_params(struct config_listen *l, unsigned added, const struct conf_node *n,
                         struct core_read *cr, char *msg, size_t len)
{
    for (unsigned i = 1; i < n->n_args; i++) {
        enum config_listen_word w = CONFIG_LISTEN_UNKNOWN;
        for (unsigned k = 0; k < added; k++)
            w = config_listen_param(&l[k], n->args[i], msg, len);
        if (w == CONFIG_LISTEN_IGNORED)
            conf_notice(cr->r, n->line, "listen: %s", msg);
        else if (w == CONFIG_LISTEN_UNKNOWN)
            return snprintf(msg, len, "unsupported parameter \"%s\" (only " LISTEN_PARAMS ")",
                            n->args[i]), -1;
        else if (w == CONFIG_LISTEN_INVALID)
            return -1;
    }
    return 0;
}

static int set_listen(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct config *cfg = base;
    if (config_next(cfg, "listen", NULL) == n)
        cfg->n_listen = 0; /* the first listen replaces the default */
    unsigned added;
    if (add_listen(cfg->listen, &cfg->n_listen, n->args[0], &added, msg, len) < 0)
        return -1;
    for (unsigned k = cfg->n_listen - added; k < cfg->n_listen; k++)
        cfg->listen[k].line = n->line;
    return listen_params(&cfg->listen[cfg->n_listen - added], added, n, ctx, msg, len);
}

static int set_index(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct config *cfg = base;
    (void)ctx;
    for (unsigned i = 0; i < n->n_args; i++) {
        const char *a = n->args[i];
        if (strlen(a) >= sizeof(cfg->index[0]) || a[0] == '\0' ||
            (a[0] != '/' && strchr(a, '/'))) /* "/URI" is an absolute one */
            return snprintf(msg, len, "invalid index file name \"%s\"", a), -1;
        snprintf(cfg->index[i], sizeof(cfg->index[i]), "%s", a);
    }
    cfg->n_index = n->n_args;
    return 0;
}

/* nginx's eight levels on lfhttpd's four: notice is info, crit, alert and emerg are error
 * (lfhttpd's errors are all of those: what stops a request, a reload or the start). */
static const struct conf_name log_levels[] = {
    {"error", LOG_LEVEL_ERROR}, {"warn", LOG_LEVEL_WARN}, {"info", LOG_LEVEL_INFO},
    {"debug", LOG_LEVEL_DEBUG}, {"notice", LOG_LEVEL_INFO}, {"crit", LOG_LEVEL_ERROR},
    {"alert", LOG_LEVEL_ERROR}, {"emerg", LOG_LEVEL_ERROR}, {NULL, 0},
};

/* `access_log PATH [FORMAT [OPTION...]];` at the top level: one plain `PATH` (or `PATH
 * combined`) is the server's own buffered log; a format, an option or a second statement
 * makes them all nginx's, written by mod_log, which reads the same statements. */
static int set_access_log(void *base, const struct conf_node *n, void *ctx, char *msg,
                          size_t len)
{
    struct config *cfg = base;
    (void)ctx;
    bool plain = n->n_args == 1 || (n->n_args == 2 && strcmp(n->args[1], "combined") == 0);
    if (strcmp(n->args[0], "off") == 0 && n->n_args > 1)
        return snprintf(msg, len, "\"off\" takes no other parameter"), -1;
    if (strchr(n->args[0], '$')) /* a file per line: the log module's (mod_log.c) */
        plain = false;
    if (cfg->access_log_statements > 0 &&
        (strcmp(n->args[0], "off") == 0 ||
         (!cfg->access_log_by_format && strcmp(cfg->access_log, "off") == 0)))
        return snprintf(msg, len, "access_log off with another access_log"), -1;
    if (strlen(n->args[0]) >= sizeof(cfg->access_log))
        return snprintf(msg, len, "path too long"), -1;
    if (cfg->access_log_statements++ == 0 && plain) {
        snprintf(cfg->access_log, sizeof(cfg->access_log), "%s", n->args[0]);
        return 0;
    }
    cfg->access_log_by_format = true;
    snprintf(cfg->access_log, sizeof(cfg->access_log), "off");
    return 0;
}

int config_log_level(const char *name, enum log_level *level, bool *above_error)
{
    int v;
    if (conf_name_value(log_levels, name, &v) < 0)
        return -1;
    *level = (enum log_level)v;
    *above_error = !strcmp(name, "crit") || !strcmp(name, "alert") || !strcmp(name, "emerg");
    return 0;
}

/* `error_log PATH [LEVEL];` in a server or location: checked here, opened with the block's
 * settings (module_level.c). */
static int check_block_error_log(void *base, const struct conf_node *n, void *ctx, char *msg,
                                 size_t len)
{
    (void)base;
    struct core_read *cr = ctx;
    enum log_level level;
    bool above;
    if (strcmp(n->args[0], "off") == 0 && n->n_args == 1) {
        conf_notice(cr->r, n->line, "error_log off: nginx would write a file named \"off\"; "
                    "here the block's messages about its requests are not written");
        return 0;
    }
    if (n->n_args == 2 && config_log_level(n->args[1], &level, &above) < 0)
        return snprintf(msg, len, "invalid level \"%s\" (debug, info, notice, warn, error, "
                        "crit, alert, emerg)", n->args[1]), -1;
    return 0;
}

/* `error_log PATH [LEVEL];` */
static int set_error_log(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    struct config *cfg = base;
    struct core_read *cr = ctx;
    if (strcmp(n->args[0], "off") == 0)
        return snprintf(msg, len, "the error log cannot be off; use a level instead"), -1;
    int level = cfg->error_level;
    if (n->n_args == 2 && conf_name_value(log_levels, n->args[1], &level) < 0)
        return snprintf(msg, len, "invalid level \"%s\" (debug, info, notice, warn, error, "
                        "crit, alert, emerg)", n->args[1]), -1;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    if (n->n_args == 2 && strcmp(n->args[1], names[level]) != 0)
        conf_notice(cr->r, n->line, "error_log: level %s is lfhttpd's %s (its levels: error, "
                    "warn, info, debug)", n->args[1], names[level]);
    snprintf(cfg->error_log, sizeof(cfg->error_log), "%s", n->args[0]);
    cfg->error_level = (enum log_level)level;
    return 0;
}

/* --- service classes ------------------------------------------------------------- */

int config_cidr_parse(const char *text, struct config_cidr *c)
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
        uint64_t bits;
        if (config_parse_count(slash + 1, &bits) < 0 || bits > c->prefix_bits)
            return -1;
        c->prefix_bits = (unsigned)bits;
    }
    return 0;
}

bool config_cidr_match(const struct config_cidr *c, const struct sockaddr *sa)
{
    const uint8_t *a;
    uint8_t mapped[4];
    if (sa->sa_family == AF_UNIX || c->family == AF_UNIX) /* `unix:`: a Unix socket's client */
        return sa->sa_family == c->family;
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

static const struct conf_name priorities[] = {
    {"high", -10}, {"normal", 0}, {"low", 10}, {NULL, 0},
};

/* `priority high|normal|low|NICE;`, NICE from -20 to 19. */
static int set_priority(void *base, const struct conf_node *n, void *ctx, char *msg,
                        size_t len)
{
    struct config_class *k = base;
    const char *v = n->args[0];
    uint64_t nice;
    (void)ctx;
    if (conf_name_value(priorities, v, &k->nice) == 0)
        return 0;
    bool minus = v[0] == '-';
    if (config_parse_count(v + minus, &nice) == 0 && nice <= (minus ? 20u : 19u)) {
        k->nice = minus ? -(int)nice : (int)nice;
        return 0;
    }
    return snprintf(msg, len, "expected high, normal, low or -20..19, not \"%s\"", v), -1;
}

/* `match path PREFIX;`, `match host NAME;`, `match addr CIDR;` */
static int set_match(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct config_class *k = base;
    const char *kind = n->args[0], *v = n->args[1];
    (void)ctx;
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
        if (k->n_addrs == CONFIG_CLASS_RULES || config_cidr_parse(v, &k->addrs[k->n_addrs]) < 0)
            return snprintf(msg, len, "invalid address or network \"%s\"", v), -1;
        k->n_addrs++;
    } else {
        return snprintf(msg, len, "unknown match kind \"%s\" (path, host, addr)", kind), -1;
    }
    return 0;
}

static int set_class_listen(void *base, const struct conf_node *n, void *ctx, char *msg,
                            size_t len)
{
    struct config_class *k = base;
    (void)ctx;
    unsigned added;
    return add_listen(k->listen, &k->n_listen, n->args[0], &added, msg, len);
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
            return snprintf(msg, len, "\"%s\" is defined twice", k->name), -1;
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

/* `class NAME { ... }`: its statements are read as the class's, with their own lines. */
static int set_class(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct config *cfg = base;
    struct core_read *cr = ctx;
    if (cfg->n_classes == CONFIG_MAX_CLASSES)
        return snprintf(msg, len, "at most %d classes", CONFIG_MAX_CLASSES), -1;
    const char *name = n->args[0];
    if (strlen(name) >= sizeof(cfg->classes[0].name) || strcmp(name, "default") == 0 ||
        !isalpha((unsigned char)name[0]))
        return snprintf(msg, len, "invalid class name \"%s\" (\"default\" is taken)", name), -1;
    struct config_class *k = &cfg->classes[cfg->n_classes];
    memset(k, 0, sizeof(*k));
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->line = n->line;
    k->threads = 1;
    k->groups = CONFIG_GROUPS_UNSET;
    char owner[64];
    snprintf(owner, sizeof(owner), "class %s", name);
    struct conf_reader sub = *cr->r;
    sub.owner = owner;
    sub.context = CONF_CLASS;
    sub.errors = 0;
    int rc = conf_read_block(&sub, cr->table, cr->known, n->children, k);
    cr->r->errors += sub.errors;
    if (rc < 0)
        return -1; /* reported, line by line */
    if (class_overlap(cfg, k, msg, len) < 0)
        return -1;
    cfg->n_classes++;
    return 0;
}

/* `server { }` and `location { }`: their statements are checked here (where each may
 * stand, how often); their values are read per block when the module chain builds the
 * sites (site.h, module_level.c). */
static int read_site_block(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    struct core_read *cr = ctx;
    (void)msg;
    (void)len;
    struct conf_reader sub = *cr->r;
    sub.context = strcmp(n->name, "server") == 0 ? CONF_SERVER : CONF_LOCATION;
    sub.errors = 0;
    struct core_read sub_cr = *cr; /* the setters see the block's reader and context */
    sub_cr.r = &sub;
    sub.ctx = &sub_cr;
    int rc = conf_read_block(&sub, cr->table, cr->known, n->children, base);
    cr->r->errors += sub.errors;
    return rc < 0 ? -1 : 0;
}

/* `set $NAME VALUE`: NAME is declared as the file is read (vars_declare), so that a value
 * anywhere may use it, as nginx's; the rewrite module sets it per request. */
/* $NAME, the statement's argument k, declared for `set` or `map` (vars_declare). */
static int declare_arg(const struct conf_node *n, unsigned k, char *msg, size_t len)
{
    const char *name = n->args[k];
    if (name[0] != '$' || vars_declare(name + 1, strlen(name + 1)) < 0)
        return snprintf(msg, len, "%s: invalid variable \"%s\" (a $NAME that is not a "
                        "built-in variable)", n->name, name), -1;
    return 0;
}

static int declare_set(void *base, const struct conf_node *n, void *ctx, char *msg,
                       size_t len)
{
    (void)base;
    (void)ctx;
    return declare_arg(n, 0, msg, len);
}

/* `if (...) { }`: its `set` statements are declared too; the rest is read with the block's
 * rewrite directives (rewrite.c). */
static int declare_if_sets(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    for (const struct conf_node *c = n->children; c; c = c->next)
        if (strcmp(c->name, "set") == 0 && c->n_args == 2 &&
            declare_set(base, c, ctx, msg, len) < 0)
            return -1;
    return 0;
}

/* The methods nginx's `limit_except` names (its list, WebDAV's included). */
static const char *const limit_except_methods[] = {
    "GET", "HEAD", "POST", "PUT", "DELETE", "MKCOL", "COPY", "MOVE", "OPTIONS", "PROPFIND",
    "PROPPATCH", "LOCK", "UNLOCK", "PATCH", NULL,
};

/* `limit_except METHOD... { }`: each METHOD one nginx knows, without case. */
static int check_limit_except(void *base, const struct conf_node *n, void *ctx, char *msg,
                              size_t len)
{
    (void)base;
    (void)ctx;
    for (unsigned i = 0; i < n->n_args; i++) {
        unsigned k = 0;
        while (limit_except_methods[k] && strcasecmp(limit_except_methods[k], n->args[i]))
            k++;
        if (!limit_except_methods[k])
            return snprintf(msg, len, "invalid method \"%s\"", n->args[i]), -1;
    }
    return 0;
}

/* `geo [$ADDRESS] $NAME { }`: as a map's, its $NAME (the last value) declared now. */
static int declare_geo(void *base, const struct conf_node *n, void *ctx, char *msg,
                       size_t len)
{
    (void)base;
    (void)ctx;
    return declare_arg(n, n->n_args - 1, msg, len);
}

/* `map SOURCE $NAME { }`: $NAME is declared as the file is read, so that a value anywhere
 * may use it; the entries are read with the blocks (rewrite.c). */
static int declare_map(void *base, const struct conf_node *n, void *ctx, char *msg,
                       size_t len)
{
    (void)base;
    (void)ctx;
    return declare_arg(n, 1, msg, len);
}

int config_parse_keepalive(const struct conf_node *n, unsigned *timeout_ms, unsigned *header_s,
                           char *msg, size_t len)
{
    unsigned header_ms = 0;
    if (config_parse_duration_ms(n->args[0], timeout_ms) < 0 ||
        (n->n_args == 2 && config_parse_duration_ms(n->args[1], &header_ms) < 0))
        return snprintf(msg, len, "invalid duration \"%s\"",
                        n->args[n->n_args == 2 ? 1 : 0]), -1;
    *header_s = header_ms / 1000;
    return 0;
}

int config_parse_keepalive_disable(const struct conf_node *n, uint8_t *bits, char *msg,
                                   size_t len)
{
    *bits = 0;
    for (unsigned i = 0; i < n->n_args; i++) {
        const char *a = n->args[i];
        if (strcmp(a, "msie6") == 0)
            *bits |= CONFIG_KA_DISABLE_MSIE6;
        else if (strcmp(a, "safari") == 0)
            *bits |= CONFIG_KA_DISABLE_SAFARI;
        else if (strcmp(a, "none") != 0 || n->n_args > 1)
            return snprintf(msg, len, "invalid value \"%s\" (none, or msie6 and safari)", a),
                   -1;
    }
    return 0;
}

static int set_keepalive_disable(void *base, const struct conf_node *n, void *ctx, char *msg,
                                 size_t len)
{
    struct config *cfg = base;
    (void)ctx;
    return config_parse_keepalive_disable(n, &cfg->keepalive_disable, msg, len);
}

/* `keepalive_timeout TIMEOUT [HEADER_TIMEOUT]`, nginx's two values. */
static int set_keepalive_timeout(void *base, const struct conf_node *n, void *ctx, char *msg,
                                 size_t len)
{
    struct config *cfg = base;
    (void)ctx;
    return config_parse_keepalive(n, &cfg->keepalive_timeout_ms, &cfg->keepalive_header_s, msg,
                                  len);
}

/* An on|off of a server or location, read by the sites. */
static int check_flag(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)base;
    (void)ctx;
    if (strcmp(n->args[0], "on") != 0 && strcmp(n->args[0], "off") != 0)
        return snprintf(msg, len, "expected \"on\" or \"off\", not \"%s\"", n->args[0]), -1;
    return 0;
}

/* `listen ADDR [default_server] ...;` in a server: checked here (the notices are the
 * sites'), grouped by the sites. */
static int check_site_listen(void *base, const struct conf_node *n, void *ctx, char *msg,
                             size_t len)
{
    struct config_listen l;
    unsigned ports;
    (void)base;
    (void)ctx;
    int rc = config_parse_listen_range(n->args[0], &l, &ports);
    if (rc < 0)
        return bad_listen(rc, n->args[0], msg, len);
    for (unsigned i = 1; i < n->n_args; i++) {
        if (strcmp(n->args[i], "default_server") == 0 || strcmp(n->args[i], "default") == 0 ||
            strcmp(n->args[i], "http2") == 0)
            continue;
        enum config_listen_word w = config_listen_param(&l, n->args[i], msg, len);
        if (w == CONFIG_LISTEN_UNKNOWN)
            return snprintf(msg, len, "unsupported parameter \"%s\" (only default_server, "
                            "http2, " LISTEN_PARAMS ")", n->args[i]), -1;
        if (w == CONFIG_LISTEN_INVALID)
            return -1;
    }
    return 0;
}

/* --- nginx's main context and events { } ------------------------------------------------ */

/* `user USER [GROUP];`: checked now, applied once the listeners are bound and the keys
 * read (main.c). The group defaults to the one named as the user, as nginx's. */
static int set_user(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct config *cfg = base;
    struct core_read *cr = ctx;
    if (geteuid() != 0) {
        conf_notice(cr->r, n->line, "user: ignored, the server is not started by root "
                    "(it runs as the user who starts it, as nginx warns)");
        return 0;
    }
    const char *group = n->n_args == 2 ? n->args[1] : n->args[0];
    if (strlen(n->args[0]) >= sizeof(cfg->user) || strlen(group) >= sizeof(cfg->group))
        return snprintf(msg, len, "name too long"), -1;
    if (!getpwnam(n->args[0]))
        return snprintf(msg, len, "no user \"%s\"", n->args[0]), -1;
    if (!getgrnam(group))
        return snprintf(msg, len, "no group \"%s\"", group), -1;
    snprintf(cfg->user, sizeof(cfg->user), "%s", n->args[0]);
    snprintf(cfg->group, sizeof(cfg->group), "%s", group);
    return 0;
}

/* `worker_processes N|auto;`: one process whose default class has N threads, or one per
 * CPU core with auto (`threads`); said at -t (config_load). */
static int set_worker_processes(void *base, const struct conf_node *n, void *ctx, char *msg,
                                size_t len)
{
    struct config *cfg = base;
    uint64_t v;
    (void)ctx;
    if (strcmp(n->args[0], "auto") == 0) {
        cfg->threads = 0;
        return 0;
    }
    if (config_parse_count(n->args[0], &v) < 0 || v < 1 || v > 1024)
        return snprintf(msg, len, "expected auto or 1 to 1024, not \"%s\"", n->args[0]), -1;
    cfg->threads = (unsigned)v;
    return 0;
}

/* An nginx directive that means nothing here, or something done another way: accepted,
 * and its line of the table (.doc) said at -t, so that no file changes meaning in silence. */
static int note_nginx_only(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    struct core_read *cr = ctx;
    (void)base;
    (void)msg;
    (void)len;
    const struct conf_directive *d = conf_table_find(cr->table, n->name, cr->r->context);
    conf_notice(cr->r, n->line, "%s: accepted, not used: %s", n->name, d ? d->doc : "");
    return 0;
}

/* `client_body_in_single_buffer on|off`: a body a handler reads is one buffer here
 * always, what nginx's `on` asks for $request_body; said at -t. */
static int note_single_buffer(void *base, const struct conf_node *n, void *ctx, char *msg,
                              size_t len)
{
    if (check_flag(base, n, ctx, msg, len) < 0)
        return -1;
    return note_nginx_only(base, n, ctx, msg, len);
}

/* `client_body_in_file_only off`, nginx's default: the only value, as no body is ever
 * written to a file here (nginx's `on` and `clean` would leave $request_body empty and
 * name the file in $request_body_file). */
static int set_body_in_file_only(void *base, const struct conf_node *n, void *ctx, char *msg,
                                 size_t len)
{
    (void)base;
    (void)ctx;
    if (strcmp(n->args[0], "off") == 0)
        return 0;
    if (strcmp(n->args[0], "on") != 0 && strcmp(n->args[0], "clean") != 0)
        return snprintf(msg, len, "expected \"on\", \"clean\" or \"off\", not \"%s\"",
                        n->args[0]), -1;
    return snprintf(msg, len, "only \"off\": request bodies are held in memory here, never "
                    "written to files"), -1;
}

/* `large_client_header_buffers N SIZE` at the top level: the head is read into one buffer
 * here, of max_header_size bytes: N times SIZE, within its bounds (nginx's limits of a
 * request line and of each field to SIZE are not kept apart), said at -t. */
static int set_large_header_buffers(void *base, const struct conf_node *n, void *ctx, char *msg,
                                    size_t len)
{
    struct core_read *cr = ctx;
    struct config *cfg = base;
    uint64_t count, size;
    if (config_parse_count(n->args[0], &count) < 0 || count == 0)
        return snprintf(msg, len, "invalid number \"%s\"", n->args[0]), -1;
    if (config_parse_size(n->args[1], &size) < 0 || size == 0)
        return snprintf(msg, len, "invalid size \"%s\"", n->args[1]), -1;
    uint64_t total = count > CONFIG_MAX_HEADER_SIZE / size ? CONFIG_MAX_HEADER_SIZE : count * size;
    if (total < 256)
        total = 256;
    if (total > CONFIG_MAX_HEADER_SIZE)
        total = CONFIG_MAX_HEADER_SIZE;
    cfg->max_header_size = (size_t)total;
    conf_notice(cr->r, n->line, "large_client_header_buffers: the request head is read into "
                "one buffer here: max_header_size %zu (nginx limits the request line and each "
                "field to %s apart)", cfg->max_header_size, n->args[1]);
    return 0;
}

#define EVENTS CONF_EVENTS
#define NOTE_EVENTS "nginx's event loop; lfhttpd's is epoll always, each thread taking " \
    "what is ready as Leader/Followers"

static const struct conf_directive events_directives[] = {
    {"worker_connections", CONF_COUNT, EVENTS, .min = 1, .max = 10000000,
     CONF_AT(struct config, worker_connections), .dflt = "(none)",
     .doc = "nginx's connections per worker: here `max_connections` becomes N times the "
            "threads of the default class (one per CPU core with `worker_processes auto`), "
            "unless the file sets `max_connections`."},
    {"multi_accept", CONF_FLAG, EVENTS, .set = note_nginx_only,
     .doc = NOTE_EVENTS "; a listener's thread always accepts what is queued, in batches."},
    {"use", CONF_STRING, EVENTS, .set = note_nginx_only, .usage = "METHOD", .doc = NOTE_EVENTS "."},
    {"accept_mutex", CONF_FLAG, EVENTS, .set = note_nginx_only,
     .doc = NOTE_EVENTS "; each thread group has its own listening socket (`SO_REUSEPORT`)."},
    {"accept_mutex_delay", CONF_STRING, EVENTS, .set = note_nginx_only, .usage = "TIME",
     .doc = NOTE_EVENTS "; there is no accept mutex."},
    {"worker_aio_requests", CONF_STRING, EVENTS, .set = note_nginx_only, .usage = "NUMBER",
     .doc = "nginx's asynchronous file I/O; lfhttpd sends files with `sendfile(2)`."},
    {.name = NULL},
};

const struct conf_directive *config_events_directives(void)
{
    return events_directives;
}

/* `events { }`: its statements, read against their own table. */
static int read_events(void *base, const struct conf_node *n, void *ctx, char *msg,
                       size_t len)
{
    struct core_read *cr = ctx;
    (void)msg;
    (void)len;
    struct conf_reader sub = *cr->r;
    sub.context = CONF_EVENTS;
    sub.errors = 0;
    struct core_read events = {&sub, events_directives, NULL};
    sub.ctx = &events;
    int rc = conf_read_block(&sub, events_directives, NULL, n->children, base);
    cr->r->errors += sub.errors;
    return rc < 0 ? -1 : 0;
}

/* --- the core's table ----------------------------------------------------------------- */

static const struct conf_name strategies[] = {
    {"leader_followers", LF_STRATEGY_LEADER_FOLLOWERS},
    {"half_sync_half_async", LF_STRATEGY_HALF_SYNC_HALF_ASYNC},
    {"thread_per_connection", LF_STRATEGY_THREAD_PER_CONNECTION},
    {NULL, 0},
};

static const struct conf_name promotions[] = {
    {"lifo", LF_PROMOTE_LIFO}, {"condvar", LF_PROMOTE_CONDVAR}, {NULL, 0},
};

static const struct conf_name reactivations[] = {
    {"oneshot", LF_REACTIVATE_ONESHOT}, {"edge", LF_REACTIVATE_EDGE}, {NULL, 0},
};

static const struct conf_name log_formats[] = {{"combined", 0}, {"json", 1}, {NULL, 0}};

#define TOP CONF_TOP
#define CLASS CONF_CLASS
#define SITE CONF_SERVER
#define LOC CONF_LOCATION
#define CFG(field) CONF_AT(struct config, field)
#define KLASS(field) CONF_AT(struct config_class, field)

/* The documentation of a directive that stands on several lines of the table. */
#define DOC_ROOT "The document root: files are served from DIR + path, and nothing outside it " \
    "is ever served. With server blocks, a missing default `www` is no error (nginx does not " \
    "check its default root either). The `-r` flag overrides the top level's. DIR may hold " \
    "variables (`root /srv/$host;`): the file is opened beneath the directory its literal " \
    "text begins with (`/srv`), and a `.` or `..` segment a variable brings names no file " \
    "(404)."
#define DOC_INDEX "Files tried, in order, for a directory (the shipped `conf/lfhttpd.conf` " \
    "sets `index.html index.htm`); several on one line, not repeated. In a server's " \
    "location without a handler, as nginx's: the first that exists is an internal " \
    "redirect (`$uri` becomes `/dir/index.html`, and the location is searched again); a " \
    "name starting with `/` is a URI redirected to as it is (last in the list); names may " \
    "hold variables."
#define DOC_THREADS "Threads of the class (the top level's: of the default class); 0 = one " \
    "per CPU core. The `-n` flag overrides the top level's."
#define DOC_GROUPS "The threads split into N thread groups (as evenly as they go), each with " \
    "its own handle set and its own listening socket per address (`SO_REUSEPORT`: the " \
    "kernel spreads new connections over them); a connection stays in the group that " \
    "accepted it, and the threads of a group lead and follow. 0 = one per CPU core; never " \
    "more groups than threads. Default: one per CPU with `leader_followers`, else 1."
#define DOC_MAX_CONN "Connections open at once (of the class, in a class block); beyond it " \
    "new ones get a 503 (with `Date`, `Server` and `Retry-After: 1`) and are closed after " \
    "what they sent so far is read, so the client sees the 503, not a reset."
#define DOC_ABSOLUTE_REDIRECT "A redirect to a path (`return 301 /new`, a directory's " \
    "missing `/`) names `http://HOST[:PORT]`: the Host without its port (else the server's " \
    "first name, else the local address) and the port the connection came in on, left out " \
    "when 80, as nginx. `off`: the `Location` is the path alone."

#define DOC_LISTEN_SOCKET "nginx's socket parameters, each giving the address a socket of " \
    "its own: `backlog=N` (listen()'s queue, default 4096 here, nginx's 511; the kernel caps " \
    "it at `net.core.somaxconn`); `rcvbuf=SIZE` and `sndbuf=SIZE` (SO_RCVBUF and SO_SNDBUF, " \
    "`k` or `m`; accepted connections inherit them); `so_keepalive=on|off|" \
    "[IDLE]:[INTVL]:[CNT]` (SO_KEEPALIVE, and TCP_KEEPIDLE, TCP_KEEPINTVL in seconds, `30m` " \
    "as nginx's times, and TCP_KEEPCNT; an empty or 0 field keeps the kernel's, not all " \
    "three); `fastopen=N` (TCP Fast Open's queue, net.ipv4.tcp_fastopen permitting); " \
    "`ipv6only=on|off` (default on; off: a `[::]` socket takes IPv4 connections too); " \
    "`deferred` (accepted: every listener has TCP_DEFER_ACCEPT, up to " \
    "`client_header_timeout`); `bind`. `accept_filter=` (FreeBSD's) is ignored with a " \
    "notice and `setfib=` refused, as nginx on Linux does. A parameter the kernel refuses " \
    "is logged and left out. Changing one needs a restart."

static const struct conf_directive core_directives[] = {
    {"listen", CONF_LIST, TOP, CONF_REPEATS, .min_args = 1, .max_args = 16, .set = set_listen,
     .usage = "ADDR:PORT|unix:PATH [ssl] [reuseport] [proxy_protocol] [bind] [deferred] "
              "[backlog=N] [rcvbuf=SIZE] [sndbuf=SIZE] [ipv6only=on|off] "
              "[so_keepalive=on|off|[IDLE]:[INTVL]:[CNT]] [fastopen=N]", .dflt = "8080",
     .doc = "Where to accept connections; repeatable. `8080`, `127.0.0.1:8080`, `*:8080`, "
            "`[::]:8080`, or a range of ports, `127.0.0.1:8000-8003` (each an address; at "
            "most 16 in all); port 0 picks a free port and logs it. `unix:PATH`: a Unix-domain "
            "socket, as nginx's (made readable and writable by all, removed at exit; one "
            "socket whatever the thread groups; a socket file nobody listens on is replaced "
            "at start, where nginx refuses to start); its clients' `$remote_addr` is "
            "`unix:`, `$server_addr` `unix:PATH`, `$server_port` empty. `ssl`: connections on this "
            "address speak TLS. `reuseport`: other lfhttpd processes (same user, also with "
            "`reuseport`) may listen on the address too and the kernel spreads new "
            "connections over all of them; without it a second process on the address fails "
            "with \"Address already in use\". `proxy_protocol`: each connection starts with "
            "a PROXY protocol header (v1 or v2), read before the TLS handshake and the first "
            "request within `client_header_timeout`; a missing or malformed one closes the "
            "connection with an error-log line. " DOC_LISTEN_SOCKET " The `-l` flag replaces the "
            "top level's lines."},
    {"listen", CONF_STRING, CLASS, CONF_REPEATS, .set = set_class_listen, .usage = "ADDR:PORT",
     .doc = "Connections accepted here belong to the class; an address belongs to one "
            "class only."},
    {"listen", CONF_LIST, SITE, CONF_REPEATS, .min_args = 1, .max_args = 16,
     .set = check_site_listen,
     .usage = "ADDR:PORT|unix:PATH [default_server] [ssl] [http2] [proxy_protocol] "
              "[reuseport] [bind] [deferred] [backlog=N] [rcvbuf=SIZE] [sndbuf=SIZE] "
              "[ipv6only=on|off] [so_keepalive=on|off|[IDLE]:[INTVL]:[CNT]] [fastopen=N]",
     .dflt = "(the top level's, else 8080)",
     .doc = "The addresses a server answers on (`unix:PATH` as the top level's); at most "
            "one `default_server` (or nginx's older `default`) per address; a range of ports, "
            "`127.0.0.1:8000-8003`, is as many addresses, as nginx's. One server's "
            "`ssl` makes the address a TLS one "
            "for every server on it, and one server's `reuseport` shares the address's "
            "socket with other processes. `http2` is accepted with a notice at `-t`: HTTP/1.1 "
            "is spoken, and TLS clients are offered `http/1.1` by ALPN. `proxy_protocol`: as "
            "the top level's (one server's makes the address expect the header). " DOC_LISTEN_SOCKET
            " An address another server's `listen` names too takes the parameters of the one "
            "that says them: two that do are refused (\"duplicate listen options\", as "
            "nginx's). Without `bind` (or another socket parameter), an address beside the "
            "wildcard of its port (`listen 80` in one server, `listen 127.0.0.1:80` in "
            "another) has no socket of its own: the wildcard's accepts its connections, and "
            "they still go to its servers, as nginx's; with one, it cannot listen beside the "
            "wildcard on Linux, and `-t` says so (nginx's start fails at `bind()`)."},
    {"root", CONF_PATH, TOP, CFG(root), .usage = "DIR", .dflt = "www", .doc = DOC_ROOT,
     .id = CONFIG_ID_ROOT},
    {"root", CONF_PATH, SITE | LOC, .set = conf_set_later, .usage = "DIR",
     .dflt = "(the outer block's)",
     .doc = DOC_ROOT,
     .id = CONFIG_ID_ROOT},
    /* HTTPS (tls.c reads them, with the sites) */
    {"ssl_certificate", CONF_PATH, TOP | SITE, CONF_REPEATS, .set = conf_set_later,
     .usage = "FILE",
     .doc = "PEM, the leaf first and then its chain; repeat it with its key for an RSA and "
            "an ECDSA pair (the client's signature algorithms choose)."},
    {"ssl_certificate_key", CONF_PATH, TOP | SITE, CONF_REPEATS, .set = conf_set_later,
     .usage = "FILE", .doc = "The key of the certificate at the same place in the list."},
    {"ssl_protocols", CONF_LIST, TOP | SITE, .min_args = 1, .max_args = 4, .set = conf_set_later,
     .usage = "TLSv1.2 TLSv1.3", .dflt = "TLSv1.2 TLSv1.3",
     .doc = "The TLS versions offered, of `TLSv1.2` and `TLSv1.3`. `TLSv1` and `TLSv1.1` "
            "(Debian's stock nginx.conf names them) are accepted with a notice at `-t` and not "
            "offered; `SSLv2` and `SSLv3` are refused."},
    {"ssl_ciphers", CONF_STRING, TOP | SITE, .set = conf_set_later, .usage = "CIPHERS",
     .dflt = "ECDHE+AESGCM:ECDHE+CHACHA20",
     .doc = "The TLS 1.2 list (the default is forward secret and AEAD only, so no "
            "`ssl_dhparam` is needed); TLS 1.3's suites are OpenSSL's."},
    {"ssl_prefer_server_ciphers", CONF_FLAG, TOP | SITE, .set = check_flag, .dflt = "off",
     .doc = "The server's order of ciphers over the client's."},
    {"ssl_session_timeout", CONF_STRING, TOP | SITE, .set = conf_set_later, .usage = "TIME",
     .dflt = "5m",
     .doc = "How long a session can be resumed (the ticket lifetime too); ticket keys "
            "rotate every half of the longest one loaded."},
    {"ssl_session_tickets", CONF_FLAG, TOP | SITE, .set = check_flag, .dflt = "on",
     .doc = "Resumption by ticket; `off` leaves resumption by session ID."},
    {"ssl_session_cache", CONF_LIST, TOP | SITE, .min_args = 1, .max_args = 2,
     .set = conf_set_later, .usage = "off | none | builtin[:N] | shared:NAME:SIZE",
     .dflt = "builtin:20480",
     .doc = "The cache of sessions resumed by ID (`shared`: about 4,000 sessions a "
            "megabyte). It is the address's: a server whose cache differs from its "
            "address's default server's has its sessions kept there, with a warning."},
    {"ssl_dhparam", CONF_PATH, TOP | SITE, .set = conf_set_later, .usage = "FILE",
     .dflt = "(none)",
     .doc = "PEM DH parameters (`openssl dhparam`) for the `DHE` suites of an `ssl_ciphers` "
            "list, as certbot's configurations name; without it those suites are not chosen."},
    {"ssl_ecdh_curve", CONF_STRING, TOP | SITE, .set = conf_set_later, .usage = "auto | CURVES",
     .dflt = "auto",
     .doc = "OpenSSL 3's default groups with `auto` (X25519, P-256, X448, P-521, P-384, "
            "ffdhe2048 to 8192), or a list."},
    {"ssl_verify_client", CONF_STRING, TOP | SITE, .set = conf_set_later,
     .usage = "on | off | optional | optional_no_ca", .dflt = "off",
     .doc = "Ask the client for a certificate and check it against `ssl_client_certificate` "
            "and `ssl_trusted_certificate` (and `ssl_crl`). The handshake completes whatever "
            "comes, as nginx's; a request then gets a 400 (\"The SSL certificate error\") "
            "when the certificate did not verify, and with `on` when none was sent (\"No "
            "required SSL certificate was sent\"), and the connection is closed (`error_page "
            "495` and `496` answer them instead, still with 400). "
            "`optional_no_ca` lets a certificate of an unknown issuer through. The "
            "certificate is asked for by the server the client's SNI names; the request's "
            "server (by Host) checks it, and a Host other than the SNI name, to a server "
            "that checks, is answered 421, as nginx's."},
    {"ssl_client_certificate", CONF_PATH, TOP | SITE, .set = conf_set_later, .usage = "FILE",
     .dflt = "(none)",
     .doc = "PEM certificates of the issuers trusted for client certificates; their names "
            "are sent to the client as the accepted issuers."},
    {"ssl_trusted_certificate", CONF_PATH, TOP | SITE, .set = conf_set_later, .usage = "FILE",
     .dflt = "(none)",
     .doc = "PEM certificates trusted for client certificates, not named to the client."},
    {"ssl_verify_depth", CONF_STRING, TOP | SITE, .set = conf_set_later, .usage = "N",
     .dflt = "1",
     .doc = "How many intermediate CAs a client certificate's chain may have between it "
            "and a trusted root (0: issued by the root itself)."},
    {"ssl_crl", CONF_PATH, TOP | SITE, .set = conf_set_later, .usage = "FILE",
     .dflt = "(none)",
     .doc = "PEM certificate revocation lists: a revoked client certificate does not "
            "verify, and a CRL is then needed for every issuer in the chain."},
    {"ssl_password_file", CONF_PATH, TOP | SITE, .set = conf_set_later, .usage = "FILE",
     .dflt = "(none)",
     .doc = "Passphrases of encrypted `ssl_certificate_key` files, one a line, tried in "
            "order on each key. Without it an encrypted key is refused at load."},
    {"ssl_conf_command", CONF_LIST, TOP | SITE, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = conf_set_later, .usage = "NAME VALUE",
     .doc = "An OpenSSL configuration command (`SSL_CONF_cmd`, as `openssl` names them: "
            "`Options`, `Ciphersuites`...), applied after the other ssl_* settings; a block's "
            "own replace the outer ones. An unknown name or value is refused at load. Of a "
            "block chosen by SNI, the settings OpenSSL copies into a connection when it "
            "starts (`Groups`, `SignatureAlgorithms`) are those of the address's default "
            "server."},
    {"ssl_stapling", CONF_FLAG, TOP | SITE, .set = conf_set_later, .dflt = "off",
     .doc = "Send the OCSP response of `ssl_stapling_file` to a client that asks for the "
            "certificate's status. No responder is ever asked: without a file, nothing is "
            "stapled (a notice at `-t`)."},
    {"ssl_stapling_file", CONF_PATH, TOP | SITE, .set = conf_set_later, .usage = "FILE",
     .dflt = "(none)",
     .doc = "A DER OCSP response (`openssl ocsp -respout`), stapled as it is with "
            "`ssl_stapling on`; checked at load to be one."},
    {"ssl_stapling_verify", CONF_FLAG, TOP | SITE, .set = note_nginx_only,
     .doc = "The response of `ssl_stapling_file` is stapled as it is, unchecked (nginx's "
            "default `off`); no responder is asked."},
    {"ssl_stapling_responder", CONF_STRING, TOP | SITE, .set = note_nginx_only,
     .usage = "URL",
     .doc = "No OCSP responder is asked here: stapling serves `ssl_stapling_file` only."},
    {"http2", CONF_FLAG, TOP | SITE, .set = note_nginx_only,
     .doc = "HTTP/1.1 is spoken, and TLS clients are offered `http/1.1` by ALPN (as "
            "`listen ... http2`)."},
    {"alias", CONF_PATH, LOC, .set = conf_set_later, .usage = "DIR",
     .doc = "Files are served from DIR + what follows the location's prefix: "
            "`/downloads/a.txt` in `location /downloads/ { alias /data/; }` is `/data/a.txt`. "
            "What follows must start a new segment (`location /d { alias /x/; }` answers "
            "`/d../etc` with 404, where nginx serves `/x/../etc`). In a regex location it "
            "names the whole file (`location ~ ^/u/(\\w+)/(.*)$ { alias "
            "/home/$1/public/$2; }`); with variables, as `root`'s. Not with `root` in the "
            "same location. A FILE instead of a DIR is "
            "served for the location's path itself (`location = /favicon.ico { alias "
            "/srv/fav.ico; }`), nothing beneath it.",
     .id = CONFIG_ID_ALIAS},
    {"internal", CONF_LIST, LOC, .min_args = 0, .max_args = 0, .set = conf_set_later,
     .usage = "", .doc = "Only internal redirects (`try_files`' last URI, `error_page`) reach "
     "the location: a request that names it is answered 404, as nginx's.",
     .id = CONFIG_ID_INTERNAL},
    {"index", CONF_LIST, TOP, .min_args = 1, .max_args = CONFIG_MAX_INDEX, .set = set_index,
     .usage = "FILE...", .dflt = "index.html", .doc = DOC_INDEX,
     .id = CONFIG_ID_INDEX},
    {"index", CONF_LIST, SITE | LOC, .min_args = 1, .max_args = CONFIG_MAX_INDEX,
     .set = conf_set_later, .usage = "FILE...", .dflt = "(the outer block's)", .doc = DOC_INDEX,
     .id = CONFIG_ID_INDEX},
    {"server_name", CONF_LIST, SITE, CONF_REPEATS, .min_args = 1, .max_args = CONFIG_MAX_ARGS,
     .set = conf_set_later, .usage = "NAME...", .dflt = "\"\"",
     .doc = "Exact names, `*.example.org` (a leading wildcard at any depth), "
            "`.example.org` (which also takes `example.org`), `www.example.*` (a trailing "
            "wildcard), `_` (a name no Host matches); `\"\"` matches a request without Host; "
            "`~RE` a PCRE2 regular expression, without case, tried after the exact and "
            "wildcard names, in file order (its captures: `$1`..`$9`, `$NAME`)."},
    {"try_files", CONF_LIST, SITE | LOC, .min_args = 2, .max_args = CONFIG_MAX_ARGS,
     .set = conf_set_later, .usage = "FILE... URI|=CODE|@NAME",
     .doc = "The first FILE in order (variables expanded, beneath the root or alias) that "
            "is a file, or a directory when written with a trailing `/` (`$uri/`), becomes "
            "the path; else the last argument: an internal redirect to URI (its `?args` "
            "replace the request's, as nginx, with any byte that is not visible ASCII "
            "written `%XX`; without them the request's own stay), the status CODE (with its "
            "`error_page`), or the named location. A server's `try_files` answers paths no "
            "location takes, as in nginx. Found as `$uri/`, `/dir` is redirected to "
            "`/dir/`. Belongs to its block (not inherited).",
     .id = CONFIG_ID_TRY_FILES},
    {"return", CONF_LIST, SITE | LOC, .min_args = 1, .max_args = 2, .set = conf_set_later,
     .usage = "CODE [URL|TEXT] | URL",
     .doc = "301, 302, 303, 307, 308 with `Location: URL`; other codes (200 to 599) with "
            "TEXT as body (typed by `default_type`) or their plain page; a bare `http(s)://` "
            "URL is a 302. A server's `return` comes before any location. Belongs to its "
            "block (not inherited).",
     .id = CONFIG_ID_RETURN},
    {"rewrite", CONF_LIST, SITE | LOC, CONF_REPEATS, .min_args = 2, .max_args = 3,
     .set = conf_set_later, .usage = "REGEX REPLACEMENT [last|break|redirect|permanent]",
     .doc = "When REGEX (PCRE2) matches the path, REPLACEMENT (its `$1`..`$9` and named "
            "groups, variables) becomes the path, as nginx's rewrite module: a server's "
            "rewrites run before the location is searched, a location's after. `last` "
            "searches the location again (10 times at most, then 500), `break` serves the "
            "new path in this location, `redirect` answers 302 and `permanent` 301 to it, "
            "as does a REPLACEMENT starting with `http://`, `https://` or `$scheme`; "
            "without a flag the next directive follows (a location whose path changed is "
            "searched again after its last). The request's arguments follow unless "
            "REPLACEMENT ends with `?`. `rewrite`, `break` and `return` run in the order "
            "written.",
     .id = CONFIG_ID_REWRITE},
    {"break", CONF_LIST, SITE | LOC, CONF_REPEATS, .min_args = 0, .max_args = 0,
     .set = conf_set_later, .usage = "",
     .doc = "Ends the block's `rewrite` directives: the request goes on with its path "
            "(in a location, served there).",
     .id = CONFIG_ID_BREAK},
    {"if", CONF_BLOCK, SITE | LOC, CONF_REPEATS, .min_args = 1, .max_args = CONFIG_MAX_ARGS,
     .set = declare_if_sets, .usage = "(CONDITION) { ... }",
     .doc = "Runs the block's `rewrite`, `return`, `set` and `break` (in order, with the block's "
            "others) when CONDITION holds, as nginx's: `($var)` (neither empty nor `0`), "
            "`($var = TEXT)`, `!=`, `~ REGEX`, `~*` (without case), `!~`, `!~*` (a match's "
            "groups are `$1`..`$9` after it), `-f PATH`, `-d`, `-e`, `-x` and their `!` "
            "(PATH a file system path, variables expanded: `-f $request_filename`). In a "
            "location, `if` is nginx's implicit location: its other directives (`add_header`, "
            "`expires`, `root`, `error_page`, `proxy_pass` without a URI part, `access_log`, "
            "`gzip`...) are the request's settings once CONDITION holds, the last true "
            "`if`'s alone, and the location's `try_files` and `return` are not. What nginx "
            "refuses inside `if` (`alias`, `try_files`, `index`...; in a server, all but "
            "`rewrite`, `return`, `set` and `break`) is refused at load.",
     .id = CONFIG_ID_IF},
    {"limit_except", CONF_BLOCK, LOC, .min_args = 1, .max_args = CONFIG_MAX_ARGS,
     .set = check_limit_except, .usage = "METHOD... { ... }",
     .doc = "nginx's implicit location for the requests of every method but those named "
            "(`GET` names `HEAD` too): its `allow`, `deny`, `auth_basic`, "
            "`auth_basic_user_file`, `access_log` and `proxy_pass` (without a URI part) are "
            "theirs, the rest had from the location (`limit_except GET { deny all; }` leaves "
            "it read-only; `limit_except GET { auth_basic \"x\"; auth_basic_user_file F; }` "
            "asks writers alone for a password), but for what a location does not pass on: "
            "its `rewrite`, `if`, `return` and `try_files` do not run for them, as nginx's. "
            "METHOD is one of nginx's: GET, HEAD, POST, PUT, DELETE, MKCOL, COPY, MOVE, "
            "OPTIONS, PROPFIND, PROPPATCH, LOCK, UNLOCK, PATCH. Not inherited by nested "
            "locations.",
     .id = CONFIG_ID_LIMIT_EXCEPT},
    {"set", CONF_LIST, SITE | LOC, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = declare_set, .usage = "$NAME VALUE",
     .doc = "Gives $NAME the VALUE (variables expanded) for the rest of the request, in "
            "order with the rewrite directives, as nginx's; $NAME is empty where it was "
            "not set. A built-in variable cannot be set. At most 16 variables and 1 KiB of "
            "values a request (else 500).",
     .id = CONFIG_ID_SET},
    {"error_page", CONF_LIST, TOP | SITE | LOC, CONF_REPEATS, .min_args = 2,
     .max_args = CONFIG_MAX_ARGS, .set = conf_set_later,
     .usage = "CODE... [=[ANSWER]] URI|@NAME|URL",
     .doc = "A response with one of the codes (300 to 599) is answered again by an internal "
            "redirect to URI, fetched as a GET without conditions or ranges, and sent with "
            "the original status (or ANSWER; a bare `=`: whatever the page answers, as "
            "nginx); the page's own errors are not redirected again (the plain error with "
            "the original status, where nginx answers with the page's status: `error_page "
            "502 /missing.html` is 502 here, 404 from nginx), but a page its location "
            "refuses is answered with that refusal (401 with its challenge, 403), a 401 "
            "keeps its `WWW-Authenticate`; a URL answers 302 (or ANSWER) to it. Filters and "
            "`add_header` are those of the page's location, as nginx. A block with any "
            "`error_page` has exactly its own list.",
     .id = CONFIG_ID_ERROR_PAGE},
    {"threads", CONF_COUNT, TOP, .max = 1024, CFG(threads), .dflt = "0", .doc = DOC_THREADS},
    {"threads", CONF_COUNT, CLASS, .max = 1024, KLASS(threads), .dflt = "1", .doc = DOC_THREADS},
    {"groups", CONF_COUNT, TOP, .max = CONFIG_MAX_GROUPS, CFG(groups),
     .dflt = "(one per CPU with leader_followers, else 1)", .doc = DOC_GROUPS},
    {"groups", CONF_COUNT, CLASS, .max = CONFIG_MAX_GROUPS, KLASS(groups),
     .dflt = "(one per CPU with leader_followers, else 1)", .doc = DOC_GROUPS},
    {"concurrency", CONF_ENUM, TOP, .names = strategies, CFG(concurrency),
     .dflt = "leader_followers",
     .doc = "How each group's threads share its connections: `leader_followers`, "
            "`half_sync_half_async` (one I/O thread queues ready handles for `threads` "
            "workers) or `thread_per_connection` (an acceptor thread, then a thread of its "
            "own for every connection; `threads` is ignored). The other two exist to measure "
            "the pattern against."},
    {"reactivation", CONF_ENUM, TOP, .names = reactivations, CFG(reactivation), .dflt = "edge",
     .doc = "Leader/Followers: how a connection's socket is deactivated while a thread "
            "processes it and reactivated after. `edge`: registered once, edge-triggered; "
            "ownership is an atomic flag, an event that comes while a thread owns the "
            "connection is kept for that thread, and giving the connection back costs no "
            "system call. `oneshot`: `EPOLLONESHOT`, re-armed with `epoll_ctl` after every "
            "event. `edge` is refused with another `concurrency`."},
    {"promotion", CONF_ENUM, TOP, .names = promotions, CFG(promotion), .dflt = "lifo",
     .doc = "Leader/Followers: the next leader is the most recently idle thread (its own "
            "semaphore), or whichever thread one condition variable wakes; refused with "
            "another `concurrency`."},
    {"max_connections", CONF_COUNT, TOP, .max = 10000000, CFG(max_connections),
     .dflt = "10000", .doc = DOC_MAX_CONN},
    {"max_connections", CONF_COUNT, CLASS, .max = 10000000, KLASS(max_connections),
     .dflt = "(the top level's)", .doc = DOC_MAX_CONN},
    {"max_header_size", CONF_SIZE, TOP, .min = 256, .max = CONFIG_MAX_HEADER_SIZE,
     CFG(max_header_size), .dflt = "8k",
     .doc = "Every byte of the request head, CRLFs included: any empty lines before the "
            "request line, the request line (method, target, version), the header field "
            "lines and the blank line ending them. A request line that does not end within "
            "it is 414 (501 if its method is unknown or never ends, RFC 9112 3), field lines "
            "431. The default takes a request target of nearly 8 KiB, as nginx's 8 KiB "
            "request line; a decoded path is at most 8 KiB whatever is set (longer: 414); "
            "at most 16k."},
    {"max_headers", CONF_COUNT, TOP, .max = 64, CFG(max_headers), .dflt = "64",
     .doc = "Header fields per request; over it 431."},
    {"max_body_size", CONF_SIZE, TOP, CFG(max_body_size), .dflt = "1m",
     .doc = "Request body, for both framings; over it 413 and close. 0: no limit, as in "
            "nginx; a body collected in memory for `echo`, `request`, CGI or the proxy is "
            "bounded by 64 MiB whatever is set."},
    {"max_body_memory", CONF_SIZE, TOP, .off = true, CFG(max_body_memory), .dflt = "64m",
     .doc = "The bytes of all bodies being collected for `echo`, `request`, CGI or the "
            "proxy, held at once, server-wide; a body that would go past it is answered 503 "
            "with `Retry-After: 1` before it is read (with `Expect: 100-continue`, before it "
            "is sent), and the connection closes. These bodies are consumed from memory, so "
            "they are refused rather than spooled to a file as nginx does."},
    {"header_timeout", CONF_DURATION, TOP, CFG(header_timeout_ms), .dflt = "10s",
     .doc = "The whole request head must arrive within this time of its first byte, however "
            "it trickles; else 408 and close. It covers a TLS handshake too (from accept)."},
    {"client_body_timeout", CONF_DURATION, TOP, .min = 1, CFG(client_body_timeout_ms),
     .dflt = "10s",
     .doc = "The longest wait between two reads of a request body (nginx's, whose default "
            "is 60s); else 408 if the body was not answered yet, and close."},
    {"client_body_min_rate", CONF_SIZE, TOP, .off = true, CFG(client_body_min_rate),
     .dflt = "500",
     .doc = "Bytes a second a request body must average: its deadline is "
            "`client_body_timeout` after the head, and each byte adds 1/rate of a second "
            "(Apache's `RequestReadTimeout` `MinRate`); past it as for "
            "`client_body_timeout`."},
    {"keepalive_timeout", CONF_LIST, TOP, .min_args = 1, .max_args = 2,
     .set = set_keepalive_timeout, .usage = "TIMEOUT [HEADER_TIMEOUT]", .dflt = "60s",
     .doc = "An idle keep-alive connection is closed after TIMEOUT (0: every response says "
            "`Connection: close`). With HEADER_TIMEOUT, responses on a connection that stays "
            "open carry `Keep-Alive: timeout=N` (N its whole seconds), as nginx's. A server "
            "or location may set its own: the one of the last request's block holds."},
    {"send_timeout", CONF_DURATION, TOP, CFG(send_timeout_ms), .dflt = "30s",
     .doc = "A response the client stops reading is dropped after this; it restarts "
            "whenever bytes go out, so `send_min_rate` bounds the whole."},
    {"limit_rate", CONF_SIZE, TOP, CFG(limit_rate), .dflt = "0",
     .doc = "Bytes per second each response is sent at, as nginx's: after `limit_rate_after` "
            "bytes, a response goes out at most RATE bytes a second since its request began "
            "(what the budget allows is written, then the connection waits, no thread with "
            "it, until the budget allows more; the wait does not count against "
            "`send_timeout`); 0: no limit. `set $limit_rate` changes it for one request. "
            "Files, memory bodies and TLS are paced; streamed answers (proxied, CGI) are "
            "not. A server, location or `if` in a location may set its own."},
    {"limit_rate_after", CONF_SIZE, TOP, CFG(limit_rate_after), .dflt = "0",
     .doc = "The bytes of a response (its head included, as nginx counts) sent at full "
            "speed before `limit_rate` applies. A server, location or `if` in a location "
            "may set its own."},
    {"send_min_rate", CONF_SIZE, TOP, .off = true, CFG(send_min_rate), .dflt = "1k",
     .doc = "Bytes per second a response must average once the socket would block (counted "
            "from then, after a grace of one `send_timeout`; credit earned reading fast "
            "carries over), as Apache's `MinRate`. A client below it is reset (RST, as "
            "nginx's `reset_timedout_connection`, so the kernel frees what the socket holds) "
            "and an info line logged. 1 KiB/s is below any real link; a 10 MiB download at "
            "16 KiB/s takes 11 minutes and is never cut. `off` or 0: no minimum."},
    {"max_parked_size", CONF_SIZE, TOP, .off = true, CFG(max_parked_size), .dflt = "256m",
     .doc = "Memory bytes copied onto connections because their socket would block (the "
            "rest of an in-memory body: echoes, compressed or handler pages), all "
            "connections together. A response whose copy would pass it is not parked: its "
            "connection is closed, the response cut short, and a warning logged at most "
            "every 10 s (with how many were closed). Files and listings are sent from "
            "descriptors and never copied, so they do not count. 256 MiB holds four of the "
            "largest memory body (64 MiB); `off` or 0: no limit."},
    {"shutdown_timeout", CONF_DURATION, TOP, CFG(shutdown_timeout_ms), .dflt = "10s",
     .doc = "How long a graceful shutdown waits for responses in flight."},
    {"shutdown_delay", CONF_DURATION, TOP, CFG(shutdown_delay_ms), .dflt = "0",
     .doc = "After `SIGTERM`, how long to go on serving everything, with the `health` "
            "handler answering 503 and every response closing its connection, before the "
            "graceful shutdown starts; 0: at once."},
    {"keepalive_requests", CONF_COUNT, TOP, .max = 4000000000u, CFG(keepalive_requests),
     .dflt = "10000", .doc = "Requests per connection before it is closed (0 = no limit)."},
    {"keepalive_time", CONF_DURATION, TOP, CFG(keepalive_time_ms), .dflt = "1h",
     .doc = "A request that comes this long after its connection was opened is the "
            "connection's last (nginx's), whatever `keepalive_requests` allows."},
    {"keepalive_disable", CONF_LIST, TOP, .min_args = 1, .max_args = 2,
     .set = set_keepalive_disable, .usage = "none | msie6 | safari ...", .dflt = "msie6",
     .doc = "Browsers whose requests close their connection, as nginx's: `msie6`, MSIE 6 and "
            "older on a POST; `safari`, Safari on Mac OS X; `none`."},
    {"access_log", CONF_LIST, TOP, CONF_REPEATS, .min_args = 1, .max_args = 6,
     .set = set_access_log, .usage = "PATH|stdout|stderr|off [FORMAT [OPTION...]]",
     .dflt = "stdout",
     .doc = "Where the access log goes: a file path, `stdout`, `stderr`, or `off`; buffered "
            "per thread, written at least once a second. Reopened on `SIGUSR1`. With a "
            "`log_format` name (other than `combined`), `buffer=`, `gzip`, `flush=` or "
            "`if=`, or stated more than once, the top level's access logs are nginx's, as "
            "in a server or location (module log): every statement one log."},
    {"access_log_format", CONF_ENUM, TOP, .names = log_formats, CFG(access_log_json),
     .dflt = "combined",
     .doc = "Combined Log Format, or JSON lines (`time`, `remote`, `request`, `status`, "
            "`bytes`, `referer`, `user_agent`)."},
    {"access_log_request_id", CONF_FLAG, TOP, CFG(access_log_request_id), .dflt = "off",
     .doc = "Each access-log line ends with the request's `$request_id` (the same that a "
            "`proxy_set_header X-Request-Id $request_id` sent upstream): one more quoted "
            "field in the Combined Log Format, as nginx's `\"$request_id\"`, or "
            "`request_id` in JSON."},
    {"error_log", CONF_LIST, TOP, .min_args = 1, .max_args = 2, .set = set_error_log,
     .usage = "PATH [debug|info|notice|warn|error|crit|alert|emerg]", .dflt = "stderr info",
     .doc = "Destination and lowest level (`error`, `warn`, `info`, `debug`; nginx's "
            "`notice` is `info`, and `crit`, `alert`, `emerg` are `error`, said at `-t`); "
            "it cannot be `off`, use a level instead. "
            "`debug` logs each compression and listing built. Reopened on `SIGUSR1`."},
    {"error_log", CONF_LIST, SITE | LOC, .min_args = 1, .max_args = 2,
     .set = check_block_error_log, .usage = "PATH [LEVEL]", .dflt = "(the outer block's)",
     .doc = "The error log of the requests a server or location answers, as nginx's: their "
            "messages (a missing file, an access refused, an upstream that failed...) go "
            "there, from LEVEL up (`error` when not said; `crit`, `alert` and `emerg` "
            "leave them all out), in place of the outer block's. Messages that are not "
            "about a request stay in the top-level `error_log`. Not reopened on `SIGUSR1`.",
     .id = CONFIG_ID_ERROR_LOG},
    {"server_tokens", CONF_FLAG, TOP, CFG(server_tokens), .dflt = "on",
     .doc = "`Server: lfhttpd/VERSION`, or with `off` just `Server: lfhttpd`."},
    {"sendfile", CONF_FLAG, TOP, CFG(sendfile), .dflt = "on",
     .doc = "How file bodies leave: `on`, with `sendfile(2)` (no copy in the server); "
            "`off`, read into the thread's 64 KiB buffer and written, the head in front of "
            "the first piece (as h2o always does and nginx with `sendfile off`). `off` costs "
            "the server a copy per byte but is faster when the client is on the same machine "
            "(loopback, a Docker bridge) and files are larger than the CPU's cache: the "
            "client then reads bytes the server just wrote instead of cold page-cache pages "
            "(10 MiB, c10 on loopback: 1.7x the requests/s). Files the open-file cache keeps "
            "in memory are sent from there either way."},
    {"absolute_redirect", CONF_FLAG, TOP, CFG(absolute_redirect), .dflt = "on",
     .doc = DOC_ABSOLUTE_REDIRECT,
     .id = CONFIG_ID_ABSOLUTE_REDIRECT},
    {"absolute_redirect", CONF_FLAG, SITE | LOC, .set = check_flag, .dflt = "(the outer block's)",
     .doc = DOC_ABSOLUTE_REDIRECT,
     .id = CONFIG_ID_ABSOLUTE_REDIRECT},
    {"server_name_in_redirect", CONF_FLAG, TOP | SITE | LOC, .set = check_flag, .dflt = "off",
     .doc = "`on`: an absolute redirect (`absolute_redirect`) names the server's first name, "
            "not the request's Host, as nginx's.",
     .id = CONFIG_ID_SERVER_NAME_IN_REDIRECT},
    {"port_in_redirect", CONF_FLAG, TOP | SITE | LOC, .set = check_flag, .dflt = "on",
     .doc = "`off`: an absolute redirect (`absolute_redirect`) names no port, whatever the "
            "port the connection came in on, as nginx's.",
     .id = CONFIG_ID_PORT_IN_REDIRECT},
    {"class", CONF_BLOCK, TOP, CONF_REPEATS, .min_args = 1, .max_args = 1, .set = set_class,
     .usage = "NAME",
     .doc = "A service class: a Leader/Followers group of its own, with its threads, handle "
            "set, thread priority and connection limit. It holds only `threads`, `groups`, "
            "`priority`, `max_connections`, `listen` and `match`. `default` is taken (the "
            "class of everything no rule claims)."},
    {"class", CONF_STRING, SITE | LOC, .set = conf_set_later, .usage = "NAME",
     .dflt = "(the outer block's)",
     .doc = "The service class of the requests this block answers (a `match path` or "
            "`match host` rule wins over it); an unknown class is refused at load.",
     .id = CONFIG_ID_CLASS},
    {"server", CONF_BLOCK, TOP, CONF_REPEATS, .min_args = 0, .max_args = 0,
     .set = read_site_block, .usage = "{ ... }",
     .doc = "A site: its addresses (`listen`), names (`server_name`), settings and "
            "locations. A file without `server` blocks has one implicit server, the top "
            "level's settings.",
     .id = CONFIG_ID_SERVER},
    {"location", CONF_BLOCK, SITE | LOC, CONF_REPEATS, .min_args = 1, .max_args = 2,
     .set = read_site_block, .usage = "[=|^~|~|~*] URI|@NAME",
     .doc = "Rules for a path: `=` exact, a prefix (`^~`: no regex is tried after it), "
            "`~` a PCRE2 regular expression with case, `~*` without (the first that matches, "
            "in file order; its captures are `$1`..`$9` and `$NAME`; `$` matches at the very "
            "end only); `@NAME` is reached only by `try_files` and `error_page`. Locations "
            "nest as nginx's (a nested prefix under its parent's); duplicates are refused."},
    {"priority", CONF_STRING, CLASS, .set = set_priority, .usage = "high|normal|low|NICE",
     .dflt = "normal",
     .doc = "The threads' nice value relative to the process: high -10, normal 0, low 10, "
            "or NICE (-20..19). Raising it needs `CAP_SYS_NICE`; without it the other "
            "classes are lowered instead."},
    {"match", CONF_LIST, CLASS, CONF_REPEATS, .min_args = 2, .max_args = 2, .set = set_match,
     .usage = "path|host|addr VALUE",
     .doc = "`match addr CIDR`: connections from these clients belong to the class (checked "
            "at accept); `match path PREFIX`: requests whose decoded path starts with PREFIX "
            "(longest prefix wins); `match host NAME`: requests for this Host (port ignored, "
            "case-insensitive). A rule may name one class only."},
    /* nginx's main context: the file as nginx lays it out */
    {"include", CONF_STRING, TOP | CLASS | SITE | LOC | EVENTS, CONF_REPEATS,
     .set = conf_set_later, .usage = "FILE|MASK",
     .doc = "The statements of the file, or of every file the mask matches (`*`, `?`, "
            "`[...]`, in name order), stand in its place, in any block (`types` and "
            "`upstream` too). A relative name is relative to the directory of the main "
            "configuration file (`-c`), whichever file includes it, as nginx's. A mask that "
            "matches nothing is no error; a name that does not open is. Messages name the "
            "included file and its line."},
    {"map", CONF_BLOCK, TOP, CONF_REPEATS, .min_args = 2, .max_args = 2, .set = declare_map,
     .usage = "SOURCE $NAME { ... }",
     .doc = "$NAME's value is chosen by SOURCE (variables expanded) when $NAME is read, as "
            "nginx's: `KEY VALUE;` (KEY without case), `~REGEX VALUE;` and `~*REGEX` (the "
            "first that matches, in order; its groups are `$1`..`$9` in VALUE), `default "
            "VALUE;` (else empty), `hostnames;` (KEYs `*.example.org`, `.example.org`, "
            "`www.example.*`), `volatile;` (accepted: a value is never cached), `include "
            "FILE;`. An exact KEY first, then the longest leading and trailing wildcards, "
            "then the regexes. VALUE takes variables. A regex KEY's groups do not become "
            "the request's `$1`..`$9` outside VALUE.",
     .id = CONFIG_ID_NONE},
    {"split_clients", CONF_BLOCK, TOP, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = declare_map, .usage = "STRING $NAME { ... }",
     .doc = "$NAME for A/B tests, as nginx's: STRING (variables expanded) is hashed with "
            "MurmurHash2, and `PERCENT% VALUE;` lines (two decimals at most, 100% at most "
            "in all) take their share of the hashes in order, `* VALUE;` the rest; past "
            "them the value is empty. The same STRING always gets the same VALUE.",
     .id = CONFIG_ID_NONE},
    {"geo", CONF_BLOCK, TOP, CONF_REPEATS, .min_args = 1, .max_args = 2, .set = declare_geo,
     .usage = "[$ADDRESS] $NAME { ... }",
     .doc = "$NAME's value is chosen by the client's address (`$remote_addr`, after "
            "`real_ip_header`), or by $ADDRESS's value (255.255.255.255 when it is no "
            "address), as nginx's: `NETWORK VALUE;` (an address, or ADDR/BITS, IPv4 or IPv6: "
            "the most specific network that holds the address; an IPv4-mapped IPv6 address "
            "is looked up as IPv4), `default VALUE;` (else empty), `delete NETWORK;`, "
            "`include FILE;`, `proxy NETWORK;` (a client there is replaced by the last "
            "address of `X-Forwarded-For`), `proxy_recursive;` (by the last one not in a "
            "`proxy` network), `ranges;` first (then `FROM-TO VALUE;`, IPv4: a range "
            "inside another splits it, one that overlaps others partly is refused, and "
            "`delete` takes away only a range that is exactly so). Values are text. Of two equal networks "
            "the later counts, as nginx's (which warns).",
     .id = CONFIG_ID_NONE},
    {"http", CONF_BLOCK, TOP, .min_args = 0, .max_args = 0, .set = conf_set_later,
     .usage = "{ ... }",
     .doc = "nginx's http block: what it holds stands at the top level (lfhttpd's top level "
            "is nginx's main and http together), so a file with it and one without mean "
            "the same; nginx's main directives (`user`, `pid`, `events`...) are refused "
            "inside it, and there is one."},
    {"events", CONF_BLOCK, TOP, .min_args = 0, .max_args = 0, .set = read_events,
     .usage = "{ ... }",
     .doc = "nginx's connection settings: `worker_connections` sets `max_connections`; the "
            "others are accepted and said at `-t`."},
    {"user", CONF_LIST, TOP, .min_args = 1, .max_args = 2, .set = set_user,
     .usage = "USER [GROUP]", .dflt = "(the user who starts it)",
     .doc = "Started by root, the server becomes USER and GROUP (default: the group named "
            "as USER, as nginx) once its listeners are bound, its logs and pid file open and "
            "its keys read: a reload then reads files as USER. Not started by root: ignored, "
            "with a notice."},
    {"worker_processes", CONF_STRING, TOP, .set = set_worker_processes, .usage = "N|auto",
     .dflt = "(threads' default)",
     .doc = "lfhttpd is one process: N sets `threads N` (the default class's), `auto` one "
            "thread per CPU core; said at `-t`. Not with `threads`."},
    {"worker_rlimit_nofile", CONF_COUNT, TOP, .min = 1, .max = 1u << 30, CFG(rlimit_nofile),
     .dflt = "(the hard limit)",
     .doc = "The descriptors the process may open (`RLIMIT_NOFILE`, soft and hard), set "
            "before the listeners open; raising it above the hard limit needs root."},
    {"pid", CONF_PATH, TOP, CFG(pid_file), .usage = "FILE", .dflt = "(none)",
     .doc = "The server's process ID is written here at start, once it listens, and the "
            "file removed at exit (if the `user` may still remove it)."},
#define NOTE_ONE_PROCESS "lfhttpd is one process with threads, not a master and workers"
    {"daemon", CONF_FLAG, TOP, .set = note_nginx_only,
     .doc = "lfhttpd never forks into the background: a supervisor (systemd, a container) "
            "runs it, as nginx's `daemon off`."},
    {"master_process", CONF_FLAG, TOP, .set = note_nginx_only, .doc = NOTE_ONE_PROCESS "."},
    {"load_module", CONF_STRING, TOP, CONF_REPEATS, .set = note_nginx_only, .usage = "FILE",
     .doc = "lfhttpd's modules are built in, chosen by its directives; nginx's `.so` "
            "modules are not loaded."},
    {"worker_cpu_affinity", CONF_LIST, TOP, .min_args = 1, .max_args = CONFIG_MAX_ARGS,
     .set = note_nginx_only, .usage = "auto|MASK...",
     .doc = NOTE_ONE_PROCESS "; the kernel places its threads."},
    {"worker_priority", CONF_STRING, TOP, .set = note_nginx_only, .usage = "NICE",
     .doc = NOTE_ONE_PROCESS "; a service class's `priority` sets its threads' nice value."},
    {"worker_shutdown_timeout", CONF_STRING, TOP, .set = note_nginx_only, .usage = "TIME",
     .doc = NOTE_ONE_PROCESS "; `shutdown_timeout` bounds a graceful shutdown."},
    {"thread_pool", CONF_LIST, TOP, CONF_REPEATS, .min_args = 1, .max_args = 3,
     .set = note_nginx_only, .usage = "NAME threads=N [max_queue=N]",
     .doc = "lfhttpd's threads are its Leader/Followers groups (`threads`, `groups`); files "
            "are sent with `sendfile(2)`, not read by a pool."},
    {"env", CONF_STRING, TOP, CONF_REPEATS, .set = note_nginx_only, .usage = "VAR[=VALUE]",
     .doc = "lfhttpd keeps its environment; CGI scripts get a clean one of their own."},
    {"lock_file", CONF_PATH, TOP, .set = note_nginx_only, .usage = "FILE",
     .doc = NOTE_ONE_PROCESS ": no accept lock."},
    {"pcre_jit", CONF_FLAG, TOP, .set = note_nginx_only,
     .doc = "Regular expressions are compiled by lfhttpd's own rules at load."},
    {"timer_resolution", CONF_STRING, TOP, .set = note_nginx_only, .usage = "TIME",
     .doc = "lfhttpd reads the clock once per event, and its Date once per second."},
    {"working_directory", CONF_PATH, TOP, .set = note_nginx_only, .usage = "DIR",
     .doc = "lfhttpd stays in the directory it was started in (relative paths are relative "
            "to it)."},
    /* nginx's http directives that mean nothing here, or another name of lfhttpd's */
    {"client_body_temp_path", CONF_LIST, TOP | SITE | LOC, .min_args = 1, .max_args = 4,
     .set = note_nginx_only, .usage = "DIR [LEVEL...]",
     .doc = "Request bodies are held in memory (see `max_body_memory`), never written to "
            "files: there is no directory to use."},
    {"tcp_nopush", CONF_FLAG, TOP | SITE | LOC, .set = note_nginx_only,
     .doc = "A response's head leaves with the first part of its body already (one `writev`, "
            "or the head before `sendfile` with `MSG_MORE`); there is nothing to set."},
    {"tcp_nodelay", CONF_FLAG, TOP | SITE | LOC, .set = note_nginx_only,
     .doc = "lfhttpd always sets `TCP_NODELAY` (nginx's default `on`)."},
    {"proxy_cache_bypass", CONF_LIST, TOP | SITE | LOC, .min_args = 1,
     .max_args = CONFIG_MAX_ARGS, .set = note_nginx_only, .usage = "STRING...",
     .doc = "There is no `proxy_cache` here: no answer is taken from a cache, so there is "
            "none to bypass (as in nginx without `proxy_cache`)."},
    {"proxy_no_cache", CONF_LIST, TOP | SITE | LOC, .min_args = 1, .max_args = CONFIG_MAX_ARGS,
     .set = note_nginx_only, .usage = "STRING...",
     .doc = "There is no `proxy_cache` here: no answer is saved to a cache (as in nginx "
            "without `proxy_cache`)."},
    {"autoindex_exact_size", CONF_FLAG, TOP | SITE | LOC, .set = note_nginx_only,
     .doc = "The directory listing is lfhttpd's own: it shows sizes in bytes and rounded "
            "(as `1.5K`) both."},
    {"autoindex_localtime", CONF_FLAG, TOP | SITE | LOC, .set = note_nginx_only,
     .doc = "The directory listing is lfhttpd's own: its times are in UTC, marked `Z` "
            "(nginx's `autoindex_localtime off`)."},
    {"gunzip", CONF_FLAG, TOP | SITE | LOC, .set = note_nginx_only,
     .doc = "Answers are not decompressed here: a gzip answer from an upstream goes as it "
            "came, also to a client that did not ask for gzip (nginx's `gunzip on` "
            "decompresses it for such a client). An upstream that honours the forwarded "
            "`Accept-Encoding` never sends one."},
    {"gunzip_buffers", CONF_LIST, TOP | SITE | LOC, .min_args = 2, .max_args = 2,
     .set = note_nginx_only, .usage = "NUMBER SIZE",
     .doc = "Answers are not decompressed here (see `gunzip`)."},
    {"large_client_header_buffers", CONF_LIST, TOP, .min_args = 2, .max_args = 2,
     .set = set_large_header_buffers, .usage = "NUMBER SIZE", .dflt = "4 8k",
     .doc = "The request head is read into one buffer of `max_header_size` bytes: NUMBER "
            "times SIZE, at least 256 and at most 16k (nginx limits the request line and each "
            "field line to SIZE apart; here their sum is bounded, said at `-t`)."},
    {"large_client_header_buffers", CONF_LIST, SITE, .min_args = 2, .max_args = 2,
     .set = note_nginx_only, .usage = "NUMBER SIZE", .dflt = "(the top level's)",
     .doc = "The head's buffer is the whole server's (`max_header_size` at the top level)."},
    {"client_header_buffer_size", CONF_SIZE, TOP | SITE, .set = note_nginx_only,
     .usage = "SIZE", .doc = "The head is read into one buffer of `max_header_size` bytes "
            "(see `large_client_header_buffers`): there is no first, smaller one."},
    {"connection_pool_size", CONF_SIZE, TOP | SITE, .set = note_nginx_only, .usage = "SIZE",
     .doc = "nginx's memory pools: a connection here is a fixed structure and its buffers "
            "are the thread's."},
    {"request_pool_size", CONF_SIZE, TOP | SITE, .set = note_nginx_only, .usage = "SIZE",
     .doc = "nginx's memory pools: a request here is read and answered in the thread's own "
            "buffers."},
    {"open_log_file_cache", CONF_LIST, TOP | SITE | LOC, .min_args = 1, .max_args = 4,
     .set = note_nginx_only, .usage = "max=N [inactive=TIME] [min_uses=N] [valid=TIME] | off",
     .doc = "A log file is opened when the configuration is loaded (start, reload) and "
            "kept; one whose path has variables is opened for each line and closed, as "
            "nginx's without this cache: no descriptors are cached."},
    {"types_hash_max_size", CONF_STRING, TOP | SITE | LOC, .set = note_nginx_only,
     .usage = "SIZE", .doc = "The type table grows as it needs; there is nothing to size."},
    {"types_hash_bucket_size", CONF_STRING, TOP | SITE | LOC, .set = note_nginx_only,
     .usage = "SIZE", .doc = "The type table grows as it needs; there is nothing to size."},
    {"server_names_hash_bucket_size", CONF_STRING, TOP, .set = note_nginx_only,
     .usage = "SIZE", .doc = "Server names are matched without a sized hash."},
    {"server_names_hash_max_size", CONF_STRING, TOP, .set = note_nginx_only,
     .usage = "SIZE", .doc = "Server names are matched without a sized hash."},
    {"log_not_found", CONF_FLAG, TOP | SITE | LOC, .set = check_flag, .dflt = "on",
     .doc = "A file that is not there (404) is written to the request's error log at "
            "`error`, as nginx's; `off`: only the access log has the 404.",
     .id = CONFIG_ID_LOG_NOT_FOUND},
    {"client_max_body_size", CONF_SIZE, TOP, CFG(max_body_size), .dflt = "1m",
     .doc = "nginx's name of `max_body_size` (0: no limit); a server or location may set "
            "its own."},
    {"client_body_buffer_size", CONF_SIZE, TOP, CFG(client_body_buffer_size), .dflt = "16k",
     .doc = "The longest request body `$request_body` shows, as nginx's: nginx keeps a body "
            "up to this size in memory, where the variable reads it, and writes a longer "
            "one to a file, where it does not (bodies are held in memory here whatever "
            "their size: see `max_body_memory`)."},
    /* nginx's per-block settings of a request's connection (struct config_limits): a
     * server's and a location's are read with the block (module_level.c), merged as
     * nginx's, over the block around them. */
    {"client_max_body_size", CONF_SIZE, SITE | LOC, .set = conf_set_later, .usage = "SIZE",
     .dflt = "(the outer block's)", .id = CONFIG_ID_CLIENT_MAX_BODY_SIZE,
     .doc = "The body limit of the requests this block answers, as nginx's: a "
            "`Content-Length` over the limit of any location the search finds for the "
            "request (a rewrite's `last` or a `try_files` URI searches again; a named "
            "location does not) is 413, as is a chunked body over the limit of the location "
            "that reads it; 0: no limit, within the server-wide 64 MiB bound on a body "
            "collected in memory and `max_body_memory`."},
    {"client_body_buffer_size", CONF_SIZE, SITE | LOC, .set = conf_set_later,
     .usage = "SIZE", .dflt = "(the outer block's)", .id = CONFIG_ID_CLIENT_BODY_BUFFER_SIZE,
     .doc = "The longest body `$request_body` shows for a request this block answers."},
    {"client_body_in_single_buffer", CONF_LIST, TOP | SITE | LOC, .min_args = 1,
     .max_args = 1, .set = note_single_buffer, .usage = "on|off", .dflt = "off",
     .doc = "A body a handler reads is always held in one buffer here (what nginx's `on` "
            "asks, to spare `$request_body` its copies)."},
    {"client_body_in_file_only", CONF_LIST, TOP | SITE | LOC, .min_args = 1, .max_args = 1,
     .set = set_body_in_file_only, .usage = "off", .dflt = "off",
     .doc = "Request bodies are never written to files (nginx's default); `on` and `clean` "
            "are refused."},
    {"client_body_timeout", CONF_DURATION, SITE | LOC, .min = 1, .set = conf_set_later,
     .usage = "TIME", .dflt = "(the outer block's)", .id = CONFIG_ID_CLIENT_BODY_TIMEOUT,
     .doc = "The longest wait between two reads of the body of a request this block "
            "answers."},
    {"keepalive_timeout", CONF_LIST, SITE | LOC, .min_args = 1, .max_args = 2,
     .set = conf_set_later, .usage = "TIMEOUT [HEADER_TIMEOUT]",
     .dflt = "(the outer block's)", .id = CONFIG_ID_KEEPALIVE_TIMEOUT,
     .doc = "After a request this block answers, the connection waits TIMEOUT for the next "
            "one (0: `Connection: close`); HEADER_TIMEOUT is sent as `Keep-Alive: "
            "timeout=N`, as nginx's."},
    {"keepalive_requests", CONF_COUNT, SITE | LOC, .max = 4000000000u, .set = conf_set_later,
     .usage = "NUMBER", .dflt = "(the outer block's)", .id = CONFIG_ID_KEEPALIVE_REQUESTS,
     .doc = "A request this block answers closes its connection when it is the connection's "
            "Nth or later (0: no limit)."},
    {"keepalive_time", CONF_DURATION, SITE | LOC, .set = conf_set_later, .usage = "TIME",
     .dflt = "(the outer block's)", .id = CONFIG_ID_KEEPALIVE_TIME,
     .doc = "A request this block answers, this long or more after its connection was "
            "opened, closes the connection."},
    {"keepalive_disable", CONF_LIST, SITE | LOC, .min_args = 1, .max_args = 2,
     .set = conf_set_later, .usage = "none | msie6 | safari ...",
     .dflt = "(the outer block's)", .id = CONFIG_ID_KEEPALIVE_DISABLE,
     .doc = "The browsers whose requests this block answers close their connection."},
    {"send_timeout", CONF_DURATION, SITE | LOC, .set = conf_set_later, .usage = "TIME",
     .dflt = "(the outer block's)", .id = CONFIG_ID_SEND_TIMEOUT,
     .doc = "How long a response of this block may wait for the client to read more."},
    {"secure_link", CONF_STRING, TOP | SITE | LOC, .set = conf_set_later,
     .usage = "EXPRESSION",
     .doc = "The link's hash and, after a comma, its expiry (a Unix time), as nginx's: "
            "`secure_link $arg_md5,$arg_expires;`. `$secure_link` is `1` when the hash is "
            "the MD5 (base64url) of `secure_link_md5` and the link has not expired, `0` when "
            "it has expired, else empty; `$secure_link_expires` is the expiry."},
    {"secure_link_md5", CONF_STRING, TOP | SITE | LOC, .set = conf_set_later,
     .usage = "EXPRESSION",
     .doc = "What the hash of `secure_link` is of, as nginx's: `secure_link_md5 "
            "\"$secure_link_expires$uri$remote_addr secret\";`."},
    {"secure_link_secret", CONF_STRING, LOC, .set = conf_set_later, .usage = "WORD",
     .doc = "nginx's older secure links: a URI /PREFIX/HASH/LINK where HASH is the hex MD5 "
            "of LINK and WORD; `$secure_link` is LINK when it is right, else empty."},
    {"valid_referers", CONF_LIST, SITE | LOC, CONF_REPEATS, .min_args = 1,
     .max_args = CONFIG_MAX_ARGS, .set = conf_set_later,
     .usage = "none|blocked|server_names|NAME[/URI]|~REGEX ...",
     .doc = "Which `Referer` fields make `$invalid_referer` empty (else it is `1`), as "
            "nginx's: `none` (no field), `blocked` (a field that does not begin with "
            "`http://` or `https://`), `server_names` (the server's names), a host "
            "(`example.org`, `*.example.org`, `.example.org`, `example.*`; its port "
            "ignored, without case) with an optional URI prefix (`example.org/galleries/`), "
            "`~REGEX` (without case, on what follows the scheme). The lines of a block add "
            "up; a block without any takes its outer block's. `if ($invalid_referer) { "
            "return 403; }` refuses hotlinks."},
    {"referer_hash_bucket_size", CONF_SIZE, SITE | LOC, .set = note_nginx_only,
     .usage = "SIZE", .doc = "The referer names are a list here: there is no hash to size."},
    {"referer_hash_max_size", CONF_SIZE, SITE | LOC, .set = note_nginx_only,
     .usage = "SIZE", .doc = "The referer names are a list here: there is no hash to size."},
    {"limit_rate", CONF_SIZE, SITE | LOC, .set = conf_set_later, .usage = "RATE",
     .dflt = "(the outer block's)", .id = CONFIG_ID_LIMIT_RATE,
     .doc = "The responses of this block go out at most RATE bytes a second (0: no limit)."},
    {"limit_rate_after", CONF_SIZE, SITE | LOC, .set = conf_set_later, .usage = "SIZE",
     .dflt = "(the outer block's)", .id = CONFIG_ID_LIMIT_RATE_AFTER,
     .doc = "The bytes of a response of this block sent before `limit_rate` applies."},
    {"client_header_timeout", CONF_DURATION, TOP, CFG(header_timeout_ms), .dflt = "10s",
     .doc = "nginx's name of `header_timeout`."},
    {"client_header_timeout", CONF_DURATION, SITE, .set = note_nginx_only, .usage = "TIME",
     .doc = "nginx reads a request head with the default server's, before the request's "
            "server is known; here the top level's `header_timeout` holds for every server."},
    /* nginx's per-block settings that are the whole server's here: a site configuration
     * that sets them in a server or location runs, and -t says the top level's hold. */
#define NOTE_WHOLE_SERVER(what) what " is the whole server's here: the top level's value holds"
    {"types", CONF_BLOCK, SITE | LOC, .min_args = 0, .max_args = 0, .set = note_nginx_only,
     .usage = "{ TYPE EXT...; ... }", .dflt = "(the top level's)",
     .doc = NOTE_WHOLE_SERVER("the type map")},
    {"gzip_buffers", CONF_LIST, TOP | SITE | LOC, .min_args = 2, .max_args = 2,
     .set = note_nginx_only, .usage = "NUMBER SIZE",
     .doc = "Compressed bytes go out as they are made (a stream's at most 16 KiB at a "
            "time), or from the cache of compressed files: there are no buffers to size."},
#undef NOTE_WHOLE_SERVER
    {.name = NULL},
};

const struct conf_directive *config_core_directives(void)
{
    return core_directives;
}

/* --- checks across directives ------------------------------------------------------- */

/* The default class listens on the top-level `listen` lines; the built-in 8080 only when
 * no listen appears anywhere. A class's listener must be its own. */
static void check_class_listens(struct config *cfg, struct conf_reader *r)
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
                if (same_listen(&k->listen[a], &cfg->listen[b]))
                    conf_error(r, k->line, "listen %s belongs to class \"%s\" and to the "
                               "default class", k->listen[a].text, k->name);
    }
}

/* `promotion` chooses which waiting Leader/Followers thread leads next: with another
 * strategy nothing reads it, and a setting that does nothing must not pass for one. */
static void check_promotion(const struct config *cfg, struct conf_reader *r)
{
    const struct conf_node *p = config_next(cfg, "promotion", NULL);
    if (!p || cfg->concurrency == LF_STRATEGY_LEADER_FOLLOWERS)
        return;
    const struct conf_node *c = config_next(cfg, "concurrency", NULL);
    conf_error(r, p->line, "promotion: only Leader/Followers promotes a thread, and "
               "concurrency is %s (%s:%u)", c ? c->args[0] : "?", conf_line_file(c ? c->line : 0, r->file),
               conf_line_no(c ? c->line : 0));
}

/* Edge-triggered reactivation is the Leader/Followers loop's: the other strategies re-arm
 * one-shot handles, and would silently ignore it. */
static void check_reactivation(const struct config *cfg, struct conf_reader *r)
{
    const struct conf_node *p = config_next(cfg, "reactivation", NULL);
    if (!p || cfg->reactivation == LF_REACTIVATE_ONESHOT ||
        cfg->concurrency == LF_STRATEGY_LEADER_FOLLOWERS)
        return;
    const struct conf_node *c = config_next(cfg, "concurrency", NULL);
    conf_error(r, p->line, "reactivation edge: only Leader/Followers has it, and "
               "concurrency is %s (%s:%u)", c ? c->args[0] : "?", conf_line_file(c ? c->line : 0, r->file),
               conf_line_no(c ? c->line : 0));
}

/* A server's listen address l, among the sockets unless one has it already (its ssl,
 * reuseport and proxy_protocol then join that one's) or a class listens there. */
static int add_site_listen(struct config *cfg, struct conf_reader *r, unsigned line,
                           const struct config_listen *l)
{
    /* One address, one socket: port 0 too (the sites take it as one address). */
    for (unsigned i = 0; i < cfg->n_listen; i++) {
        struct config_listen *have = &cfg->listen[i];
        if (have->addr_len == l->addr_len && memcmp(&have->addr, &l->addr, l->addr_len) == 0) {
            if (l->options_set && have->options_set)
                return conf_error(r, line, "listen: duplicate listen options for %s (the "
                                  "first at %s:%u): an address's socket parameters are said "
                                  "in one listen, as nginx's", have->text,
                                  conf_line_file(have->line, r->file),
                                  conf_line_no(have->line));
            bool ssl = have->ssl | l->ssl, pp = have->proxy_protocol | l->proxy_protocol;
            if (l->options_set) { /* the socket's options are that listen's */
                *have = *l;
                have->line = line;
            }
            have->ssl = ssl;
            have->proxy_protocol = pp;
            return 0;
        }
    }
    for (unsigned k = 0; k < cfg->n_classes; k++)
        for (unsigned i = 0; i < cfg->classes[k].n_listen; i++)
            if (same_listen(&cfg->classes[k].listen[i], l))
                return 0;
    if (cfg->n_listen == CONFIG_MAX_LISTEN)
        return conf_error(r, line, "at most %d listen addresses", CONFIG_MAX_LISTEN);
    cfg->listen[cfg->n_listen] = *l;
    cfg->listen[cfg->n_listen++].line = line;
    return 0;
}

/* With server blocks, the server listens on every server's addresses too: a server
 * without a `listen` of its own listens on the top-level ones (8080 when there are none,
 * as today), and those are dropped when every server has its own and the top level says
 * nothing. An address a class listens on is the class's listener already. */
static void add_site_listens(struct config *cfg, struct conf_reader *r)
{
    bool any_server = false, all_own = true;
    for (const struct conf_node *s = cfg->tree; s; s = s->next) {
        if (strcmp(s->name, "server") != 0 || !s->is_block)
            continue;
        any_server = true;
        bool own = false;
        for (const struct conf_node *c = s->children; c; c = c->next)
            own |= strcmp(c->name, "listen") == 0;
        all_own &= own;
    }
    if (!any_server)
        return;
    if (all_own && !config_next(cfg, "listen", NULL))
        cfg->n_listen = 0;
    for (const struct conf_node *s = cfg->tree; s; s = s->next) {
        if (strcmp(s->name, "server") != 0 || !s->is_block)
            continue;
        for (const struct conf_node *c = s->children; c; c = c->next) {
            struct config_listen first;
            unsigned ports;
            if (strcmp(c->name, "listen") != 0 || c->n_args < 1 ||
                config_parse_listen_range(c->args[0], &first, &ports) < 0)
                continue; /* reported where it stands */
            char msg[256];
            for (unsigned i = 1; i < c->n_args; i++) /* default_server is the sites' */
                config_listen_param(&first, c->args[i], msg, sizeof(msg));
            for (unsigned k = 0; k < ports; k++) {
                struct config_listen l = first;
                config_listen_nth(&l, k);
                if (add_site_listen(cfg, r, c->line, &l) < 0)
                    return;
            }
        }
    }
}

const struct conf_node *config_next(const struct config *cfg, const char *name,
                                    const struct conf_node *after)
{
    for (const struct conf_node *n = after ? after->next : cfg->tree; n; n = n->next)
        if (strcmp(n->name, name) == 0)
            return n;
    return NULL;
}

/* The whole file, or NULL with the message in err. */
static char *read_file(const char *path, size_t *len, char *err, size_t err_len)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t cap = 0, n;
    char chunk[8192];
    *len = 0;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (*len + n + 1 > cap) {
            cap = (*len + n + 1) * 2;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                snprintf(err, err_len, "%s: out of memory", path);
                return NULL;
            }
            text = t;
        }
        memcpy(text + *len, chunk, n);
        *len += n;
    }
    fclose(f);
    if (!text && !(text = strdup(""))) /* an empty file: no statements */
        snprintf(err, err_len, "%s: out of memory", path);
    return text;
}

/* --- the file as nginx lays it out: include, http { } ------------------------------------ */

#define INCLUDE_DEPTH_MAX 16

/* The statements of one included file, or NULL (empty, or an error reported). Its lines
 * carry its tag, so that every message names it. */
static struct conf_node *include_file(struct conf_reader *r, const char *path, unsigned line)
{
    char msg[1024] = "";
    size_t len;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        conf_error(r, line, "include \"%s\": is a directory", path);
        return NULL;
    }
    char *text = read_file(path, &len, msg, sizeof(msg));
    if (!text) {
        conf_error(r, line, "include: %s", msg);
        return NULL;
    }
    struct conf_lexer lx = {text, text + len, 1, path, msg, sizeof(msg), conf_file_tag(path)};
    struct conf_node *tree = NULL;
    if (conf_parse_block(&lx, &tree, 0) < 0) {
        config_error_append(r->err, r->err_len, "%s", msg);
        r->errors++;
        conf_tree_free(tree);
        tree = NULL;
    }
    free(text);
    return tree;
}

/* The statements of every file `include` names, in name order (glob's). */
static struct conf_node *include_glob(struct conf_reader *r, const char *dir,
                                      const struct conf_node *n)
{
    const char *name = n->args[0];
    char pattern[CONFIG_PATH_MAX];
    int w = name[0] == '/' ? snprintf(pattern, sizeof(pattern), "%s", name)
                           : snprintf(pattern, sizeof(pattern), "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= sizeof(pattern)) {
        conf_error(r, n->line, "include: name too long");
        return NULL;
    }
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH && !strpbrk(name, "*?[")) /* a plain name must open */
        conf_error(r, n->line, "include \"%s\": %s", pattern, strerror(ENOENT));
    else if (rc != 0 && rc != GLOB_NOMATCH)
        conf_error(r, n->line, "include \"%s\": cannot read the directory", pattern);
    struct conf_node *list = NULL, **tail = &list;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
        *tail = include_file(r, g.gl_pathv[i], n->line);
        while (*tail)
            tail = &(*tail)->next;
    }
    if (rc == 0)
        globfree(&g);
    return list;
}

/* Replace every `include` in the list at *link, and in its blocks, by what it names. */
static void include_expand(struct conf_reader *r, const char *dir, struct conf_node **link,
                           unsigned depth)
{
    while (*link) {
        struct conf_node *n = *link;
        if (n->is_block || strcmp(n->name, "include") != 0) {
            include_expand(r, dir, &n->children, depth);
            link = &n->next;
            continue;
        }
        struct conf_node *list = NULL;
        if (n->n_args != 1)
            conf_error(r, n->line, "include takes one value; usage: include FILE|MASK;");
        else if (depth >= INCLUDE_DEPTH_MAX)
            conf_error(r, n->line, "include: nested more than %d deep (does a file include "
                       "itself?)", INCLUDE_DEPTH_MAX);
        else
            list = include_glob(r, dir, n);
        include_expand(r, dir, &list, depth + 1);
        *link = list;
        while (*link)
            link = &(*link)->next;
        *link = n->next;
        n->next = NULL;
        conf_tree_free(n);
    }
}

/* nginx's main-context directives: refused inside http, where nginx refuses them too. */
static bool main_only(const char *name)
{
    static const char *const names[] = {
        "user", "worker_processes", "worker_rlimit_nofile", "pid", "events", "http",
        "load_module", "daemon", "master_process", "worker_cpu_affinity", "worker_priority",
        "worker_shutdown_timeout", "thread_pool", "env", "lock_file", "pcre_jit",
        "timer_resolution", "working_directory", NULL};
    for (const char *const *p = names; *p; p++)
        if (strcmp(*p, name) == 0)
            return true;
    return false;
}

/* `http { ... }`: its statements take its place at the top level, which is nginx's main
 * and http in one. Returns whether there was one. */
static bool lift_http(struct conf_reader *r, struct conf_node **link)
{
    const struct conf_node *first = NULL;
    unsigned first_line = 0;
    while (*link) {
        struct conf_node *n = *link;
        if (strcmp(n->name, "http") != 0) {
            link = &n->next;
            continue;
        }
        if (!n->is_block || n->n_args)
            conf_error(r, n->line, "http takes no value and a { block }; usage: http { ... }");
        else if (first)
            conf_error(r, n->line, "\"http\" directive is duplicate (first at %s:%u)",
                       conf_line_file(first_line, r->file), conf_line_no(first_line));
        first = n;
        first_line = n->line;
        for (const struct conf_node *c = n->children; c; c = c->next)
            if (main_only(c->name))
                conf_error(r, c->line, "\"%s\" directive is not allowed in http (it belongs "
                           "to the main context)", c->name);
        struct conf_node *after = n->next;
        *link = n->children;
        while (*link)
            link = &(*link)->next;
        *link = after;
        n->children = n->next = NULL;
        conf_tree_free(n);
    }
    return first != NULL;
}

/* worker_processes and worker_connections in lfhttpd's terms, said at -t. */
static void map_workers(struct config *cfg, struct conf_reader *r)
{
    const struct conf_node *wp = config_next(cfg, "worker_processes", NULL);
    const struct conf_node *th = config_next(cfg, "threads", NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = cfg->threads ? cfg->threads : cpus > 0 ? (unsigned)cpus : 1;
    if (wp && th)
        conf_error(r, wp->line, "worker_processes: the file sets threads too (%s:%u)",
                   conf_line_file(th->line, r->file), conf_line_no(th->line));
    else if (wp)
        conf_notice(r, wp->line, "worker_processes %s: one process with %u threads "
                    "(threads %s)%s", wp->args[0], threads, cfg->threads ? wp->args[0] : "0",
                    cfg->threads ? "" : ", one per CPU core");
    const struct conf_node *ev = config_next(cfg, "events", NULL);
    if (!cfg->worker_connections || !ev)
        return;
    const struct conf_node *mc = config_next(cfg, "max_connections", NULL);
    if (mc) {
        conf_error(r, mc->line, "max_connections: events sets worker_connections too");
        return;
    }
    uint64_t total = (uint64_t)cfg->worker_connections * threads;
    cfg->max_connections = total > 10000000 ? 10000000 : (unsigned)total;
    conf_notice(r, ev->line, "worker_connections %u: max_connections %u (%u per thread, "
                "%u threads)", cfg->worker_connections, cfg->max_connections,
                cfg->worker_connections, threads);
}

/* The directory relative includes are read from: the main file's, as nginx's conf
 * prefix when it is started with -c. */
static void config_dir(const char *path, char *dir, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, len, ".");
    else if (slash == path)
        snprintf(dir, len, "/");
    else
        snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

int config_load(struct config *cfg, const char *path, config_known_fn known, char *err,
                size_t err_len)
{
    if (err_len)
        err[0] = '\0';
    size_t len;
    char *text = read_file(path, &len, err, err_len);
    if (!text)
        return -1;
    snprintf(cfg->file, sizeof(cfg->file), "%s", path);
    struct conf_lexer lx = {text, text + len, 1, path, err, err_len, 0};
    int rc = conf_parse_block(&lx, &cfg->tree, 0);
    free(text);
    if (rc < 0)
        return -1;
    /* Every statement is read, whatever the ones before it held: -t reports every error. */
    struct conf_reader r = {.file = path, .owner = "", .context = CONF_TOP, .err = err,
                            .err_len = err_len, .notes = cfg->notes,
                            .notes_len = sizeof(cfg->notes)};
    char dir[CONFIG_PATH_MAX];
    config_dir(path, dir, sizeof(dir));
    include_expand(&r, dir, &cfg->tree, 0);
    cfg->http_block = lift_http(&r, &cfg->tree);
    struct core_read cr = {&r, core_directives, known};
    r.ctx = &cr;
    conf_read_block(&r, core_directives, known, cfg->tree, cfg);
    map_workers(cfg, &r);
    check_promotion(cfg, &r);
    check_reactivation(cfg, &r);
    check_class_listens(cfg, &r);
    add_site_listens(cfg, &r);
    char msg[512];
    unsigned at = 0;
    if (!r.errors && config_listen_settle(cfg->listen, cfg->n_listen, &at, msg, sizeof(msg)) < 0)
        conf_error(&r, cfg->listen[at].line, "listen: %s", msg);
    return r.errors ? -1 : 0;
}

void config_free(struct config *cfg)
{
    conf_tree_free(cfg->tree);
    cfg->tree = NULL;
}
