/* rewrite.c — nginx's rewrite module: each block's `rewrite`, `break` and `return` in the
 * order written (rewrite.h), run per request without allocating: the replacement is
 * expanded on the stack, the regex's groups land in the request's captures.
 */
#include "rewrite.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config.h"
#include "module_chain.h"
#include "vars.h"

enum rewrite_op { OP_REWRITE, OP_BREAK, OP_RETURN, OP_IF, OP_SET };

/* `if (CONDITION)`'s test: a value's truth, a comparison, a regex or a file's kind. */
enum cond_kind {
    COND_TRUE,   /* `($var)`: neither empty nor "0" */
    COND_EQ,     /* = */
    COND_REGEX,  /* ~ ~* */
    COND_FILE,   /* -f */
    COND_DIR,    /* -d */
    COND_EXISTS, /* -e */
    COND_EXEC,   /* -x */
};

struct rewrite_cond {
    enum cond_kind kind;
    bool negate; /* != !~ !~* !-f ... */
    struct vars_value *left, *right;
    struct regex re;
};
enum rewrite_flag { FLAG_NONE, FLAG_LAST, FLAG_BREAK, FLAG_REDIRECT, FLAG_PERMANENT };

struct rewrite_step {
    enum rewrite_op op;
    enum rewrite_flag flag;
    bool redirect;  /* the replacement is a URL to redirect to */
    bool drop_args; /* the replacement ended with '?': the request's arguments go */
    struct regex re;
    struct vars_value *replacement;
    int status;                 /* `return` in an `if`: its code */
    struct rewrite_cond cond;   /* `if` */
    struct rewrite_prog *body;  /* `if`: its block */
    unsigned user;              /* `set`: the variable's index (vars_declare) */
    const struct conf_node *node;       /* `if`: its statement */
    const struct module_level *level;   /* `if` in a location: its block's settings, the
                                           request's while the condition holds (NULL in a
                                           server) */
};

struct rewrite_prog {
    unsigned n;
    struct rewrite_step steps[];
};

static enum config_core_id id_of(const struct conf_node *n, unsigned context)
{
    const struct conf_directive *d = conf_table_find(config_core_directives(), n->name,
                                                     context);
    return d ? (enum config_core_id)d->id : CONFIG_ID_NONE;
}

static bool starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int read_rewrite(struct conf_reader *r, const struct conf_node *n,
                        struct rewrite_step *s)
{
    static const char *const flags[] = {"", "last", "break", "redirect", "permanent"};
    if (n->n_args == 3) {
        for (unsigned f = FLAG_LAST; f <= FLAG_PERMANENT && !s->flag; f++)
            if (strcmp(n->args[2], flags[f]) == 0)
                s->flag = (enum rewrite_flag)f;
        if (!s->flag)
            return conf_error(r, n->line, "rewrite: invalid flag \"%s\" (last, break, "
                              "redirect or permanent)", n->args[2]);
    }
    char err[256];
    if (regex_compile(&s->re, n->args[0], 0, err, sizeof(err)) < 0)
        return conf_error(r, n->line, "rewrite: \"%s\": %s", n->args[0], err);
    const char *text = n->args[1];
    s->redirect = s->flag == FLAG_REDIRECT || s->flag == FLAG_PERMANENT ||
                  starts(text, "http://") || starts(text, "https://") ||
                  starts(text, "$scheme");
    size_t len = strlen(text);
    char copy[4096];
    if (len >= sizeof(copy))
        return conf_error(r, n->line, "rewrite: the replacement is too long");
    memcpy(copy, text, len + 1);
    if (len && copy[len - 1] == '?') {
        s->drop_args = true;
        copy[len - 1] = '\0';
    }
    if (vars_compile(copy, s->redirect ? VARS_HEADER : VARS_RAW, &s->replacement, err,
                     sizeof(err)) < 0)
        return conf_error(r, n->line, "\"%s\": %s", text, err);
    return 0;
}

static int build(struct conf_reader *r, const struct conf_node *first, unsigned context,
                 bool in_if, struct rewrite_prog **out);

static int compile_value(struct conf_reader *r, unsigned line, const char *text,
                         enum vars_context ctx, struct vars_value **out)
{
    char err[256];
    if (vars_compile(text, ctx, out, err, sizeof(err)) < 0)
        return conf_error(r, line, "\"%s\": %s", text, err);
    return 0;
}

/* `return CODE [TEXT|URL]` or `return URL` inside an `if`, as a block's own. */
static int read_if_return(struct conf_reader *r, const struct conf_node *n,
                          struct rewrite_step *s)
{
    const char *a = n->args[0];
    if (n->n_args == 1 && (starts(a, "http://") || starts(a, "https://") ||
                           starts(a, "$scheme"))) {
        s->status = 302;
        return compile_value(r, n->line, a, VARS_HEADER, &s->replacement);
    }
    char *end;
    long v = strtol(a, &end, 10);
    if (*a < '0' || *a > '9' || *end || v < 200 || v > 599)
        return conf_error(r, n->line, "return: invalid code \"%s\" (200 to 599, or a URL "
                          "starting with http:// or https://)", a);
    s->status = (int)v;
    if (n->n_args == 1)
        return 0;
    bool redirect = v == 301 || v == 302 || v == 303 || v == 307 || v == 308;
    return compile_value(r, n->line, n->args[1], redirect ? VARS_HEADER : VARS_RAW,
                         &s->replacement);
}

/* The condition's words, without nginx's parentheses: "($a", "=", "b)" or "(", "$a", ")". */
static unsigned cond_words(const struct conf_node *n, const char **w, char (*buf)[256])
{
    unsigned k = 0;
    for (unsigned i = 0; i < n->n_args && k < 4; i++) {
        const char *a = n->args[i];
        size_t len = strlen(a);
        if (i == 0 && a[0] == '(')
            a++, len--;
        if (i + 1 == n->n_args && len && a[len - 1] == ')')
            len--;
        if (len == 0 && (i == 0 || i + 1 == n->n_args))
            continue;
        if (len >= sizeof(buf[0]))
            len = sizeof(buf[0]) - 1;
        memcpy(buf[k], a, len);
        buf[k][len] = '\0';
        w[k] = buf[k];
        k++;
    }
    return k;
}

