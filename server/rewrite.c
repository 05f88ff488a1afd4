/* rewrite.c — nginx's rewrite module: each block's `rewrite`, `break` and `return` in the
 * order written (rewrite.h), run per request without allocating: the replacement is
 * expanded on the stack, the regex's groups land in the request's captures.
 */
#include "rewrite.h"

#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "module_chain.h"
#include "vars.h"

enum rewrite_op { OP_REWRITE, OP_BREAK, OP_RETURN };
enum rewrite_flag { FLAG_NONE, FLAG_LAST, FLAG_BREAK, FLAG_REDIRECT, FLAG_PERMANENT };

struct rewrite_step {
    enum rewrite_op op;
    enum rewrite_flag flag;
    bool redirect;  /* the replacement is a URL to redirect to */
    bool drop_args; /* the replacement ended with '?': the request's arguments go */
    struct regex re;
    struct vars_value *replacement;
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

int rewrite_build(struct conf_reader *r, const struct conf_node *first, unsigned context,
                  struct rewrite_prog **out)
{
    *out = NULL;
    unsigned n = 0;
    bool any = false;
    for (const struct conf_node *s = first; s; s = s->next) {
        enum config_core_id id = id_of(s, context);
        any |= id == CONFIG_ID_REWRITE || id == CONFIG_ID_BREAK;
        n += id == CONFIG_ID_REWRITE || id == CONFIG_ID_BREAK || id == CONFIG_ID_RETURN;
    }
    if (!any)
        return 0;
    struct rewrite_prog *p = calloc(1, sizeof(*p) + n * sizeof(p->steps[0]));
    if (!p)
        return conf_error(r, 0, "out of memory");
    int rc = 0;
    for (const struct conf_node *s = first; s; s = s->next) {
        enum config_core_id id = id_of(s, context);
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
        }
    }
    if (rc) {
        rewrite_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

void rewrite_free(struct rewrite_prog *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < p->n; i++) {
        regex_free(&p->steps[i].re);
        vars_free(p->steps[i].replacement);
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
static bool rewrite_path(const struct rewrite_step *s, struct request *req)
{
    struct vars_source src;
    module_vars_source(req, &src);
    char buf[REQUEST_PATH_MAX + 8];
    long n = vars_expand(s->replacement, &src, buf, sizeof(buf));
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

enum rewrite_result rewrite_run(const struct rewrite_prog *p, struct request *req,
                                bool in_location, int return_status,
                                const struct vars_value *return_text)
{
    bool changed = false;
    for (unsigned i = 0; i < p->n; i++) {
        const struct rewrite_step *s = &p->steps[i];
        if (s->op == OP_BREAK)
            return REWRITE_GO_ON;
        if (s->op == OP_RETURN) {
            req->return_status = return_status;
            req->return_text = return_text;
            return REWRITE_RETURN;
        }
        struct regex_captures caps;
        enum regex_result m = regex_match(&s->re, req->path, req->path_len, &caps, NULL, 0);
        if (m == REGEX_LIMIT)
            return REWRITE_ERROR;
        if (m == REGEX_NOMATCH)
            continue;
        req->captures = caps;
        if (s->redirect)
            return redirect(s, req);
        if (!rewrite_path(s, req))
            return REWRITE_ERROR;
        if (s->flag == FLAG_LAST)
            return in_location ? REWRITE_SEARCH : REWRITE_GO_ON;
        if (s->flag == FLAG_BREAK)
            return REWRITE_GO_ON;
        changed = true;
    }
    return changed && in_location ? REWRITE_SEARCH : REWRITE_GO_ON;
}
