/* conn_tls.c — a connection's TLS: its handshake, reading, writing and closure, through
 * OpenSSL on the connection's non-blocking socket.
 *
 * Nothing here ever waits. Each call does what the socket allows and says what it waits
 * for (OpenSSL's SSL_ERROR_WANT_READ / WANT_WRITE); the caller re-arms the handle for it,
 * as for a plain socket. The socket BIO is OpenSSL's own (so that kernel TLS can take it
 * over), with a callback that watches its reads and writes: a read that came back short or
 * found nothing means the kernel will raise a new edge when more comes (rd_drained), a
 * write that found the socket full means the same for EPOLLOUT (wr_blocked). What OpenSSL
 * has read ahead and not yet handed out raises no edge at all: conn_tls_pending says so,
 * and conn_wait does not count such a connection as drained.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "conn.h"
#include "log.h"

/* The record type of a TLS handshake: the first byte of every ClientHello. */
#define TLS_RECORD_HANDSHAKE 0x16

static long bio_watch(BIO *b, int oper, const char *argp, size_t len, int argi, long argl,
                      int ret, size_t *processed)
{
    (void)argp;
    (void)argi;
    (void)argl;
    struct conn *c = (struct conn *)BIO_get_callback_arg(b);
    if (!c)
        return ret;
    if (oper == (BIO_CB_READ | BIO_CB_RETURN)) {
        if ((ret > 0 && processed && *processed < len) || (ret <= 0 && BIO_should_retry(b)))
            c->rd_drained = true;
    } else if (oper == (BIO_CB_WRITE | BIO_CB_RETURN)) {
        if (ret <= 0 && BIO_should_retry(b))
            c->wr_blocked = true;
    }
    return ret;
}

void conn_tls_attach(struct conn *c, void *ssl)
{
    SSL *s = ssl;
    c->tls = s;
    c->tls_flags = 0;
    SSL_set_app_data(s, c);
    SSL_set_accept_state(s);
    if (SSL_set_fd(s, c->h.fd) != 1) {
        c->tls_flags |= CONN_TLS_BROKEN; /* the first handshake step fails and says why */
        return;
    }
    BIO *bio = SSL_get_rbio(s);
    BIO_set_callback_arg(bio, (char *)c);
    BIO_set_callback_ex(bio, bio_watch);
}

bool conn_tls_finished(const struct conn *c)
{
    return SSL_is_init_finished((SSL *)c->tls);
}

bool conn_tls_pending(const struct conn *c)
{
    return !(c->tls_flags & CONN_TLS_STARVED) && SSL_has_pending((SSL *)c->tls);
}

/* Why the handshake failed, for the log: OpenSSL's first error, or the socket's. */
static void log_failure(struct conn *c, int err)
{
    unsigned long e = ERR_peek_error();
    char why[256];
    if (e)
        ERR_error_string_n(e, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "%s", err == SSL_ERROR_SYSCALL && errno ? strerror(errno)
                                                                       : "the client closed");
    log_info("connection fd %d: TLS handshake failed: %s", c->h.fd, why);
}

/* Process-wide, relaxed: once per handshake, never per request. */
static atomic_ulong tls_done, tls_resumed, tls_failed;

void conn_tls_counts(struct conn_tls_counts *out)
{
    out->handshakes = atomic_load_explicit(&tls_done, memory_order_relaxed);
    out->resumed = atomic_load_explicit(&tls_resumed, memory_order_relaxed);
    out->failed = atomic_load_explicit(&tls_failed, memory_order_relaxed);
}

enum conn_tls_step conn_tls_handshake(struct conn *c)
{
    SSL *s = c->tls;
    if (c->tls_flags & CONN_TLS_BROKEN)
        return CONN_TLS_FAILED;
    if (!(c->tls_flags & CONN_TLS_PEEKED)) {
        /* A plain request on the TLS port is told so in plain text, as nginx does. */
        unsigned char b;
        ssize_t n = recv(c->h.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            c->rd_drained = true;
            return CONN_TLS_WANT_READ;
        }
        if (n <= 0)
            return CONN_TLS_FAILED;
        if (b != TLS_RECORD_HANDSHAKE)
            return CONN_TLS_PLAIN;
        c->tls_flags |= CONN_TLS_PEEKED;
    }
    ERR_clear_error();
    int r = SSL_do_handshake(s);
    if (r == 1) {
        atomic_fetch_add_explicit(&tls_done, 1, memory_order_relaxed);
        if (SSL_session_reused(s))
            atomic_fetch_add_explicit(&tls_resumed, 1, memory_order_relaxed);
        return CONN_TLS_DONE;
    }
    int err = SSL_get_error(s, r);
    if (err == SSL_ERROR_WANT_READ) {
        c->tls_flags |= CONN_TLS_STARVED;
        return CONN_TLS_WANT_READ;
    }
    if (err == SSL_ERROR_WANT_WRITE)
        return CONN_TLS_WANT_WRITE;
    c->tls_flags |= CONN_TLS_BROKEN;
    atomic_fetch_add_explicit(&tls_failed, 1, memory_order_relaxed);
    log_failure(c, err);
    ERR_clear_error();
    return CONN_TLS_FAILED;
}

/* After an SSL_read or SSL_write that did not move bytes: -1 with errno (EAGAIN: wait),
 * or 0 at the end of the stream. */
static ssize_t io_failed(struct conn *c, int r)
{
    SSL *s = c->tls;
    int err = SSL_get_error(s, r);
    switch (err) {
    case SSL_ERROR_WANT_READ:
        c->tls_flags |= CONN_TLS_STARVED;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        c->tls_flags |= CONN_TLS_BROKEN;
        ERR_clear_error();
        if (errno == 0 || errno == EAGAIN)
            return 0;
        return -1;
    default:
        c->tls_flags |= CONN_TLS_BROKEN;
        ERR_clear_error();
        errno = EPROTO;
        return -1;
    }
}

ssize_t conn_tls_read(struct conn *c, void *buf, size_t len)
{
    ERR_clear_error();
    errno = 0;
    int r = SSL_read((SSL *)c->tls, buf, len > INT_MAX ? INT_MAX : (int)len);
    if (r <= 0)
        return io_failed(c, r);
    c->tls_flags &= (uint8_t)~CONN_TLS_STARVED;
    return r;
}

ssize_t conn_tls_write(struct conn *c, const void *buf, size_t len)
{
    if (len == 0)
        return 0;
    ERR_clear_error();
    errno = 0;
    int r = SSL_write((SSL *)c->tls, buf, len > INT_MAX ? INT_MAX : (int)len);
    return r > 0 ? r : io_failed(c, r);
}

void conn_tls_shutdown(struct conn *c)
{
    SSL *s = c->tls;
    if ((c->tls_flags & CONN_TLS_BROKEN) || !SSL_is_init_finished(s) ||
        (SSL_get_shutdown(s) & SSL_SENT_SHUTDOWN))
        return;
    ERR_clear_error();
    if (SSL_shutdown(s) < 0) /* one try: the socket may be full or gone */
        c->tls_flags |= CONN_TLS_BROKEN;
    ERR_clear_error();
}

void conn_tls_free(struct conn *c)
{
    SSL *s = c->tls;
    if (!s)
        return;
    BIO *bio = SSL_get_rbio(s);
    if (bio)
        BIO_set_callback_arg(bio, NULL);
    SSL_free(s);
    c->tls = NULL;
}