static int read_cond(struct conf_reader *r, const struct conf_node *n, struct rewrite_cond *c)
{
    const char *w[4];
    char buf[4][256];
    unsigned k = cond_words(n, w, buf);
    if (n->n_args == 0 || n->args[0][0] != '(' ||
        n->args[n->n_args - 1][strlen(n->args[n->n_args - 1]) - 1] != ')')
        return conf_error(r, n->line, "if: the condition is written in parentheses");
    if (k == 1 && w[0][0] == '$') {
        c->kind = COND_TRUE;
        return compile_value(r, n->line, w[0], VARS_RAW, &c->left);
    }
    if (k == 2) {
        static const struct { const char *op; enum cond_kind kind; } files[] = {
            {"-f", COND_FILE}, {"-d", COND_DIR}, {"-e", COND_EXISTS}, {"-x", COND_EXEC}};
        const char *op = w[0];
        c->negate = op[0] == '!';
        for (unsigned i = 0; i < 4; i++)
            if (strcmp(op + c->negate, files[i].op) == 0) {
                c->kind = files[i].kind;
                return compile_value(r, n->line, w[1], VARS_RAW, &c->left);
            }
    }
    if (k == 3 && w[0][0] == '$') {
        const char *op = w[1];
        c->negate = op[0] == '!';
        if (compile_value(r, n->line, w[0], VARS_RAW, &c->left) < 0)
            return -1;
        if (strcmp(op + c->negate, "=") == 0) {
            c->kind = COND_EQ;
            return compile_value(r, n->line, w[2], VARS_RAW, &c->right);
        }
        if (strcmp(op + c->negate, "~") == 0 || strcmp(op + c->negate, "~*") == 0) {
            char err[256];
            c->kind = COND_REGEX;
            if (regex_compile(&c->re, w[2], op[c->negate + 1] ? REGEX_CASELESS : 0, err,
                              sizeof(err)) < 0)
                return conf_error(r, n->line, "if: \"%s\": %s", w[2], err);
            return 0;
        }
    }
    return conf_error(r, n->line, "if: invalid condition (a variable; $var = | != TEXT; "
                      "$var ~ | ~* | !~ | !~* REGEX; -f | -d | -e | -x and their ! with a "
                      "path)");
}

static int read_if(struct conf_reader *r, const struct conf_node *n, unsigned context,
                   struct rewrite_step *s)
{
    s->node = n;
    if (read_cond(r, n, &s->cond) < 0)
        return -1;
    if (build(r, n->children, context, true, &s->body) < 0)
        return -1;
    if (!s->body) /* an empty block: a test with nothing to do */
        s->body = calloc(1, sizeof(*s->body));
    return s->body ? 0 : conf_error(r, n->line, "out of memory");
}

/* What nginx takes inside a location's `if` (its NGX_HTTP_LIF_CONF directives): the
 * rewrite module's run in order here; the others are the `if` block's settings, which a
 * level of their own holds (module_level.c). */
static const char *const location_if[] = {
    "access_log", "add_header", "add_header_inherit", "add_trailer", "add_trailer_inherit",
    "charset", "error_page", "expires", "fastcgi_pass", "grpc_pass", "gzip", "limit_rate",
    "limit_rate_after", "memcached_pass", "override_charset", "post_action", "proxy_pass",
    "root", "scgi_pass", "sendfile", "source_charset", "ssi", "uwsgi_pass",
};

bool rewrite_if_takes(const char *name)
{
    for (size_t i = 0; i < sizeof(location_if) / sizeof(location_if[0]); i++)
        if (strcmp(name, location_if[i]) == 0)
            return true;
    return false;
}

/* Inside an `if`: 0 for a statement of the rewrite module (a step), 1 for another that
 * nginx takes in a location's `if` (the block's settings: no step), else refused as nginx
 * refuses it (a server's `if` takes the rewrite module's alone). */
static int if_statement(struct conf_reader *r, const struct conf_node *s, unsigned context,
                        enum config_core_id *id)
{
    *id = id_of(s, context);
    if (strcmp(s->name, "if") == 0)
        return conf_error(r, s->line, "if: an if inside an if is not allowed (as nginx)");
    if (*id == CONFIG_ID_REWRITE || *id == CONFIG_ID_BREAK || *id == CONFIG_ID_RETURN ||
        *id == CONFIG_ID_SET)
        return 0;
    if (strcmp(s->name, "rewrite_log") == 0 ||
        strcmp(s->name, "uninitialized_variable_warn") == 0) /* nginx's, in either `if` */
        return conf_error(r, s->line, "unknown directive \"%s\"", s->name);
    if (context == CONF_LOCATION && rewrite_if_takes(s->name))
        return 1;
    return conf_error(r, s->line, "\"%s\" directive is not allowed inside if%s", s->name,
                      context == CONF_LOCATION ? "" : " in a server (rewrite, return, set, "
                      "break)");
}

int rewrite_build(struct conf_reader *r, const struct conf_node *first, unsigned context,
                  struct rewrite_prog **out)
{
    return build(r, first, context, false, out);
}

