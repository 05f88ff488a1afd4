/* module_fastcgi.h — answering through a FastCGI application: what mod_fastcgi gives the
 * core (the parameters of a request, the reading of the answer's head) and what the core
 * gives mod_fastcgi ($fastcgi_script_name and $fastcgi_path_info, which any module may
 * expand: `try_files $fastcgi_script_name`, `set $path_info $fastcgi_path_info`).
 *
 * A handler answers with resp_proxy(resp, &params->up): the upstream's servers, timeouts
 * and retries are the proxy's (struct proxy_params), and up.fastcgi says that the
 * application speaks FastCGI (http_fastcgi.c) rather than HTTP (http_proxy.c).
 */
#ifndef LFHTTPD_MODULE_FASTCGI_H
#define LFHTTPD_MODULE_FASTCGI_H

#include <stdbool.h>
#include <stddef.h>

#include "module.h"
#include "regex.h"

/* A `fastcgi_param` line (`uwsgi_param`, `scgi_param`): NAME, its VALUE compiled, and
 * whether an empty value leaves the parameter out (if_not_empty). */
struct fastcgi_param_line {
    char *name;
    size_t name_len;
    struct vars_value *value;
    bool if_not_empty;
};

#define FASTCGI_PARAM_LINES_MAX 128 /* a block's parameter lines */
#define FASTCGI_NAMES_MAX 32        /* a block's hide_header (pass_header) names */

struct conf_node;

/* Add the statement n (NAME VALUE [if_not_empty]) to a block's lines, which become the
 * block's own (*owned) at its first line. 0, or -1 with msg. */
int fastcgi_param_add(struct fastcgi_param_line **lines, unsigned *n_lines, bool *owned,
                      const struct conf_node *n, char *msg, size_t len);

/* Add the field name to a block's list of names (hide_header, pass_header), made the
 * block's own (*owned) at its first. 0, or -1 with msg. */
int fastcgi_name_add(char (**list)[64], unsigned *n, bool *owned, const char *name, char *msg,
                     size_t len);

struct fastcgi_ops {
    /* The request's parameters, as FCGI_PARAMS content (name-value pairs), into
     * out[0..cap): their length, or -1 when they do not fit. */
    long (*params)(const void *conf, const struct request *req, char *out, size_t cap);
    /* Start resp from the head of the application's output in buf[0..len) (CGI's: Status,
     * Location, fields): the head's length (> 0), 0 to wait for more, -1 when it is not a
     * valid head (502). req: the request as it was answered, or NULL. */
    int (*head)(const void *conf, const struct request *req, const char *buf, size_t len,
                struct response *resp);
};

/* The protocol of an application that does not speak FastCGI, for the core's connection
 * state (http_fastcgi.c): uwsgi_pass and scgi_pass (mod_uwsgi.c) share FastCGI's connect,
 * send, relay, timeouts and error pages, and differ in the framing of the request and in
 * the answer, which is raw bytes (a head, then the body until the application closes)
 * rather than records. */
struct fastcgi_params;
struct fastcgi_wire {
    const char *name; /* "uwsgi", "scgi" */
    /* The most frame writes for params_len bytes of parameters and body_len of body. */
    size_t (*size)(size_t params_len, size_t body_len);
    /* The request: the parameters (as ops->params wrote them) framed, then the body, at
     * out[0..cap): its length, or 0 when the protocol cannot carry it (500). */
    size_t (*frame)(const struct fastcgi_params *fp, char *out, size_t cap, const char *params,
                    size_t params_len, const char *body, size_t body_len);
};

/* How a location splits its path (fastcgi_split_path_info, fastcgi_index): the first
 * member of mod_fastcgi's settings of every block, read by module_fastcgi_var. */
struct fastcgi_split {
    const struct regex *split; /* two groups: script name, path info; NULL: none */
    const char *index;         /* fastcgi_index, or NULL */
};

/* One location's fastcgi_pass: read-only, as long as the generation. */
struct fastcgi_params {
    struct proxy_params up; /* first: up.fastcgi is true, up.ops NULL */
    const struct fastcgi_ops *ops;
    bool keep_conn;         /* fastcgi_keep_conn on */
    const struct fastcgi_wire *wire; /* NULL: FastCGI's records */
    unsigned char modifier1, modifier2; /* uwsgi_modifier1, uwsgi_modifier2 */
};

/* For the core: the FastCGI parameters of a response that resp_proxy gave them. */
static inline const struct fastcgi_params *fastcgi_params_of(const struct proxy_params *p)
{
    return p && p->fastcgi ? (const struct fastcgi_params *)p : NULL;
}

enum fastcgi_var { FASTCGI_SCRIPT_NAME, FASTCGI_PATH_INFO };

/* $fastcgi_script_name or $fastcgi_path_info of req (the path split by its block's
 * fastcgi_split_path_info, the index appended to a script name that ends in "/"), into
 * out[0..cap): its length, or -1 when it does not fit. */
long module_fastcgi_var(const struct request *req, enum fastcgi_var which, char *out,
                        size_t cap);

#endif
