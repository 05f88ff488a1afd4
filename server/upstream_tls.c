/* upstream_tls.c — TLS to an upstream server: see upstream_tls.h. */
#include "upstream_tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* The kept sessions of every server: swapped under one lock (a handshake's moment, not a
 * request's). Each connection offers a copy of its server's (SSL_SESSION_dup: no parsing),
 * so that a TLS 1.3 ticket is offered again as long as the server takes it, as nginx's kept
 * sessions are (OpenSSL marks the session object it resumed with as spent; a server that
 * sends no new ticket on a resumed connection would otherwise get a full handshake every
 * other time). */
static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;

struct kept_session {
    const void *made_by; /* the SSL_CTX it was made under: offered only under it */
    SSL_SESSION *sess;   /* a reference of ours */
};

/* An SSL object's data: where its session goes, the name to check. */
static int slot_index = -1, name_index = -1;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

static void make_indexes(void)
{
    slot_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    name_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/* OpenSSL has a session for this connection (after a TLS 1.2 handshake, or a TLS 1.3
 * ticket): it becomes the server's, the one before it let go of. */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
    void **slot = SSL_get_ex_data(ssl, slot_index);
    struct kept_session *k = slot ? malloc(sizeof(*k)) : NULL;
    if (!k)
        return 0;
    /* A session is offered only under the settings that made it: it carries the result of
     * that handshake's verification. */
    k->made_by = SSL_get_SSL_CTX(ssl);
    k->sess = sess;
    pthread_mutex_lock(&session_lock);
    struct kept_session *old = *slot;
    *slot = k;
    pthread_mutex_unlock(&session_lock);
    if (old) {
        SSL_SESSION_free(old->sess);
        free(old);
    }
    return 1; /* the reference is ours */
}

static int set_protocols(SSL_CTX *ctx, const struct upstream_tls_opts *o, char *why,
                         size_t len)
{
    int lo = TLS1_2_VERSION, hi = TLS1_3_VERSION;
    if (o->n_protocols) {
        lo = hi = 0;
        for (unsigned i = 0; i < o->n_protocols; i++) {
            int v;
            const char *p = o->protocols[i];
            if (strcmp(p, "TLSv1.2") == 0)
                v = TLS1_2_VERSION;
            else if (strcmp(p, "TLSv1.3") == 0)
                v = TLS1_3_VERSION;
            else if (strcmp(p, "TLSv1") == 0 || strcmp(p, "TLSv1.1") == 0 ||
                     strcmp(p, "SSLv3") == 0 || strcmp(p, "SSLv2") == 0)
                continue; /* (OpenSSL's security level refuses them: not offered) */
            else
                return snprintf(why, len, "unknown protocol \"%s\"", p), -1;
            lo = lo && lo < v ? lo : v;
            hi = hi > v ? hi : v;
        }
        if (!hi)
            return snprintf(why, len, "neither TLSv1.2 nor TLSv1.3: nothing to offer"), -1;
    }
    SSL_CTX_set_min_proto_version(ctx, lo);
    SSL_CTX_set_max_proto_version(ctx, hi);
    return 0;
}

/* OpenSSL's last error, for a message. */
static const char *ssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown error";
}

/* The passphrase tried: the current line of proxy_ssl_password_file. */
static int passphrase(char *buf, int size, int rwflag, void *line)
{
    (void)rwflag;
    int n = (int)strlen(line);
    if (n >= size)
        return 0;
    memcpy(buf, line, (size_t)n + 1);
    return n;
}