static int build(struct conf_reader *r, const struct conf_node *first, unsigned context,
                 bool in_if, struct rewrite_prog **out)
{
    *out = NULL;
    unsigned n = 0;
    bool any = in_if;
    for (const struct conf_node *s = first; s; s = s->next) {
        enum config_core_id id = id_of(s, context);
        any |= id == CONFIG_ID_REWRITE || id == CONFIG_ID_BREAK || id == CONFIG_ID_IF ||
                id == CONFIG_ID_SET;
        n += id == CONFIG_ID_REWRITE || id == CONFIG_ID_BREAK || id == CONFIG_ID_RETURN ||
             id == CONFIG_ID_IF || id == CONFIG_ID_SET || in_if;
    }
    if (!any || n == 0)
        return 0;
    struct rewrite_prog *p = calloc(1, sizeof(*p) + n * sizeof(p->steps[0]));
    if (!p)
        return conf_error(r, 0, "out of memory");
    int rc = 0;
    for (const struct conf_node *s = first; s; s = s->next) {
        enum config_core_id id;
        if (in_if) {
            int k = if_statement(r, s, context, &id);
            if (k != 0) {
                rc |= k < 0 ? -1 : 0;
                continue;
            }
        } else {
            id = id_of(s, context);
        }
        struct rewrite_step *st = &p->steps[p->n];
        if (id == CONFIG_ID_REWRITE) {
            p->n++;
            st->op = OP_REWRITE;
            rc |= read_rewrite(r, s, st);
        } else if (id == CONFIG_ID_BREAK) {
            p->n++;
            st->op = OP_BREAK;
        } else if (id == CONFIG_ID_RETURN) {
            p->n++;
            st->op = OP_RETURN;
            if (in_if)
                rc |= read_if_return(r, s, st);
        } else if (id == CONFIG_ID_SET) {
            p->n++;
            st->op = OP_SET;
            /* declared as the file was read ("$NAME"): its index again */
            int user = vars_declare(s->args[0] + 1, strlen(s->args[0] + 1));
            st->user = user < 0 ? 0 : (unsigned)user;
            if (user < 0)
                rc |= conf_error(r, s->line, "set: invalid variable \"%s\"", s->args[0]);
            rc |= compile_value(r, s->line, s->args[1], VARS_RAW, &st->replacement);
        } else if (id == CONFIG_ID_IF) {
            p->n++;
            st->op = OP_IF;
            rc |= read_if(r, s, context, st);
        }
    }
    if (rc) {
        rewrite_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

void rewrite_set_if_level(struct rewrite_prog *p, const struct conf_node *node,
                          const struct module_level *level)
{
    for (unsigned i = 0; p && i < p->n; i++)
        if (p->steps[i].op == OP_IF && p->steps[i].node == node)
            p->steps[i].level = level;
}

void rewrite_free(struct rewrite_prog *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < p->n; i++) {
        struct rewrite_step *s = &p->steps[i];
        regex_free(&s->re);
        vars_free(s->replacement);
        regex_free(&s->cond.re);
        vars_free(s->cond.left);
        vars_free(s->cond.right);
        rewrite_free(s->body);
    }
    free(p);
}

/* A redirect: answered by `return` with the replacement, expanded when the answer is
 * made, with the rewrite's groups (the request's captures now). */
static enum rewrite_result redirect(const struct rewrite_step *s, struct request *req)
{
    req->return_status = s->flag == FLAG_PERMANENT ? 301 : 302;
    req->return_text = s->replacement;
    req->return_args = !s->drop_args;
    return REWRITE_RETURN;
}

/* The replacement becomes the path: its "?args" and the request's after them (unless it
 * ended with '?'), as nginx's. */
static bool rewrite_path(const struct rewrite_step *s, struct request *req,
                         const struct vars_source *src)
{
    char buf[REQUEST_PATH_MAX + 8];
    long n = vars_expand(s->replacement, src, buf, sizeof(buf));
    if (n <= 0)
        return false;
    size_t len = (size_t)n;
    bool own_args = memchr(buf, '?', len) != NULL;
    if (s->drop_args && !own_args) {
        if (len + 1 >= sizeof(buf))
            return false;
        buf[len++] = '?'; /* empty arguments replace the request's */
    } else if (!s->drop_args && own_args && req->has_args && req->args.len) {
        if (len + 1 + req->args.len >= sizeof(buf))
            return false;
        buf[len++] = '&';
        memcpy(buf + len, req->args.p, req->args.len);
        len += req->args.len;
    }
    return module_route_set_path(req, buf, len);
}

/* What a list says when it ends: go on after it (a rewrite may have changed the path),
 * stop the block's lists (`break`), or an answer. */
enum run_end { RUN_ON, RUN_STOP, RUN_SEARCH, RUN_RETURN, RUN_ERROR };

/* The text the regex groups of an `if` were taken from must outlive the expansion: it is
 * kept at the end of the path's buffer, as the captures of a location are (above the path
 * and its arguments). False: it does not fit (no groups then). */
static bool keep_subject(struct request *req, struct regex_captures *caps, const char *text,
                         size_t len)
{
    size_t floor = req->path_len + 1;
    const char *args_end = req->args.p ? req->args.p + req->args.len : NULL;
    if (args_end > req->path && args_end <= req->path + REQUEST_PATH_MAX &&
        (size_t)(args_end - req->path) > floor)
        floor = (size_t)(args_end - req->path);
    if (floor > REQUEST_PATH_MAX || len > REQUEST_PATH_MAX - floor)
        return false;
    char *at = req->path + REQUEST_PATH_MAX - len;
    memmove(at, text, len);
    caps->subject = at;
    return true;
}

static bool file_test(enum cond_kind kind, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return false;
    switch (kind) {
    case COND_FILE: return S_ISREG(st.st_mode);
    case COND_DIR: return S_ISDIR(st.st_mode);
    case COND_EXEC: return (st.st_mode & S_IXUSR) != 0; /* a directory too, as nginx's */
    default: return true;
    }
}

/* 1 true, 0 false, -1 an error (a value too long, a regex over its limits). */
static int test(const struct rewrite_cond *c, struct request *req,
                const struct vars_source *src)
{
    char left[REQUEST_PATH_MAX];
    long n = vars_expand(c->left, src, left, sizeof(left));
    if (n < 0)
        return -1;
    bool yes;
    if (c->kind == COND_TRUE) {
        yes = n > 0 && !(n == 1 && left[0] == '0');
    } else if (c->kind == COND_EQ) {
        char right[REQUEST_PATH_MAX];
        long m = vars_expand(c->right, src, right, sizeof(right));
        if (m < 0)
            return -1;
        yes = m == n && memcmp(left, right, (size_t)n) == 0;
    } else if (c->kind == COND_REGEX) {
        struct regex_captures caps;
        enum regex_result r = regex_match(&c->re, left, (size_t)n, &caps, NULL, 0);
        if (r == REGEX_LIMIT)
            return -1;
        yes = r == REGEX_MATCH;
        if (yes && !c->negate) { /* its groups are the request's now, as nginx's */
            if (caps.n && !keep_subject(req, &caps, left, (size_t)n))
                caps.n = 0;
            req->captures = caps;
        }
    } else {
        yes = memchr(left, '\0', (size_t)n) == NULL && file_test(c->kind, left);
    }
    return yes != c->negate;
}

/* --- map ----------------------------------------------------------------------------------- */

enum map_kind { MAP_EXACT, MAP_LEADING, MAP_TRAILING, MAP_REGEX };

#define MAP_MEMO_MIN_KEYS 16 /* a map with this many keys remembers its answers (below) */

struct map_entry {
    enum map_kind kind;
    char *key; /* exact: the key; leading: ".example.com"; trailing: "www.example." */
    size_t len;
    struct regex re;
    struct vars_value *value;
    const char *constant; /* the value's text when it has no variable (vars_constant): */
    size_t constant_len;  /* copied as it is, and a regex key's groups are not kept */
};

struct rewrite_map {
    struct rewrite_map *next;
    char *name; /* $NAME without '$' */
    unsigned user; /* its index (vars_declare) */
    struct vars_value *source;
    struct vars_value *dflt; /* NULL: "" */
    const char *dflt_constant; /* its text when it has no variable */
    size_t dflt_constant_len;
    bool hostnames;
    bool memo; /* its answers are worth remembering (map_memo_find): it has a regex key, or
                  many keys */
    unsigned n;
    struct map_entry *entries;
    struct geo *geo; /* a `geo` block's networks (below); NULL for a map */
    struct split *split; /* a `split_clients` block's parts (below); NULL for a map */
};

static int read_map_entry(struct conf_reader *r, struct rewrite_map *m,
                          const struct conf_node *s)
{
    struct map_entry *e = &m->entries[m->n];
    const char *key = s->name;
    if (key[0] == '~') {
        bool caseless = key[1] == '*';
        char err[256];
        e->kind = MAP_REGEX;
        if (regex_compile(&e->re, key + 1 + caseless, caseless ? REGEX_CASELESS : 0, err,
                          sizeof(err)) < 0)
            return conf_error(r, s->line, "map: \"%s\": %s", key, err);
    } else {
        if (key[0] == '\\')
            key++; /* "\default": the key "default" */
        size_t len = strlen(key);
        e->kind = MAP_EXACT;
        if (m->hostnames && len > 2 && strncmp(key, "*.", 2) == 0)
            e->kind = MAP_LEADING, key++, len--;
        else if (m->hostnames && len > 1 && key[0] == '.')
            e->kind = MAP_LEADING;
        else if (m->hostnames && len > 2 && strcmp(key + len - 2, ".*") == 0)
            e->kind = MAP_TRAILING, len--;
        e->key = strndup(key, len);
        e->len = len;
        if (!e->key)
            return conf_error(r, s->line, "out of memory");
    }
    m->n++;
    if (compile_value(r, s->line, s->args[0], VARS_RAW, &e->value) < 0)
        return -1;
    e->constant = vars_constant(e->value, &e->constant_len);
    return 0;
}

static int read_map(struct conf_reader *r, const struct conf_node *n, struct rewrite_map *m)
{
    if (n->args[1][0] != '$')
        return conf_error(r, n->line, "map: \"%s\" is not a variable", n->args[1]);
    m->name = strdup(n->args[1] + 1);
    int user = vars_declare(n->args[1] + 1, strlen(n->args[1] + 1));
    if (user < 0)
        return conf_error(r, n->line, "map: invalid variable \"%s\"", n->args[1]);
    m->user = (unsigned)user;
    unsigned count = 0;
    for (const struct conf_node *s = n->children; s; s = s->next)
        count++;
    m->entries = calloc(count + 1, sizeof(*m->entries));
    if (!m->name || !m->entries)
        return conf_error(r, n->line, "out of memory");
    if (compile_value(r, n->line, n->args[0], VARS_RAW, &m->source) < 0)
        return -1;
    int rc = 0;
    for (const struct conf_node *s = n->children; s; s = s->next) {
        bool bare = s->n_args == 0 && !s->is_block;
        if (bare && strcmp(s->name, "hostnames") == 0) {
            if (m->n)
                rc |= conf_error(r, s->line, "map: hostnames comes before the values");
            m->hostnames = true;
        } else if (bare && strcmp(s->name, "volatile") == 0) {
            continue; /* a map's value is never cached here: made each time it is read */
        } else if (s->n_args != 1 || s->is_block) {
            rc |= conf_error(r, s->line, "map: \"%s\": a KEY and its VALUE", s->name);
        } else if (strcmp(s->name, "default") == 0) {
            vars_free(m->dflt);
            m->dflt_constant = NULL;
            rc |= compile_value(r, s->line, s->args[0], VARS_RAW, &m->dflt);
            if (m->dflt)
                m->dflt_constant = vars_constant(m->dflt, &m->dflt_constant_len);
        } else {
            rc |= read_map_entry(r, m, s);
        }
    }
    for (unsigned i = 0; i < m->n; i++)
        m->memo |= m->entries[i].kind == MAP_REGEX;
    m->memo |= m->n >= MAP_MEMO_MIN_KEYS;
    return rc;
}

struct geo;
static void geo_free(struct geo *g);
struct split;
static void split_free(struct split *sp);
static long put_constant(const char *text, size_t len, char *out, size_t cap);

static void map_free(struct rewrite_map *m)
{
    for (unsigned i = 0; i < m->n; i++) {
        free(m->entries[i].key);
        regex_free(&m->entries[i].re);
        vars_free(m->entries[i].value);
    }
    free(m->entries);
    vars_free(m->source);
    vars_free(m->dflt);
    geo_free(m->geo);
    split_free(m->split);
    free(m->name);
    free(m);
}

/* --- geo ------------------------------------------------------------------------------------
 *
 * `geo [$ADDRESS] $NAME { ... }`, nginx's: $NAME's value is chosen by the client's address
 * (or ADDRESS's value, 255.255.255.255 when it is no address), the most specific network
 * that holds it. A geo is a map without keys: its networks, sorted by family, then prefix
 * length (longest first), then address, so that a lookup is a binary search in each
 * prefix length the family has, longest first. With `ranges;`, IPv4 ranges instead, kept
 * as nginx keeps them (geo_range_add): a binary search. `proxy` networks are trusted: a
 * client among them is replaced by the last address of X-Forwarded-For (the last untrusted
 * one with `proxy_recursive`). Values are text, as nginx's (no variables). */
struct geo_net {
    uint8_t family; /* 4 or 6 */
    uint8_t bits;
    uint8_t addr[16]; /* masked to bits */
    uint32_t seq;     /* the order written: of two equal networks the later wins */
    const char *value;
};

struct geo_range {
    uint32_t from, to; /* host order, inclusive */
    const char *value;
};

struct geo_group { /* the networks of one family and prefix length: nets[start, end) */
    uint8_t family, bits;
    unsigned start, end;
};

struct geo {
    bool ranges, recursive;
    unsigned n_nets, n_groups, n_ranges, n_proxies;
    struct geo_net *nets;
    struct geo_group *groups;
    struct geo_range *ranges_list;
    struct config_cidr *proxies;
    char *dflt; /* NULL: "" */
    char **values; /* every value's text, freed with the geo */
    unsigned n_values;
};

static void geo_free(struct geo *g)
{
    if (!g)
        return;
    for (unsigned i = 0; i < g->n_values; i++)
        free(g->values[i]);
    free(g->values);
    free(g->dflt);
    free(g->nets);
    free(g->groups);
    free(g->ranges_list);
    free(g->proxies);
    free(g);
}

/* A network as written: ADDR or ADDR/BITS, its low bits cleared (nginx warns of them). */
static bool geo_parse_net(const char *text, struct geo_net *n)
{
    struct config_cidr c;
    if (config_cidr_parse(text, &c) < 0 || (c.family != AF_INET && c.family != AF_INET6))
        return false;
    memset(n, 0, sizeof(*n));
    n->family = c.family == AF_INET ? 4 : 6;
    n->bits = (uint8_t)c.prefix_bits;
    unsigned len = n->family == 4 ? 4 : 16;
    memcpy(n->addr, c.addr, len);
    for (unsigned i = 0; i < len; i++) {
        unsigned keep = n->bits > i * 8 ? n->bits - i * 8 : 0;
        n->addr[i] &= keep >= 8 ? 0xff : (uint8_t)(0xff << (8 - keep));
    }
    return true;
}

static bool geo_parse_v4(const char *p, size_t len, uint32_t *out)
{
    char text[INET_ADDRSTRLEN];
    struct in_addr a;
    if (len >= sizeof(text))
        return false;
    memcpy(text, p, len);
    text[len] = '\0';
    if (inet_pton(AF_INET, text, &a) != 1)
        return false;
    *out = ntohl(a.s_addr);
    return true;
}

static int geo_net_order(const void *pa, const void *pb)
{
    const struct geo_net *a = pa, *b = pb;
    if (a->family != b->family)
        return a->family - b->family;
    if (a->bits != b->bits)
        return b->bits - a->bits;
    int c = memcmp(a->addr, b->addr, a->family == 4 ? 4 : 16);
    if (c)
        return c;
    return a->seq < b->seq ? 1 : -1; /* the later first: it is the one kept */
}

static const char *geo_keep_value(struct geo *g, const char *text)
{
    char *v = strdup(text);
    if (!v)
        return NULL;
    g->values[g->n_values++] = v;
    return v;
}

/* The networks sorted, equal ones reduced to the later, deleted ones gone, and grouped. */
static int geo_index(struct geo *g, const bool *deleted)
{
    unsigned kept = 0;
    for (unsigned i = 0; i < g->n_nets; i++)
        if (!deleted[i])
            g->nets[kept++] = g->nets[i];
    g->n_nets = kept;
    qsort(g->nets, g->n_nets, sizeof(*g->nets), geo_net_order);
    kept = 0;
    for (unsigned i = 0; i < g->n_nets; i++) {
        const struct geo_net *prev = kept ? &g->nets[kept - 1] : NULL;
        if (prev && prev->family == g->nets[i].family && prev->bits == g->nets[i].bits &&
            memcmp(prev->addr, g->nets[i].addr, 16) == 0)
            continue;
        g->nets[kept++] = g->nets[i];
    }
    g->n_nets = kept;
    g->groups = calloc(g->n_nets + 1, sizeof(*g->groups));
    if (!g->groups)
        return -1;
    for (unsigned i = 0; i < g->n_nets; i++) {
        struct geo_group *last = g->n_groups ? &g->groups[g->n_groups - 1] : NULL;
        if (last && last->family == g->nets[i].family && last->bits == g->nets[i].bits) {
            last->end = i + 1;
            continue;
        }
        g->groups[g->n_groups++] = (struct geo_group){g->nets[i].family, g->nets[i].bits, i,
                                                       i + 1};
    }
    return 0;
}

/* Ranges are kept as nginx keeps them: sorted segments that do not overlap. A new range
 * is one apart from the others, the same as one (its value replaced), or inside one (which
 * it splits); one that overlaps others otherwise is refused. `delete` takes a segment that
 * is exactly the range away (else nothing, as nginx, which warns). */
static void geo_range_put(struct geo *g, unsigned at, struct geo_range seg)
{
    memmove(&g->ranges_list[at + 1], &g->ranges_list[at],
            (g->n_ranges - at) * sizeof(*g->ranges_list));
    g->ranges_list[at] = seg;
    g->n_ranges++;
}

static int geo_range_add(struct conf_reader *r, unsigned line, struct geo *g, uint32_t from,
                         uint32_t to, const char *value, const char *text)
{
    unsigned i = 0;
    while (i < g->n_ranges && g->ranges_list[i].to < from)
        i++;
    if (i == g->n_ranges || to < g->ranges_list[i].from) {
        geo_range_put(g, i, (struct geo_range){from, to, value});
        return 0;
    }
    struct geo_range old = g->ranges_list[i];
    if (from < old.from || to > old.to)
        return conf_error(r, line, "geo: range \"%s\" overlaps another range", text);
    if (from == old.from && to == old.to) {
        g->ranges_list[i].value = value;
        return 0;
    }
    unsigned at = i;
    if (from > old.from) { /* the old range's head stays where it was */
        g->ranges_list[at].to = from - 1;
        at++;
    } else {
        g->ranges_list[at].from = to + 1; /* (to < old.to) */
        geo_range_put(g, at, (struct geo_range){from, to, value});
        return 0;
    }
    geo_range_put(g, at, (struct geo_range){from, to, value});
    if (to < old.to)
        geo_range_put(g, at + 1, (struct geo_range){to + 1, old.to, old.value});
    return 0;
}

static int geo_range_delete(struct conf_reader *r, unsigned line, struct geo *g, uint32_t from,
                            uint32_t to)
{
    (void)r;
    (void)line;
    for (unsigned i = 0; i < g->n_ranges; i++)
        if (g->ranges_list[i].from == from && g->ranges_list[i].to == to) {
            memmove(&g->ranges_list[i], &g->ranges_list[i + 1],
                    (g->n_ranges - i - 1) * sizeof(*g->ranges_list));
            g->n_ranges--;
            break;
        }
    return 0;
}

/* A networks' entry NET VALUE, `delete NET` (the same network written before), a range
 * FROM-TO VALUE. */
static int read_geo_entry(struct conf_reader *r, struct geo *g, const struct conf_node *s,
                          bool *deleted, unsigned *seq)
{
    bool del = strcmp(s->name, "delete") == 0;
    const char *what = del ? s->args[0] : s->name;
    if (g->ranges) {
        const char *dash = strchr(what, '-');
        uint32_t from, to;
        if (!dash || !geo_parse_v4(what, (size_t)(dash - what), &from) ||
            !geo_parse_v4(dash + 1, strlen(dash + 1), &to) || from > to)
            return conf_error(r, s->line, "geo: invalid range \"%s\" (FROM-TO, IPv4)", what);
        if (del)
            return geo_range_delete(r, s->line, g, from, to);
        const char *v = geo_keep_value(g, s->args[0]);
        if (!v)
            return conf_error(r, s->line, "out of memory");
        return geo_range_add(r, s->line, g, from, to, v, what);
    }
    struct geo_net n;
    if (!geo_parse_net(what, &n))
        return conf_error(r, s->line, "geo: invalid network \"%s\"", what);
    if (del) {
        for (unsigned i = 0; i < g->n_nets; i++)
            if (g->nets[i].family == n.family && g->nets[i].bits == n.bits &&
                memcmp(g->nets[i].addr, n.addr, 16) == 0)
                deleted[i] = true;
        return 0;
    }
    n.seq = (*seq)++;
    n.value = geo_keep_value(g, s->args[0]);
    if (!n.value)
        return conf_error(r, s->line, "out of memory");
    g->nets[g->n_nets++] = n;
    return 0;
}

static int read_geo(struct conf_reader *r, const struct conf_node *n, struct rewrite_map *m)
{
    const char *name = n->args[n->n_args - 1];
    if (name[0] != '$')
        return conf_error(r, n->line, "geo: \"%s\" is not a variable", name);
    m->name = strdup(name + 1);
    int user = vars_declare(name + 1, strlen(name + 1));
    if (user < 0)
        return conf_error(r, n->line, "geo: invalid variable \"%s\"", name);
    m->user = (unsigned)user;
    unsigned count = 0;
    for (const struct conf_node *s = n->children; s; s = s->next)
        count++;
    struct geo *g = m->geo = calloc(1, sizeof(*g));
    bool *deleted = calloc(count + 1, sizeof(*deleted));
    if (g) {
        g->nets = calloc(count + 1, sizeof(*g->nets));
        g->ranges_list = calloc(2 * count + 1, sizeof(*g->ranges_list));
        g->proxies = calloc(count + 1, sizeof(*g->proxies));
        g->values = calloc(count + 1, sizeof(*g->values));
    }
    if (!m->name || !g || !deleted || !g->nets || !g->ranges_list || !g->proxies ||
        !g->values) {
        free(deleted);
        return conf_error(r, n->line, "out of memory");
    }
    if (n->n_args == 2 && compile_value(r, n->line, n->args[0], VARS_RAW, &m->source) < 0) {
        free(deleted);
        return -1;
    }
    int rc = 0;
    unsigned seq = 0;
    for (const struct conf_node *s = n->children; s; s = s->next) {
        bool bare = s->n_args == 0 && !s->is_block;
        if (bare && strcmp(s->name, "ranges") == 0) {
            if (s != n->children)
                rc |= conf_error(r, s->line, "geo: ranges comes first");
            g->ranges = true;
        } else if (bare && strcmp(s->name, "proxy_recursive") == 0) {
            g->recursive = true;
        } else if (s->n_args != 1 || s->is_block) {
            rc |= conf_error(r, s->line, "geo: \"%s\": a network and its value", s->name);
        } else if (strcmp(s->name, "default") == 0) {
            free(g->dflt);
            g->dflt = strdup(s->args[0]);
            if (!g->dflt)
                rc |= conf_error(r, s->line, "out of memory");
        } else if (strcmp(s->name, "proxy") == 0) {
            struct config_cidr *c = &g->proxies[g->n_proxies];
            if (config_cidr_parse(s->args[0], c) < 0 ||
                (c->family != AF_INET && c->family != AF_INET6))
                rc |= conf_error(r, s->line, "geo: invalid proxy \"%s\"", s->args[0]);
            else
                g->n_proxies++;
        } else {
            rc |= read_geo_entry(r, g, s, deleted, &seq);
        }
    }
    if (!rc && geo_index(g, deleted) < 0)
        rc = conf_error(r, n->line, "out of memory");
    free(deleted);
    return rc;
}

static bool geo_trusted(const struct geo *g, const struct sockaddr *sa)
{
    for (unsigned i = 0; i < g->n_proxies; i++)
        if (config_cidr_match(&g->proxies[i], sa))
            return true;
    return false;
}

/* ADDR (IPv4 or IPv6) in p[0, len) into sa. */
static bool geo_addr_of(const char *p, size_t len, union request_addr *sa)
{
    char text[INET6_ADDRSTRLEN];
    if (len == 0 || len >= sizeof(text))
        return false;
    memcpy(text, p, len);
    text[len] = '\0';
    memset(sa, 0, sizeof(*sa));
    if (inet_pton(AF_INET, text, &sa->in.sin_addr) == 1) {
        sa->in.sin_family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, text, &sa->in6.sin6_addr) == 1) {
        sa->in6.sin6_family = AF_INET6;
        return true;
    }
    return false;
}

