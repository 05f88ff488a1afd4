/* module_fastcgi.c — $fastcgi_script_name and $fastcgi_path_info (module_fastcgi.h): the
 * request's path split by its block's fastcgi_split_path_info, as nginx splits it each time
 * one of them is expanded; and the parameter lines and field-name lists the FastCGI, uwsgi
 * and SCGI modules read alike. */
#include "module_fastcgi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "directive.h"
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