/* The client key, with each passphrase of the password file in turn (none: as it is). */
static int use_key(SSL_CTX *ctx, const char *key, const char *password_file, char *why,
                   size_t len)
{
    if (!password_file) {
        if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1)
            return 0;
        return snprintf(why, len, "proxy_ssl_certificate_key \"%s\": %s", key,
                        ssl_reason()), -1;
    }
    FILE *f = fopen(password_file, "r");
    if (!f)
        return snprintf(why, len, "proxy_ssl_password_file \"%s\": %s", password_file,
                        strerror(errno)), -1;
    char line[256];
    int rc = -1;
    while (rc < 0 && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        SSL_CTX_set_default_passwd_cb(ctx, passphrase);
        SSL_CTX_set_default_passwd_cb_userdata(ctx, line);
        ERR_clear_error();
        if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1)
            rc = 0;
    }
    fclose(f);
    SSL_CTX_set_default_passwd_cb(ctx, NULL);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
    explicit_bzero(line, sizeof(line));
    if (rc < 0)
        snprintf(why, len, "proxy_ssl_certificate_key \"%s\": no passphrase of \"%s\" "
                 "opens it", key, password_file);
    return rc;
}

static int go_on(int ok, X509_STORE_CTX *store)
{
    (void)ok;
    (void)store;
    return 1;
}

/* proxy_ssl_conf_command: OpenSSL's own settings, by name, after the others (nginx's). */
static int conf_commands(SSL_CTX *ctx, const struct upstream_tls_opts *o, char *why,
                         size_t len)
{
    SSL_CONF_CTX *cctx = SSL_CONF_CTX_new();
    if (!cctx)
        return snprintf(why, len, "out of memory"), -1;
    SSL_CONF_CTX_set_flags(cctx, SSL_CONF_FLAG_FILE | SSL_CONF_FLAG_CLIENT |
                                     SSL_CONF_FLAG_CERTIFICATE);
    SSL_CONF_CTX_set_ssl_ctx(cctx, ctx);
    int rc = 0;
    for (unsigned i = 0; i < o->n_commands && rc == 0; i++) {
        if (SSL_CONF_cmd(cctx, o->commands[i][0], o->commands[i][1]) > 0)
            continue;
        snprintf(why, len, "proxy_ssl_conf_command \"%s\" \"%s\": %s", o->commands[i][0],
                 o->commands[i][1], ssl_reason());
        rc = -1;
    }
    if (rc == 0 && SSL_CONF_CTX_finish(cctx) != 1) {
        snprintf(why, len, "proxy_ssl_conf_command: %s", ssl_reason());
        rc = -1;
    }
    SSL_CONF_CTX_free(cctx);
    return rc;
}