/* A trusted client's address from X-Forwarded-For: its fields read as one list, from the
 * end; the last address, or with proxy_recursive the last that is not trusted. */
static void geo_forwarded(const struct geo *g, const struct request *req, union request_addr *a)
{
    const struct http_request *h = req->http;
    if (!h || !geo_trusted(g, &a->sa))
        return;
    for (unsigned i = h->n_headers; i-- > 0;) {
        const struct http_header *f = &h->headers[i];
        if (f->name.len != 15 || !http_bytes_eq_nocase(f->name.p, "x-forwarded-for", 15))
            continue;
        size_t end = f->value.len;
        while (end > 0) {
            while (end > 0 && (f->value.p[end - 1] == ' ' || f->value.p[end - 1] == ','))
                end--;
            size_t start = end;
            while (start > 0 && f->value.p[start - 1] != ' ' && f->value.p[start - 1] != ',')
                start--;
            union request_addr next;
            if (start == end || !geo_addr_of(f->value.p + start, end - start, &next))
                return;
            *a = next;
            if (!g->recursive || !geo_trusted(g, &a->sa))
                return;
            end = start;
        }
    }
}

/* The address a geo looks up, as 4 or 16 bytes (an IPv4-mapped IPv6 address as IPv4). */
static unsigned geo_key(const struct sockaddr *sa, uint8_t key[16])
{
    if (sa->sa_family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 4;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            memcpy(key, a->s6_addr + 12, 4);
            return 4;
        }
        memcpy(key, a->s6_addr, 16);
        return 16;
    }
    memset(key, 0xff, 4); /* not an address (a Unix socket's client): 255.255.255.255 */
    return 4;
}

