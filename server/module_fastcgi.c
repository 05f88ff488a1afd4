/* module_fastcgi.c — $fastcgi_script_name and $fastcgi_path_info (module_fastcgi.h): the
 * request's path split by its block's fastcgi_split_path_info, as nginx splits it each time
 * one of them is expanded. */
#include "module_fastcgi.h"

#include <string.h>

#include "module_chain.h"

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