void *upstream_tls_ctx_new(const struct upstream_tls_opts *o, char *why, size_t len)
{
    pthread_once(&index_once, make_indexes);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        return snprintf(why, len, "out of memory"), NULL;
    ERR_clear_error();
    /* Renegotiation never: a read then never has to write. A close without close_notify
     * is the end of the bytes (many servers close so), not an error: the body's framing
     * says whether it came early. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* A read takes what the socket has, not a record's 5-byte header and then its rest:
     * an answer of two records was four reads, now one or two. */
    SSL_CTX_set_read_ahead(ctx, 1);
    if (set_protocols(ctx, o, why, len) < 0)
        goto fail;
    if (o->ciphers && SSL_CTX_set_cipher_list(ctx, o->ciphers) != 1) {
        snprintf(why, len, "proxy_ssl_ciphers \"%s\": %s", o->ciphers, ssl_reason());
        goto fail;
    }
    if (o->trusted && SSL_CTX_load_verify_locations(ctx, o->trusted, NULL) != 1) {
        snprintf(why, len, "proxy_ssl_trusted_certificate \"%s\": %s", o->trusted,
                 ssl_reason());
        goto fail;
    }
    if (o->crl) { /* every certificate of the chain is checked against them, as nginx */
        X509_STORE *store = SSL_CTX_get_cert_store(ctx);
        if (X509_STORE_load_file(store, o->crl) != 1) {
            snprintf(why, len, "proxy_ssl_crl \"%s\": %s", o->crl, ssl_reason());
            goto fail;
        }
        X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
    }
    if (o->certificate) {
        if (SSL_CTX_use_certificate_chain_file(ctx, o->certificate) != 1) {
            snprintf(why, len, "proxy_ssl_certificate \"%s\": %s", o->certificate,
                     ssl_reason());
            goto fail;
        }
        const char *key = o->certificate_key ? o->certificate_key : o->certificate;
        if (use_key(ctx, key, o->password_file, why, len) < 0)
            goto fail;
        if (SSL_CTX_check_private_key(ctx) != 1) {
            snprintf(why, len, "proxy_ssl_certificate_key \"%s\": %s", key, ssl_reason());
            goto fail;
        }
    }
    /* Verified after the handshake, as nginx does: the handshake itself never fails for the
     * certificate, so the error log can say why it was refused (every error is let through
     * on the way, the last one kept: nginx's numbers). */
    SSL_CTX_set_verify(ctx, o->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE,
                       o->verify ? go_on : NULL);
    SSL_CTX_set_verify_depth(ctx, (int)o->verify_depth);
    if (o->n_commands && conf_commands(ctx, o, why, len) < 0)
        goto fail;
    if (o->session_reuse) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
        SSL_CTX_sess_set_new_cb(ctx, new_session);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

void upstream_tls_ctx_free(void *ctx)
{
    SSL_CTX_free(ctx);
}

void *upstream_tls_new(void *ctx, int fd, const char *sni, const char *name,
                       void **session_slot)
{
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return NULL;
    if (SSL_set_fd(ssl, fd) != 1 || (sni && *sni && SSL_set_tlsext_host_name(ssl, sni) != 1)) {
        SSL_free(ssl);
        ERR_clear_error();
        return NULL;
    }
    SSL_set_ex_data(ssl, name_index, (void *)name);
    if (SSL_CTX_get_session_cache_mode(ctx) & SSL_SESS_CACHE_CLIENT) {
        SSL_set_ex_data(ssl, slot_index, session_slot);
        SSL_SESSION *sess = NULL;
        pthread_mutex_lock(&session_lock);
        const struct kept_session *k = *session_slot;
        if (k && k->made_by == ctx)
            sess = SSL_SESSION_dup(k->sess);
        pthread_mutex_unlock(&session_lock);
        if (sess) {
            SSL_set_session(ssl, sess); /* (it takes its own reference) */
            SSL_SESSION_free(sess);
        }
        ERR_clear_error();
    }
    SSL_set_connect_state(ssl);
    return ssl;
}

const void *upstream_tls_ctx_of(const void *ssl)
{
    return SSL_get_SSL_CTX(ssl);
}

/* errno and *want for an SSL error code: -1 always. */
static int would_block(int err, uint32_t *want)
{
    if (err == SSL_ERROR_WANT_READ) {
        *want = EPOLLIN;
        errno = EAGAIN;
    } else if (err == SSL_ERROR_WANT_WRITE) {
        *want = EPOLLOUT;
        errno = EAGAIN;
    } else if (err != SSL_ERROR_SYSCALL || errno == 0) {
        errno = EPROTO;
    }
    return -1;
}

int upstream_tls_handshake(void *p, uint32_t *want, char *why, size_t len)
{
    SSL *ssl = p;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_connect(ssl);
    if (rc != 1) {
        int err = SSL_get_error(ssl, rc);
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
            would_block(err, want);
            return 0;
        }
        if (err == SSL_ERROR_SYSCALL && errno)
            snprintf(why, len, "SSL_do_handshake() failed (%s) while SSL handshaking to "
                     "upstream", strerror(errno));
        else if (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN)
            snprintf(why, len, "the upstream closed the connection while SSL handshaking "
                     "to upstream");
        else
            snprintf(why, len, "SSL_do_handshake() failed (SSL: %s) while SSL handshaking "
                     "to upstream", ssl_reason());
        ERR_clear_error();
        return -1;
    }
    const char *name = SSL_get_ex_data(ssl, name_index);
    if (!name)
        return 1;
    long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) {
        snprintf(why, len, "upstream SSL certificate verify error: (%ld:%s) while SSL "
                 "handshaking to upstream", v, X509_verify_cert_error_string(v));
        return -1;
    }
    X509 *cert = SSL_get1_peer_certificate(ssl);
    bool match = cert && (X509_check_host(cert, name, 0, 0, NULL) == 1 ||
                          X509_check_ip_asc(cert, name, 0) == 1);
    X509_free(cert);
    if (!match) {
        snprintf(why, len, "upstream SSL certificate does not match \"%s\" while SSL "
                 "handshaking to upstream", name);
        return -1;
    }
    return 1;
}

