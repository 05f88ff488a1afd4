/* upstream_tls.h — TLS to an upstream server (`proxy_pass https://...`): the client side
 * of OpenSSL for the proxy, non-blocking, driven by the proxy's events as its plain
 * sockets are.
 *
 * A location's settings (proxy_ssl_*) make one SSL_CTX at load, kept by mod_proxy. Each
 * upstream connection gets an SSL object on its socket; the proxy calls
 * upstream_tls_handshake until it is done (each call says which event to wait for), then
 * reads and writes through upstream_tls_read and upstream_tls_write, which answer as recv
 * and send do (-1 with EAGAIN when they would block; *want then says for what). A kept
 * connection keeps its SSL object, and with it its session.
 *
 * Sessions (proxy_ssl_session_reuse on, nginx's default): the last one an upstream server
 * gave is kept with the server (upstream_server.tls_session, serialized) and offered on
 * every new connection to it while the server takes it, as nginx keeps one per peer; TLS
 * 1.3's tickets, which come after the handshake, are caught by OpenSSL's new-session
 * callback.
 *
 * Verification (proxy_ssl_verify on): the chain against proxy_ssl_trusted_certificate, at
 * most proxy_ssl_verify_depth deep, and the name (proxy_ssl_name) against the
 * certificate, after the handshake, as nginx checks them; a failure is the attempt's error.
 */
#ifndef LFHTTPD_UPSTREAM_TLS_H
#define LFHTTPD_UPSTREAM_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What a location's proxy_ssl_* directives say, for upstream_tls_ctx_new. NULL: unset. */
struct upstream_tls_opts {
    const char *protocols[8]; /* proxy_ssl_protocols' words; n_protocols 0: the default */
    unsigned n_protocols;
    const char *ciphers;      /* proxy_ssl_ciphers (nginx's default: "DEFAULT") */
    const char *trusted;      /* proxy_ssl_trusted_certificate FILE */
    const char *crl;          /* proxy_ssl_crl FILE: revocation lists (PEM) */
    const char *certificate;  /* proxy_ssl_certificate FILE: ours, to the upstream */
    const char *certificate_key;
    const char *password_file; /* proxy_ssl_password_file: the key's passphrases, a line each */
    const char *commands[16][2]; /* proxy_ssl_conf_command NAME VALUE, in order */
    unsigned n_commands;
    unsigned verify_depth;    /* proxy_ssl_verify_depth (1) */
    bool verify;              /* proxy_ssl_verify */
    bool session_reuse;       /* proxy_ssl_session_reuse */
};

/* A client context for opts; NULL with the reason in why. */
void *upstream_tls_ctx_new(const struct upstream_tls_opts *opts, char *why, size_t len);
void upstream_tls_ctx_free(void *ctx);

/* A new SSL object (an SSL *) on connected socket fd, NULL when none could be made.
 * sni: the name to send (NULL: none). name: the name the certificate must have when
 * verifying (NULL: not checked). *session_slot: the server's kept session, offered (when
 * the context reuses sessions), and replaced by the one this connection gets. */
void *upstream_tls_new(void *ctx, int fd, const char *sni, const char *name,
                       void **session_slot);

/* The context an SSL object was made with: a kept connection serves only its location's
 * settings (what it verified, what it showed). */
const void *upstream_tls_ctx_of(const void *ssl);

/* Drive the handshake: 1 done, 0 not yet (wait for *want, EPOLLIN or EPOLLOUT), -1 failed
 * with the reason, as nginx words it, in why. */
int upstream_tls_handshake(void *ssl, uint32_t *want, char *why, size_t len);

/* As recv and send: bytes, 0 at the end (read: close_notify or the socket's close), -1
 * with errno (EAGAIN: wait for *want). */
ssize_t upstream_tls_read(void *ssl, void *buf, size_t len, uint32_t *want);
ssize_t upstream_tls_write(void *ssl, const void *buf, size_t len, uint32_t *want);

/* Is a kept connection still fit to carry a request? Nothing unread but records that are
 * not data (a TLS 1.3 ticket, a key update, read and taken here), no close_notify, no
 * close. Never waits. */
bool upstream_tls_idle_alive(void *ssl, int fd);
/* Has the upstream said something (data, close_notify, a close, an error) while the
 * request still goes? Records that are not data are taken; data is left to be read. Never
 * waits. */
bool upstream_tls_spoke(void *ssl, int fd);

/* Sends close_notify (once, without waiting: a socket that is full does without), then
 * frees it. notify false: freed only (the connection failed). */
void upstream_tls_close(void *ssl, bool notify);
/* The end of our side, for a tunnel whose client stopped sending: close_notify. */
void upstream_tls_shutdown(void *ssl);

/* A kept session goes (an upstream's servers at the end of a generation). */
void upstream_tls_session_free(void **session_slot);

#endif
