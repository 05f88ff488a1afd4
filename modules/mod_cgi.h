/* mod_cgi.h — the two pure parts of mod_cgi, for its unit tests: the parser of a script's
 * response head (RFC 3875 section 6) and the builder of its environment (section 4.1).
 * Neither does I/O. */
#ifndef LFHTTPD_MOD_CGI_H
#define LFHTTPD_MOD_CGI_H

#include <stddef.h>

#include "module.h"

/* Parse the head a script wrote, buf[0..len): CGI header fields ending with a blank line,
 * lines ending with LF or CRLF. Fills resp (resp_start with the status, the script's
 * fields but the hop-by-hop ones, content_length and length_known from Content-Length).
 * Returns the bytes of the head (> 0), 0 if it is not complete yet, or -1 if it is not a
 * valid CGI head (a malformed line, no Content-Type, Location or Status, a bad Status or
 * Content-Length, more fields than the response holds). The head_ops of a resp_stream. */
int cgi_parse_head(const char *buf, size_t len, struct response *resp);

/* What the environment takes from the server and the resolved script, beyond the request. */
struct cgi_vars {
    const char *software;          /* SERVER_SOFTWARE: the Server header's value */
    const char *path;              /* PATH: the server's own */
    const char *document_root;     /* DOCUMENT_ROOT: the root's real path */
    const char *hostname;          /* SERVER_NAME without a Host, on a wildcard listener */
    struct http_slice script_name; /* SCRIPT_NAME: the decoded path up to the script */
    struct http_slice path_info;   /* PATH_INFO: the decoded rest ("" or "/...") */
    const char *script_filename;   /* SCRIPT_FILENAME: the script's absolute path */
};

/* An environment for execve: envp[] points into one block of "NAME=value" strings. */
struct cgi_env {
    char **envp; /* NULL-terminated */
    char *mem;
    unsigned n;
};

/* Build the environment of a script for req: the variables of RFC 3875 section 4.1, one
 * HTTP_* per request header (repeated headers joined with ", ", Cookie with "; "), PATH,
 * and nothing else of the server's environment. Headers whose names hold anything but
 * letters, digits and '-' (HTTP_X_A must not come from "X_A"), Proxy (httpoxy),
 * Content-Length, Content-Type and Transfer-Encoding have no HTTP_* variable.
 * Returns 0, or -1 when out of memory. */
int cgi_env_build(const struct request *req, const struct cgi_vars *v, struct cgi_env *env);
/* The value of NAME in env, or NULL. */
const char *cgi_env_get(const struct cgi_env *env, const char *name);
void cgi_env_free(struct cgi_env *env);

#endif