ssize_t upstream_tls_read(void *p, void *buf, size_t len, uint32_t *want)
{
    SSL *ssl = p;
    size_t got = 0;
    ERR_clear_error();
    errno = 0;
    if (SSL_read_ex(ssl, buf, len, &got) == 1)
        return (ssize_t)got;
    int err = SSL_get_error(ssl, 0);
    if (err == SSL_ERROR_ZERO_RETURN)
        return 0; /* close_notify */
    if (err == SSL_ERROR_SYSCALL && errno == 0)
        return 0; /* closed without close_notify: the framing says if that was early */
    ERR_clear_error();
    return would_block(err, want);
}

ssize_t upstream_tls_write(void *p, const void *buf, size_t len, uint32_t *want)
{
    SSL *ssl = p;
    size_t put = 0;
    ERR_clear_error();
    errno = 0;
    if (SSL_write_ex(ssl, buf, len, &put) == 1)
        return (ssize_t)put;
    int err = SSL_get_error(ssl, 0);
    ERR_clear_error();
    if (err == SSL_ERROR_SYSCALL && errno == 0)
        errno = EPIPE;
    return would_block(err, want);
}

bool upstream_tls_idle_alive(void *p, int fd)
{
    SSL *ssl = p;
    /* SSL_has_pending: read ahead, not yet a record's plain text, counts too. */
    if (SSL_has_pending(ssl) || (SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN))
        return false;
    char b;
    for (;;) {
        ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK;
        if (n == 0)
            return false;
        /* A record came: a ticket or a key update is no answer, and is taken here; data,
         * an alert (close_notify) or an error mean the connection is done. */
        uint32_t want;
        ssize_t r = upstream_tls_read(ssl, &b, 1, &want);
        if (r != -1 || errno != EAGAIN || want != EPOLLIN)
            return false;
    }
}

bool upstream_tls_spoke(void *p, int fd)
{
    SSL *ssl = p;
    if (SSL_pending(ssl) > 0 || (SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN))
        return true;
    char b;
    for (;;) {
        ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0)
            return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
        if (n == 0)
            return true;
        ERR_clear_error();
        int r = SSL_peek(ssl, &b, 1); /* (a ticket is taken; data stays) */
        if (r > 0)
            return true;
        int err = SSL_get_error(ssl, r);
        ERR_clear_error();
        if (err != SSL_ERROR_WANT_READ)
            return true;
    }
}

void upstream_tls_shutdown(void *p)
{
    SSL *ssl = p;
    ERR_clear_error();
    if (!(SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN))
        (void)SSL_shutdown(ssl);
    ERR_clear_error();
}

void upstream_tls_close(void *p, bool notify)
{
    SSL *ssl = p;
    if (!ssl)
        return;
    if (notify)
        upstream_tls_shutdown(ssl);
    else
        SSL_set_quiet_shutdown(ssl, 1);
    SSL_free(ssl);
}

void upstream_tls_session_free(void **slot)
{
    pthread_mutex_lock(&session_lock);
    struct kept_session *k = *slot;
    *slot = NULL;
    pthread_mutex_unlock(&session_lock);
    if (k) {
        SSL_SESSION_free(k->sess);
        free(k);
    }
}
