/* tls.h — HTTPS: the TLS contexts of a configuration (certificates, protocols, ciphers,
 * session resumption), built once per generation, and the SSL object of each connection
 * accepted on a TLS address.
 *
 * An address is a TLS one when a `listen ADDR ssl` names it (in any server, or at the top
 * level without servers). Each server on such an address gets an SSL_CTX with its
 * certificates (its own ssl_* directives, else the top level's, each inherited on its
 * own as in nginx); one without certificates that is not its address's default server
 * is served with the default server's context, and the certificates of a server not on a
 * TLS address are loaded and checked all the same, as nginx's. A connection starts with the context of its address's default server;
 * the client's SNI, read from the ClientHello before any session is looked up, then picks
 * the server by the Host rules (site.h) and its context.
 *
 * Resumption: by ticket, with keys shared by every thread and every generation (a
 * process-wide ring of three, a new one made every ssl_session_timeout / 2, so a ticket
 * stays readable for at least ssl_session_timeout; a reload keeps them), and by session
 * ID through OpenSSL's session cache (one per address's default context, shared by the
 * threads under OpenSSL's lock). Either way a session belongs to the server that made it
 * (a session ID context made from its certificate files, names and client-certificate
 * settings): offered to another server of the address, or after a reload that changed how
 * client certificates are checked, it gets a full handshake.
 *
 * Client certificates (ssl_verify_client): asked for in the handshake by the server the
 * SNI chose and accepted whatever they are; tls_client_refused says, per request, what
 * nginx answers then. Variables: tls_var.
 *
 * Checked at load, each with FILE:LINE: a TLS server without a certificate, a certificate
 * or key that cannot be read or does not match, unknown protocols, ciphers or curves.
 */
#ifndef LFHTTPD_TLS_H
#define LFHTTPD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "config.h"
#include "site.h"

struct tls_set;

/* The TLS contexts of a configuration (cfg->tree) and its sites. *out is NULL when no
 * address is a TLS one. Returns 0, or -1 with "FILE:LINE: message" lines in err. */
int tls_set_build(const struct config *cfg, const struct site_set *sites,
                  struct tls_set **out, char *err, size_t len);
void tls_set_free(struct tls_set *t);

/* A connection accepted on local: 0 when the address is plain (*ssl NULL), 1 with a new
 * SSL object in *ssl (an SSL *, for conn_tls_attach), -1 when it could not be made. */
int tls_accept(const struct tls_set *t, const struct sockaddr *local, void **ssl);
/* A connection moved to another configuration (a reload, between requests): its checks
 * (tls_client_refused) read that one's TLS settings from now on, the old set being freed
 * with its generation. */
void tls_renew(void *ssl, const struct tls_set *t);

/* The client certificate of a connection's TLS state (an SSL *), against the
 * ssl_verify_client of the request's server srv (NULL: the connection's), as nginx checks
 * it when a request comes: 0 (no check, or it passed), 421 (the Host is not the name the
 * client's SNI gave, and srv checks certificates), 495 (it did not verify; under
 * optional_no_ca only an unknown issuer is let through) or 496 (`on` and none was sent).
 * 495 and 496 are answered as a 400 (http_response.c). */
int tls_client_refused(const void *ssl, const struct site_server *srv, struct http_slice host);

/* The $ssl_* variable `which` (enum vars_tls) of a connection's TLS state, into out:
 * vars_source's tls_var. */
long tls_var(const void *ssl, int which, char *out, size_t cap);

/* Once at start: how file bodies go out over TLS, said in the error log. */
void tls_log_path(void);

#endif