static const char *geo_find(const struct geo *g, const uint8_t *key, unsigned len)
{
    if (g->ranges) {
        if (len != 4)
            return NULL;
        uint32_t a = (uint32_t)key[0] << 24 | (uint32_t)key[1] << 16 | (uint32_t)key[2] << 8 |
                     key[3];
        unsigned lo = 0, hi = g->n_ranges; /* the sorted segments: a binary search */
        while (lo < hi) {
            unsigned mid = lo + (hi - lo) / 2;
            if (g->ranges_list[mid].to < a)
                lo = mid + 1;
            else if (g->ranges_list[mid].from > a)
                hi = mid;
            else
                return g->ranges_list[mid].value;
        }
        return NULL;
    }
    uint8_t family = len == 4 ? 4 : 6;
    for (unsigned k = 0; k < g->n_groups; k++) {
        const struct geo_group *gr = &g->groups[k];
        if (gr->family != family)
            continue;
        uint8_t masked[16];
        for (unsigned i = 0; i < len; i++) {
            unsigned keep = gr->bits > i * 8 ? gr->bits - i * 8 : 0;
            masked[i] = key[i] & (keep >= 8 ? 0xff : (uint8_t)(0xff << (8 - keep)));
        }
        unsigned lo = gr->start, hi = gr->end;
        while (lo < hi) {
            unsigned mid = lo + (hi - lo) / 2;
            int c = memcmp(g->nets[mid].addr, masked, len);
            if (c == 0)
                return g->nets[mid].value;
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    return NULL;
}

/* A geo's value: the address (the client's, or the source's value), then its network's. */
static long geo_value(const struct rewrite_map *m, const struct vars_source *src, char *out,
                      size_t cap)
{
    const struct geo *g = m->geo;
    const struct request *req = src->user_vars;
    union request_addr a;
    memset(&a, 0, sizeof(a));
    if (m->source) {
        char text[256];
        long n = vars_expand(m->source, src, text, sizeof(text));
        if (n < 0 || !geo_addr_of(text, (size_t)n, &a)) {
            a.in.sin_family = AF_INET;
            a.in.sin_addr.s_addr = INADDR_NONE; /* 255.255.255.255, as nginx */
        }
    } else if (req->peer && req->peer->sa_family == AF_INET6) {
        memcpy(&a.in6, req->peer, sizeof(a.in6));
    } else if (req->peer && req->peer->sa_family == AF_INET) {
        memcpy(&a.in, req->peer, sizeof(a.in));
    } else {
        a.sa.sa_family = AF_UNIX;
    }
    if (g->n_proxies)
        geo_forwarded(g, req, &a);
    uint8_t key[16];
    unsigned len = geo_key(&a.sa, key);
    const char *v = geo_find(g, key, len);
    if (!v)
        v = g->dflt ? g->dflt : "";
    return put_constant(v, strlen(v), out, cap);
}

/* --- split_clients ---------------------------------------------------------------------------
 *
 * `split_clients STRING $NAME { PERCENT% VALUE; ... * VALUE; }`, nginx's A/B split: STRING
 * (variables expanded) is hashed with MurmurHash2 (seed 0, as nginx's), and the hash's
 * place among 2^32 picks the part: the first part takes the first PERCENT of the range,
 * the next the following PERCENT, `*` the rest; past them all, the value is empty.
 * Percentages have at most two decimals and add up to at most 100%. */
struct split_part {
    uint32_t below; /* the part takes hashes below this; 0: `*`, every hash left */
    char *value;
};

struct split {
    unsigned n;
    struct split_part *parts;
};

static void split_free(struct split *sp)
{
    if (!sp)
        return;
    for (unsigned i = 0; i < sp->n; i++)
        free(sp->parts[i].value);
    free(sp->parts);
    free(sp);
}

/* MurmurHash2 (Austin Appleby's, public domain) of p[0, len), seed 0. */
static uint32_t murmur2(const unsigned char *p, size_t len)
{
    const uint32_t m = 0x5bd1e995;
    uint32_t h = (uint32_t)len;
    while (len >= 4) {
        uint32_t k = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = h * m ^ k;
        p += 4;
        len -= 4;
    }
    switch (len) {
    case 3: h ^= (uint32_t)p[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)p[1] << 8;  /* fall through */
    case 1: h ^= p[0]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* "12.34%" into hundredths of a percent (1234); -1 when it is not one. */
static long split_percent(const char *s)
{
    long whole = 0, frac = 0;
    unsigned digits = 0, decimals = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++, digits++)
        if ((whole = whole * 10 + (*p - '0')) > 100)
            return -1;
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++) {
            if (++decimals > 2)
                return -1;
            frac = frac * 10 + (*p - '0');
        }
    }
    if (!digits || *p != '%' || p[1] != '\0')
        return -1;
    while (decimals++ < 2)
        frac *= 10;
    return whole * 100 + frac;
}

static int read_split(struct conf_reader *r, const struct conf_node *n, struct rewrite_map *m)
{
    const char *name = n->args[1];
    if (name[0] != '$')
        return conf_error(r, n->line, "split_clients: \"%s\" is not a variable", name);
    m->name = strdup(name + 1);
    int user = vars_declare(name + 1, strlen(name + 1));
    if (user < 0)
        return conf_error(r, n->line, "split_clients: invalid variable \"%s\"", name);
    m->user = (unsigned)user;
    unsigned count = 0;
    for (const struct conf_node *s = n->children; s; s = s->next)
        count++;
    struct split *sp = m->split = calloc(1, sizeof(*sp));
    if (!m->name || !sp || !(sp->parts = calloc(count + 1, sizeof(*sp->parts))))
        return conf_error(r, n->line, "out of memory");
    if (compile_value(r, n->line, n->args[0], VARS_RAW, &m->source) < 0)
        return -1;
    long sum = 0;
    for (const struct conf_node *s = n->children; s; s = s->next) {
        if (s->n_args != 1 || s->is_block)
            return conf_error(r, s->line, "split_clients: \"%s\": a PERCENT%% and its value",
                              s->name);
        long pct = strcmp(s->name, "*") == 0 ? 0 : split_percent(s->name);
        if (pct < 0 || (pct == 0 && strcmp(s->name, "*") != 0))
            return conf_error(r, s->line, "split_clients: invalid percent value \"%s\"",
                              s->name);
        sum = pct ? sum + pct : 10000;
        if (sum > 10000)
            return conf_error(r, s->line, "split_clients: percent total is greater than 100%%");
        struct split_part *part = &sp->parts[sp->n++];
        part->below = pct ? (uint32_t)((uint64_t)sum * 0xffffffffu / 10000) : 0;
        part->value = strdup(s->args[0]);
        if (!part->value)
            return conf_error(r, s->line, "out of memory");
    }
    return 0;
}

static long split_value(const struct rewrite_map *m, const struct vars_source *src, char *out,
                        size_t cap)
{
    char text[2048];
    long n = vars_expand(m->source, src, text, sizeof(text));
    if (n < 0)
        n = 0;
    uint32_t h = murmur2((const unsigned char *)text, (size_t)n);
    const struct split *sp = m->split;
    for (unsigned i = 0; i < sp->n; i++)
        if (!sp->parts[i].below || h < sp->parts[i].below)
            return put_constant(sp->parts[i].value, strlen(sp->parts[i].value), out, cap);
    return 0;
}

int rewrite_maps_build(struct conf_reader *r, const struct conf_node *tree,
                       struct rewrite_map **out)
{
    *out = NULL;
    struct rewrite_map **tail = out;
    int rc = 0;
    for (const struct conf_node *n = tree; n; n = n->next) {
        bool geo = strcmp(n->name, "geo") == 0 && n->is_block && n->n_args >= 1 &&
                   n->n_args <= 2;
        bool split = strcmp(n->name, "split_clients") == 0 && n->is_block && n->n_args == 2;
        if (!geo && !split &&
            (strcmp(n->name, "map") != 0 || !n->is_block || n->n_args != 2))
            continue;
        struct rewrite_map *m = calloc(1, sizeof(*m));
        if (!m)
            return conf_error(r, n->line, "out of memory");
        *tail = m;
        tail = &m->next;
        rc |= geo ? read_geo(r, n, m) : split ? read_split(r, n, m) : read_map(r, n, m);
    }
    if (rc) {
        rewrite_maps_free(*out);
        *out = NULL;
    }
    return rc;
}

void rewrite_maps_free(struct rewrite_map *m)
{
    while (m) {
        struct rewrite_map *next = m->next;
        map_free(m);
        m = next;
    }
}

/* The entry key[0, len) (the source's value) chooses, in nginx's order: an exact key
 * (without case); with hostnames the longest leading wildcard, then the longest trailing
 * one; the first regex that matches (its groups in caps); else NULL. */
static const struct map_entry *map_find(const struct rewrite_map *m, const char *key,
                                        size_t len, struct regex_captures *caps)
{
    const struct map_entry *lead = NULL, *trail = NULL;
    for (unsigned i = 0; i < m->n; i++) {
        const struct map_entry *e = &m->entries[i];
        if (e->kind == MAP_EXACT && e->len == len && strncasecmp(e->key, key, len) == 0)
            return e;
        if (e->kind == MAP_LEADING && (!lead || e->len > lead->len) &&
            ((len >= e->len && strncasecmp(key + len - e->len, e->key, e->len) == 0) ||
             (e->key[0] == '.' && len == e->len - 1 &&
              strncasecmp(key, e->key + 1, len) == 0)))
            lead = e;
        if (e->kind == MAP_TRAILING && (!trail || e->len > trail->len) && len >= e->len &&
            strncasecmp(key, e->key, e->len) == 0)
            trail = e;
    }
    if (lead || trail)
        return lead ? lead : trail;
    for (unsigned i = 0; i < m->n; i++)
        if (m->entries[i].kind == MAP_REGEX &&
            regex_match(&m->entries[i].re, key, len, m->entries[i].constant ? NULL : caps,
                        NULL, 0) == REGEX_MATCH)
            return &m->entries[i];
    return NULL;
}

/* --- the map memo --------------------------------------------------------------------------
 *
 * A map's search costs a PCRE2 match for each regex key it tries (a few hundred
 * instructions each) and a comparison for each key before them. A thread remembers its
 * last answers: (build, map, key) -> entry, in a small direct-mapped table of its own, as
 * the location memo of module_route.c, so that a key seen again (a status, a method, a
 * host) costs a hash and a comparison. Only maps with a regex key or many keys use it;
 * keys longer than a slot, and regex answers whose value reads the key's groups (which a
 * search makes), are not remembered. The build's id is never reused, so an answer of an
 * older configuration is never taken for a newer one's. Allocated on a thread's first use
 * and freed when the thread ends. */
#define MAP_MEMO_SLOTS 64
#define MAP_MEMO_KEY 48

struct map_memo_slot {
    uint64_t build;
    const struct rewrite_map *map;
    const struct map_entry *entry; /* NULL: the default */
    uint32_t len;
    char key[MAP_MEMO_KEY];
};

static pthread_key_t map_memo_key;
static pthread_once_t map_memo_once = PTHREAD_ONCE_INIT;
static _Thread_local struct map_memo_slot *map_memo;

static void map_memo_key_make(void)
{
    pthread_key_create(&map_memo_key, free);
}

/* The slot of (build, m, key): its answer in *e when it holds them (true), else the slot
 * to remember the answer in (NULL: not remembered). */
static bool map_memo_find(uint64_t build, const struct rewrite_map *m, const char *key,
                          size_t len, const struct map_entry **e, struct map_memo_slot **slot)
{
    *slot = NULL;
    if (!m->memo || len > MAP_MEMO_KEY)
        return false;
    if (!map_memo) {
        pthread_once(&map_memo_once, map_memo_key_make);
        map_memo = calloc(MAP_MEMO_SLOTS, sizeof(*map_memo));
        if (!map_memo)
            return false;
        pthread_setspecific(map_memo_key, map_memo);
    }
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 16777619u;
    struct map_memo_slot *s = &map_memo[(h ^ (uint32_t)(uintptr_t)m) % MAP_MEMO_SLOTS];
    if (s->build == build && s->map == m && s->len == len && memcmp(s->key, key, len) == 0) {
        *e = s->entry;
        return true;
    }
    *slot = s;
    return false;
}

static void map_memo_keep(struct map_memo_slot *s, uint64_t build, const struct rewrite_map *m,
                          const char *key, size_t len, const struct map_entry *e)
{
    if (!s || (e && e->kind == MAP_REGEX && !e->constant))
        return; /* its value reads the groups a search makes */
    s->build = build;
    s->map = m;
    s->entry = e;
    s->len = (uint32_t)len;
    memcpy(s->key, key, len);
}

/* A value without variables, copied into out as vars_expand would write it. */
static long put_constant(const char *text, size_t len, char *out, size_t cap)
{
    if (len >= cap)
        return -1;
    memcpy(out, text, len + 1);
    return (long)len;
}

/* A map's value, made when read: its source expanded on the stack, looked up, the value
 * expanded (with a regex key's groups). Both see what the expansion that read the map
 * sees (outer): in an access log's if=, the answer's $status. A map read inside its own
 * making is empty. */
static long map_value(const struct rewrite_map *m, uint64_t build,
                      const struct vars_source *outer, char *out, size_t cap)
{
    if (m->geo)
        return geo_value(m, outer, out, cap);
    if (m->split)
        return split_value(m, outer, out, cap);
    static _Thread_local unsigned depth;
    if (depth > 8)
        return 0;
    depth++;
    char key[2048];
    long n = vars_expand(m->source, outer, key, sizeof(key));
    size_t len = n > 0 ? (size_t)n : 0;
    if (m->hostnames && len && key[len - 1] == '.')
        len--;
    struct regex_captures caps;
    caps.n = 0;
    const struct map_entry *e = NULL;
    struct map_memo_slot *slot = NULL;
    if (n >= 0 && !map_memo_find(build, m, key, len, &e, &slot)) {
        e = map_find(m, key, len, &caps);
        map_memo_keep(slot, build, m, key, len, e);
    }
    long w = 0;
    if (e && e->constant) {
        w = put_constant(e->constant, e->constant_len, out, cap);
    } else if (e && e->kind == MAP_REGEX) { /* its groups are the value's $1.. */
        struct vars_source src = *outer;
        src.captures = &caps;
        w = vars_expand(e->value, &src, out, cap);
    } else if (e) {
        w = vars_expand(e->value, outer, out, cap);
    } else if (m->dflt_constant) {
        w = put_constant(m->dflt_constant, m->dflt_constant_len, out, cap);
    } else if (m->dflt) {
        w = vars_expand(m->dflt, outer, out, cap);
    }
    depth--;
    return w;
}

long rewrite_var(const struct vars_source *src, unsigned user, char *out, size_t cap)
{
    const struct request *req = src->user_vars;
    const struct request_vars *rv = &req->vars;
    for (unsigned i = 0; i < rv->n; i++)
        if (rv->v[i].user == user) {
            if (rv->v[i].len >= cap)
                return -1;
            memcpy(out, rv->buf + rv->v[i].off, rv->v[i].len);
            return rv->v[i].len;
        }
    for (const struct rewrite_map *m = req->chain ? req->chain->maps : NULL; m; m = m->next)
        if (m->user == user)
            return map_value(m, req->chain->id, src, out, cap);
    return 0;
}

/* `set`: the value is expanded into the request's own bytes (a new value of a name takes
 * its place in the list; the old bytes stay until the request ends). False: no room. */
static bool set_var(const struct rewrite_step *s, struct request *req,
                    const struct vars_source *src)
{
    struct request_vars *rv = &req->vars;
    unsigned i = 0;
    while (i < rv->n && rv->v[i].user != s->user)
        i++;
    if (i == REQUEST_VARS_MAX)
        return false;
    long n = vars_expand(s->replacement, src, rv->buf + rv->used,
                         sizeof(rv->buf) - rv->used);
    if (n < 0)
        return false;
    rv->v[i].user = (uint16_t)s->user;
    rv->v[i].off = (uint16_t)rv->used;
    rv->v[i].len = (uint16_t)n;
    rv->used += (unsigned)n;
    if (i == rv->n)
        rv->n++;
    return true;
}

/* src: the request's variables, made once for the whole run (module_vars_source); its
 * path is brought up to date before each statement, as a rewrite may have changed it. */
static enum run_end run(const struct rewrite_prog *p, struct request *req, bool in_location,
                        int return_status, const struct vars_value *return_text,
                        bool *changed, struct vars_source *src)
{
    for (unsigned i = 0; i < p->n; i++) {
        const struct rewrite_step *s = &p->steps[i];
        src->uri = req->path;
        src->uri_len = req->path_len;
        if (s->op == OP_BREAK)
            return RUN_STOP;
        if (s->op == OP_RETURN) {
            req->return_status = s->status ? s->status : return_status;
            req->return_text = s->status ? s->replacement : return_text;
            return RUN_RETURN;
        }
        if (s->op == OP_SET) {
            if (!set_var(s, req, src))
                return RUN_ERROR;
            continue;
        }
        if (s->op == OP_IF) {
            int t = test(&s->cond, req, src);
            if (t < 0)
                return RUN_ERROR;
            if (!t)
                continue;
            if (s->level) /* nginx's implicit location: its settings hold from now on */
                req->level = s->level;
            enum run_end e = run(s->body, req, in_location, return_status, return_text,
                                 changed, src);
            if (e != RUN_ON)
                return e;
            continue;
        }
        struct regex_captures caps;
        enum regex_result m = regex_match(&s->re, req->path, req->path_len, &caps, NULL, 0);
        if (m == REGEX_LIMIT)
            return RUN_ERROR;
        if (m == REGEX_NOMATCH)
            continue;
        req->captures = caps;
        if (s->redirect) {
            redirect(s, req);
            return RUN_RETURN;
        }
        if (!rewrite_path(s, req, src))
            return RUN_ERROR;
        if (s->flag == FLAG_LAST)
            return in_location ? RUN_SEARCH : RUN_STOP;
        if (s->flag == FLAG_BREAK)
            return RUN_STOP;
        *changed = true;
    }
    return RUN_ON;
}

enum rewrite_result rewrite_run(const struct rewrite_prog *p, struct request *req,
                                bool in_location, int return_status,
                                const struct vars_value *return_text)
{
    bool changed = false;
    struct vars_source src;
    module_vars_source(req, &src);
    switch (run(p, req, in_location, return_status, return_text, &changed, &src)) {
    case RUN_SEARCH: return REWRITE_SEARCH;
    case RUN_RETURN: return REWRITE_RETURN;
    case RUN_ERROR: return REWRITE_ERROR;
    case RUN_STOP: return REWRITE_GO_ON;
    case RUN_ON: break;
    }
    return changed && in_location ? REWRITE_SEARCH : REWRITE_GO_ON;
}
