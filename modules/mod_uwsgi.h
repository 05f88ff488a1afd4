/* mod_uwsgi.h — the head of a uwsgi or SCGI application's answer, as nginx's uwsgi and
 * scgi modules read it: a status line ("HTTP/1.1 200 OK", as uWSGI writes) and then
 * fields, or CGI's head (Status, Location, fields; cgi_parse_head). */
#ifndef LFHTTPD_MOD_UWSGI_H
#define LFHTTPD_MOD_UWSGI_H

#include <stddef.h>

#include "module.h"

/* The head at the start of buf[0..len): its length (> 0), 0 when more is needed, -1 when
 * it is not valid (502). Starts resp with its status and fields, as cgi_parse_head. */
int uwsgi_parse_head(const char *buf, size_t len, struct response *resp);

#endif
