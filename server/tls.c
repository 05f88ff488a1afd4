/* tls.c — the TLS contexts of a configuration, resumption keys, and each connection's SSL. */
#include "tls.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/decoder.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "clock.h"
#include "directive.h"
#include "log.h"
#include "vars.h"

#define TLS_MAX_CERTS 4
#define TLS_MAX_COMMANDS 16
#define TLS_MAX_PASSWORDS 16
#define SESSION_CACHE_DEFAULT 20480
/* nginx's shared cache holds about 4000 sessions a megabyte. */
#define SESSIONS_PER_MB 4000

/* One server's ssl_* settings, each with the statement it came from (NULL: the default). */
struct tls_conf {
    const struct conf_node *cert[TLS_MAX_CERTS], *key[TLS_MAX_CERTS];
    unsigned n_cert, n_key;
    const struct conf_node *protocols, *ciphers, *prefer, *timeout, *tickets, *cache, *curve;
    const struct conf_node *dhparam; /* ssl_dhparam FILE: the DHE ciphers' group */
    /* client certificates */
    const struct conf_node *verify, *client_ca, *trusted, *depth, *crl;
    const struct conf_node *password_file;
    const struct conf_node *stapling, *stapling_file;
    const struct conf_node *command[TLS_MAX_COMMANDS]; /* ssl_conf_command NAME VALUE */
    unsigned n_command;
};

/* ssl_verify_client's values, nginx's order. */
enum tls_verify { VERIFY_OFF, VERIFY_ON, VERIFY_OPTIONAL, VERIFY_OPTIONAL_NO_CA };

/* What a context keeps for its connections (its ex_data at block_index). */
struct tls_block {
    enum tls_verify verify;
    unsigned char *staple; /* ssl_stapling_file: the DER OCSP response, NULL: none */
    size_t staple_len;
};

struct tls_set {
    const struct site_set *sites;
    const struct config *cfg;
    SSL_CTX **server_ctx; /* per server of the sites (NULL: not on a TLS address, or
                             without a certificate: the default server's serves it) */
    int *verify;          /* per server: its ssl_verify_client (enum tls_verify) */
    unsigned n_servers;
    SSL_CTX *top_ctx;     /* without servers: the top level's */
};

/* --- ticket keys: process-wide, shared by every thread and generation ------------------- */

struct ticket_key {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
    int64_t made_ms; /* 0: not made yet */
};

#define TICKET_KEYS 3
static struct ticket_key ticket_keys[TICKET_KEYS]; /* [0] encrypts, all decrypt */
static pthread_rwlock_t ticket_lock = PTHREAD_RWLOCK_INITIALIZER;
/* The longest ssl_session_timeout / 2 a configuration asked for: set by every load, from
 * nothing, so that short timeouts rotate as often as they say. */
static _Atomic int64_t ticket_rotate_ms;

/* A new key in front when the current one is older than the rotation interval. */
static void ticket_rotate(int64_t now)
{
    int64_t every = atomic_load_explicit(&ticket_rotate_ms, memory_order_relaxed);
    pthread_rwlock_rdlock(&ticket_lock);
    bool due = !ticket_keys[0].made_ms || now - ticket_keys[0].made_ms >= every;
    pthread_rwlock_unlock(&ticket_lock);
    if (!due)
        return;
    struct ticket_key k;
    if (RAND_bytes(k.name, sizeof(k.name)) != 1 || RAND_bytes(k.aes, sizeof(k.aes)) != 1 ||
        RAND_bytes(k.hmac, sizeof(k.hmac)) != 1)
        return; /* the old key serves on */
    k.made_ms = now;
    pthread_rwlock_wrlock(&ticket_lock);
    if (!ticket_keys[0].made_ms || now - ticket_keys[0].made_ms >= every) {
        memmove(&ticket_keys[1], &ticket_keys[0], (TICKET_KEYS - 1) * sizeof(k));
        ticket_keys[0] = k;
    }
    pthread_rwlock_unlock(&ticket_lock);
    OPENSSL_cleanse(&k, sizeof(k));
}

static int ticket_mac_key(EVP_MAC_CTX *hctx, const unsigned char *key)
{
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, (void *)key, 32),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    return EVP_MAC_CTX_set_params(hctx, params);
}

/* OpenSSL's ticket callback: 1 done, 2 done and the ticket should be renewed (an older
 * key), 0 no such key (a full handshake), -1 failure. */
static int ticket_cb(SSL *s, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *ectx,
                     EVP_MAC_CTX *hctx, int enc)
{
    if (enc) {
        ticket_rotate(clock_now_ms());
        if (RAND_bytes(iv, 16) != 1)
            return -1;
        pthread_rwlock_rdlock(&ticket_lock);
        const struct ticket_key *k = &ticket_keys[0];
        int ok = k->made_ms && EVP_EncryptInit_ex(ectx, EVP_aes_256_cbc(), NULL, k->aes, iv) &&
                 ticket_mac_key(hctx, k->hmac);
        if (ok)
            memcpy(name, k->name, 16);
        pthread_rwlock_unlock(&ticket_lock);
        return ok ? 1 : -1;
    }
    int rc = 0;
    pthread_rwlock_rdlock(&ticket_lock);
    for (unsigned i = 0; i < TICKET_KEYS; i++) {
        const struct ticket_key *k = &ticket_keys[i];
        if (!k->made_ms || memcmp(k->name, name, 16) != 0)
            continue;
        if (!ticket_mac_key(hctx, k->hmac) ||
            !EVP_DecryptInit_ex(ectx, EVP_aes_256_cbc(), NULL, k->aes, iv))
            rc = -1;
        else /* 2: a new ticket goes with the resumed session, on every TLS 1.3 resumption
              * (a client spends a 1.3 ticket once, RFC 8446 C.4, as OpenSSL's does: with
              * none new, every other connection was a full handshake), and in 1.2 when the
              * key is an older one */
            rc = i == 0 && SSL_version(s) < TLS1_3_VERSION ? 1 : 2;
        break;
    }
    pthread_rwlock_unlock(&ticket_lock);
    return rc;
}

/* --- per connection: SNI and ALPN ---------------------------------------------------------- */

/* The connection's local address, for SNI to find its server (set at accept). */
static int local_index = -1;
/* A context's ssl_ecdh_curve list, as written (unset: auto), for take_block_settings. */
static int groups_index = -1;
/* A context's struct tls_block, freed with it. */
static int block_index = -1;
/* A connection's tls_set (set at accept), for the request's server's settings. */
static int set_index = -1;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

static void block_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                       void *argp)
{
    (void)parent;
    (void)ad;
    (void)idx;
    (void)argl;
    (void)argp;
    struct tls_block *b = ptr;
    if (b)
        free(b->staple);
    free(b);
}

static void index_make(void)
{
    local_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    groups_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    block_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, block_free);
    set_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/* The SNI host name of a ClientHello, as OpenSSL will accept it (RFC 6066 section 3: one
 * entry, of type host_name, 1 to 255 bytes, no NUL); false for anything else, which OpenSSL
 * then refuses or leaves without a name. */
static bool hello_server_name(SSL *s, struct http_slice *name)
{
    const unsigned char *p;
    size_t len;
    if (!SSL_client_hello_get0_ext(s, TLSEXT_TYPE_server_name, &p, &len) || len < 5)
        return false;
    size_t list = (size_t)p[0] << 8 | p[1], n = (size_t)p[3] << 8 | p[4];
    if (list != len - 2 || p[2] != TLSEXT_NAMETYPE_host_name || n != list - 3 || n == 0 ||
        n > TLSEXT_MAXLEN_host_name || memchr(p + 5, '\0', n))
        return false;
    *name = (struct http_slice){(const char *)p + 5, n};
    return true;
}

/* OpenSSL 3.0's default groups (less GOST's, which need an engine), for a block of
 * `ssl_ecdh_curve auto` chosen on an address whose default server names its own: an SSL
 * cannot be given "the default" back, only a list. */
#define GROUPS_AUTO                                                                            \
    "X25519:P-256:X448:P-521:P-384:ffdhe2048:ffdhe3072:ffdhe4096:ffdhe6144:ffdhe8192"

/* SSL_set_SSL_CTX gives the SSL the chosen block's certificates and session ID context, and
 * its TLS 1.2 cipher list (the SSL has none of its own: SSL_get_ciphers reads its context's),
 * but leaves it what it copied from the default server's context when it was made. The rest
 * of the block's settings are copied here, each before OpenSSL uses it: */
static void take_block_settings(SSL *s, SSL_CTX *ctx, SSL_CTX *had)
{
    /* The options (ssl_session_tickets, ssl_prefer_server_ciphers): the offered session or
     * ticket is looked up, and the cipher chosen, after this callback returns. */
    uint64_t opts = SSL_CTX_get_options(ctx);
    SSL_clear_options(s, SSL_get_options(s) & ~opts);
    SSL_set_options(s, opts);
    /* ssl_protocols: the version is chosen right after this callback. */
    SSL_set_min_proto_version(s, SSL_CTX_get_min_proto_version(ctx));
    SSL_set_max_proto_version(s, SSL_CTX_get_max_proto_version(ctx));
    /* ssl_ecdh_curve: the key share and the ECDHE group are chosen from the extensions,
     * parsed after this callback. */
    const char *groups = SSL_CTX_get_ex_data(ctx, groups_index);
    const char *had_groups = SSL_CTX_get_ex_data(had, groups_index);
    if ((groups || had_groups) && (!groups || !had_groups || strcmp(groups, had_groups)) &&
        SSL_set1_groups_list(s, groups ? groups : GROUPS_AUTO) != 1)
        ERR_clear_error(); /* checked at load: not expected */
    /* ssl_verify_client and ssl_verify_depth: the certificate is asked for in the server's
     * flight, after this callback; the trusted certificates, the CRLs and the names of the
     * accepted issuers are the context's, which the SSL now has. */
    SSL_set_verify(s, SSL_CTX_get_verify_mode(ctx), SSL_CTX_get_verify_callback(ctx));
    SSL_set_verify_depth(s, SSL_CTX_get_verify_depth(ctx));
    /* ssl_session_timeout is the session's, made later: sni_cb sets it. ssl_session_cache
     * cannot follow (OpenSSL keeps sessions in the cache of the context the SSL was made
     * with): a block that differs from its address's default server is refused at load. */
}

/* The server block is chosen here, from the ClientHello, and not in a servername callback:
 * OpenSSL looks the offered session up (by ID in the cache, by ticket, or as a TLS 1.3
 * PSK) before it calls that one, and accepts a session only when its session ID context
 * is the SSL's. Switched here, the SSL has the chosen block's context (SSL_set_SSL_CTX
 * carries it over), so a session made for another block on this address is a cache miss:
 * a full handshake with this block's certificate, never a resumption with the other's.
 * And a session made here records this block's context, not the default server's. */
static int client_hello_cb(SSL *s, int *alert, void *arg)
{
    (void)alert;
    const struct tls_set *t = arg;
    struct http_slice name;
    if (!t->sites || !t->sites->n_servers || !hello_server_name(s, &name))
        return SSL_CLIENT_HELLO_SUCCESS;
    const struct sockaddr *local = SSL_get_ex_data(s, local_index);
    const struct site_server *srv = local ? site_server_for(t->sites, local, name) : NULL;
    SSL_CTX *ctx = srv ? t->server_ctx[srv - t->sites->servers] : NULL;
    SSL_CTX *had = SSL_get_SSL_CTX(s);
    if (!ctx || ctx == had)
        return SSL_CLIENT_HELLO_SUCCESS;
    SSL_set_SSL_CTX(s, ctx);
    take_block_settings(s, ctx, had);
    return SSL_CLIENT_HELLO_SUCCESS;
}

/* The server block is already chosen (client_hello_cb): this acknowledges the name, and
 * gives a new session the block's ssl_session_timeout. OpenSSL makes a session with the
 * timeout of the context the SSL was made with (the default server's), after the
 * ClientHello callback and before this one; a ticket's lifetime and the resumption's
 * deadline are the session's. */
static int sni_cb(SSL *s, int *alert, void *arg)
{
    (void)alert;
    const struct tls_set *t = arg;
    const char *name = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
    if (!name || !t->sites || !t->sites->n_servers)
        return SSL_TLSEXT_ERR_NOACK;
    SSL_SESSION *sess = SSL_get_session(s);
    if (sess && !SSL_session_reused(s))
        SSL_SESSION_set_timeout(sess, SSL_CTX_get_timeout(SSL_get_SSL_CTX(s)));
    return SSL_TLSEXT_ERR_OK;
}

/* HTTP/1.1 (or 1.0) if the client offers it; a client that offers only others (h2) is
 * refused with no_application_protocol, as nginx does. */
static int alpn_cb(SSL *s, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned inlen, void *arg)
{
    (void)s;
    (void)arg;
    static const unsigned char ours[] = "\x08http/1.1\x08http/1.0";
    unsigned char *chosen;
    if (SSL_select_next_proto(&chosen, outlen, ours, sizeof(ours) - 1, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
}

int tls_accept(const struct tls_set *t, const struct sockaddr *local, void **ssl)
{
    *ssl = NULL;
    SSL_CTX *ctx = NULL;
    if (!t)
        return 0;
    if (t->sites && t->sites->n_servers) {
        const struct site_addr *a = site_addr_for(t->sites, local);
        if (!a || !a->listen.ssl)
            return 0;
        const struct site_server *srv = a->default_server ? a->default_server : a->servers[0];
        ctx = t->server_ctx[srv - t->sites->servers];
    } else {
        int i = site_listen_match(t->cfg->listen, t->cfg->n_listen, local);
        if (i < 0 || !t->cfg->listen[i].ssl)
            return 0;
        ctx = t->top_ctx;
    }
    SSL *s = ctx ? SSL_new(ctx) : NULL;
    if (!s) {
        ERR_clear_error();
        return -1;
    }
    SSL_set_ex_data(s, local_index, (void *)local);
    SSL_set_ex_data(s, set_index, (void *)t);
    *ssl = s;
    return 1;
}

void tls_renew(void *ssl, const struct tls_set *t)
{
    if (ssl)
        SSL_set_ex_data((SSL *)ssl, set_index, (void *)t);
}

/* --- per request: the client certificate's check and the $ssl_ variables ------------------- */

/* Under optional_no_ca, a certificate that only lacks a known issuer passes (nginx's
 * list). */
static bool unknown_issuer(long rc)
{
    return rc == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
           rc == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
           rc == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
           rc == X509_V_ERR_CERT_UNTRUSTED || rc == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE;
}

/* Does the request's Host (lowercased, without its port or trailing dot) name the SNI
 * name? */
static bool host_is(struct http_slice host, const char *sni)
{
    size_t n = host.len;
    if (n && host.p[0] == '[') {
        const char *end = memchr(host.p, ']', n);
        n = end ? (size_t)(end - host.p) + 1 : n;
    } else {
        const char *colon = memchr(host.p, ':', n);
        n = colon ? (size_t)(colon - host.p) : n;
    }
    if (n && host.p[n - 1] == '.')
        n--;
    return strlen(sni) == n && strncasecmp(host.p, sni, n) == 0;
}

int tls_client_refused(const void *ssl, const struct site_server *srv, struct http_slice host)
{
    SSL *s = (SSL *)ssl;
    const struct tls_set *t = SSL_get_ex_data(s, set_index);
    const struct tls_block *blk = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(s), block_index);
    int verify = blk ? (int)blk->verify : VERIFY_OFF;
    if (t && t->verify && srv && t->sites && srv >= t->sites->servers &&
        srv < t->sites->servers + t->n_servers)
        verify = t->verify[srv - t->sites->servers];
    if (verify == VERIFY_OFF)
        return 0;
    /* The certificate was asked for by the server the client's SNI named: a request for
     * another name, to a server that checks certificates, is misdirected (nginx's 421). */
    const char *sni = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
    if (sni && host.len && !host_is(host, sni)) {
        log_info("client attempted to request the server name different from the one that "
                 "was negotiated");
        return 421;
    }
    long rc = SSL_get_verify_result(s);
    if (rc != X509_V_OK && (verify != VERIFY_OPTIONAL_NO_CA || !unknown_issuer(rc))) {
        log_info("client SSL certificate verify error: (%ld:%s)", rc,
                 X509_verify_cert_error_string(rc));
        return 495;
    }
    if (verify == VERIFY_ON && !SSL_get0_peer_certificate(s)) {
        log_info("client sent no required SSL certificate");
        return 496;
    }
    return 0;
}

static long copy_out(char *out, size_t cap, const char *p, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return (long)n;
}

static long hex_out(char *out, size_t cap, const unsigned char *p, size_t n, bool upper)
{
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    if (2 * n >= cap)
        return -1;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    return (long)(2 * n);
}

/* What a BIO was given, into out. */
static long bio_out(BIO *bio, char *out, size_t cap, bool ok)
{
    char *p;
    long n = ok ? BIO_get_mem_data(bio, &p) : -1;
    long r = n < 0 ? 0 : copy_out(out, cap, p, (size_t)n);
    BIO_free(bio);
    ERR_clear_error();
    return r;
}

/* The certificate in PEM, as nginx's variables give it: raw; each line after the first
 * begun with a tab, the last newline left out; percent-encoded as a URI component. */
static long cert_out(X509 *cert, int which, char *out, size_t cap)
{
    char pem[6144];
    BIO *bio = BIO_new(BIO_s_mem());
    long n = bio ? bio_out(bio, pem, sizeof(pem), PEM_write_bio_X509(bio, cert) == 1) : 0;
    if (n <= 0 || which == VARS_SSL_CLIENT_RAW_CERT)
        return n <= 0 ? n : copy_out(out, cap, pem, (size_t)n);
    size_t k = 0;
    for (long i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)pem[i];
        if (which == VARS_SSL_CLIENT_CERT) {
            if (i == n - 1)
                break;
            if (k + 2 >= cap)
                return -1;
            out[k++] = (char)ch;
            if (ch == '\n')
                out[k++] = '\t';
            continue;
        }
        bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                     (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
                     ch == '~';
        if (k + 3 >= cap)
            return -1;
        if (plain) {
            out[k++] = (char)ch;
        } else {
            out[k++] = '%';
            out[k++] = "0123456789ABCDEF"[ch >> 4];
            out[k++] = "0123456789ABCDEF"[ch & 15];
        }
    }
    out[k] = '\0';
    return (long)k;
}

static long client_var(SSL *s, int which, char *out, size_t cap)
{
    X509 *cert = SSL_get0_peer_certificate(s);
    if (which == VARS_SSL_CLIENT_VERIFY) {
        if (!cert)
            return copy_out(out, cap, "NONE", 4);
        long rc = SSL_get_verify_result(s);
        if (rc == X509_V_OK)
            return copy_out(out, cap, "SUCCESS", 7);
        int n = snprintf(out, cap, "FAILED:%s", X509_verify_cert_error_string(rc));
        return n < 0 || (size_t)n >= cap ? -1 : n;
    }
    if (!cert)
        return 0;
    switch (which) {
    case VARS_SSL_CLIENT_S_DN:
    case VARS_SSL_CLIENT_I_DN: {
        BIO *bio = BIO_new(BIO_s_mem());
        const X509_NAME *name = which == VARS_SSL_CLIENT_S_DN ? X509_get_subject_name(cert)
                                                              : X509_get_issuer_name(cert);
        return bio ? bio_out(bio, out, cap,
                             X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253) >= 0) : 0;
    }
    case VARS_SSL_CLIENT_S_DN_LEGACY:
    case VARS_SSL_CLIENT_I_DN_LEGACY: {
        char *v = X509_NAME_oneline(which == VARS_SSL_CLIENT_S_DN_LEGACY
                                        ? X509_get_subject_name(cert)
                                        : X509_get_issuer_name(cert), NULL, 0);
        long n = v ? copy_out(out, cap, v, strlen(v)) : 0;
        OPENSSL_free(v);
        return n;
    }
    case VARS_SSL_CLIENT_SERIAL: {
        BIO *bio = BIO_new(BIO_s_mem());
        return bio ? bio_out(bio, out, cap,
                             i2a_ASN1_INTEGER(bio, X509_get0_serialNumber(cert)) >= 0) : 0;
    }
    case VARS_SSL_CLIENT_FINGERPRINT: {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        if (X509_digest(cert, EVP_sha1(), md, &len) != 1)
            return 0;
        return hex_out(out, cap, md, len, false);
    }
    case VARS_SSL_CLIENT_V_START:
    case VARS_SSL_CLIENT_V_END: {
        BIO *bio = BIO_new(BIO_s_mem());
        const ASN1_TIME *t = which == VARS_SSL_CLIENT_V_START ? X509_get0_notBefore(cert)
                                                              : X509_get0_notAfter(cert);
        return bio ? bio_out(bio, out, cap, ASN1_TIME_print(bio, t) == 1) : 0;
    }
    case VARS_SSL_CLIENT_V_REMAIN: {
        int days = 0, secs = 0;
        if (ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(cert)) != 1)
            return 0;
        int n = snprintf(out, cap, "%d", days > 0 ? days : 0);
        return n < 0 || (size_t)n >= cap ? -1 : n;
    }
    default:
        return cert_out(cert, which, out, cap);
    }
}

/* A group's name as nginx writes it: OpenSSL's short name of its NID, else its TLS name,
 * else its number in hex. */
static int group_out(SSL *s, int nid, char *out, size_t cap)
{
    const char *name = (nid & TLSEXT_nid_unknown) ? SSL_group_to_name(s, nid)
                                                  : OBJ_nid2sn(nid);
    int n = name ? snprintf(out, cap, "%s", name) : snprintf(out, cap, "0x%04x", nid & 0xffff);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

long tls_var(const void *ssl, int which, char *out, size_t cap)
{
    SSL *s = (SSL *)ssl;
    switch (which) {
    case VARS_SSL_PROTOCOL: {
        const char *v = SSL_get_version(s);
        return copy_out(out, cap, v, strlen(v));
    }
    case VARS_SSL_CIPHER: {
        const char *v = SSL_get_cipher_name(s);
        return v ? copy_out(out, cap, v, strlen(v)) : 0;
    }
    case VARS_SSL_CIPHERS: {
        const unsigned char *raw;
        size_t n = SSL_get0_raw_cipherlist(s, NULL), total = SSL_get0_raw_cipherlist(s, &raw);
        size_t k = 0;
        for (size_t i = 0; n && i + n <= total; i += n) {
            const SSL_CIPHER *c = SSL_CIPHER_find(s, raw + i);
            char hex[16];
            const char *name = c ? SSL_CIPHER_get_name(c) : hex;
            if (!c) {
                hex[0] = '0', hex[1] = 'x';
                hex_out(hex + 2, sizeof(hex) - 2, raw + i, n, false);
            }
            size_t len = strlen(name);
            if (k + len + 2 >= cap)
                return -1;
            if (k)
                out[k++] = ':';
            memcpy(out + k, name, len);
            k += len;
        }
        out[k] = '\0';
        return (long)k;
    }
    case VARS_SSL_CURVE: {
        int nid = SSL_get_negotiated_group(s);
        return nid == NID_undef ? 0 : group_out(s, nid, out, cap);
    }
    case VARS_SSL_CURVES: {
        int groups[64];
        int n = SSL_get1_groups(s, NULL);
        if (n <= 0 || n > 64 || SSL_get1_groups(s, groups) != n)
            return 0;
        size_t k = 0;
        for (int i = 0; i < n; i++) {
            int w = group_out(s, groups[i], out + k + (k > 0), cap - k - (k > 0));
            if (w < 0)
                return -1;
            if (k)
                out[k++] = ':';
            k += (size_t)w;
        }
        return (long)k;
    }
    case VARS_SSL_SERVER_NAME: {
        const char *v = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
        return v ? copy_out(out, cap, v, strlen(v)) : 0;
    }
    case VARS_SSL_SESSION_REUSED:
        return copy_out(out, cap, SSL_session_reused(s) ? "r" : ".", 1);
    case VARS_SSL_SESSION_ID: {
        const SSL_SESSION *sess = SSL_get0_session(s);
        unsigned len = 0;
        const unsigned char *id = sess ? SSL_SESSION_get_id(sess, &len) : NULL;
        return id ? hex_out(out, cap, id, len, false) : 0;
    }
    case VARS_SSL_EARLY_DATA:
        return 0; /* not accepted: every request comes after the handshake */
    default:
        return client_var(s, which, out, cap);
    }
}

/* --- building ------------------------------------------------------------------------------ */

struct build {
    struct conf_reader r;
    const struct config *cfg;
    const struct conf_node *protocols_noted; /* the last ssl_protocols told of at -t */
    const struct conf_node *stapling_noted;  /* the last ssl_stapling told of */
};

/* OpenSSL's reason for the last failure, its queue cleared. */
static const char *ssl_reason(char *buf, size_t cap)
{
    unsigned long e = ERR_peek_last_error();
    if (e) {
        const char *why = ERR_reason_error_string(e);
        snprintf(buf, cap, "%s", why ? why : "unknown error");
    } else {
        snprintf(buf, cap, "%s", errno ? strerror(errno) : "unknown error");
    }
    ERR_clear_error();
    return buf;
}

/* The ssl_* statements of one block into c (a server's over the top level's: a directive
 * the block says replaces the outer one, the certificates as a whole). */
static void read_conf(const struct conf_node *first, struct tls_conf *c)
{
    bool own_certs = false, own_keys = false, own_commands = false;
    for (const struct conf_node *n = first; n; n = n->next) {
        if (strncmp(n->name, "ssl_", 4) != 0 || n->is_block)
            continue;
        const char *d = n->name + 4;
        if (strcmp(d, "certificate") == 0) {
            if (!own_certs)
                c->n_cert = 0;
            own_certs = true;
            if (c->n_cert < TLS_MAX_CERTS)
                c->cert[c->n_cert++] = n;
        } else if (strcmp(d, "certificate_key") == 0) {
            if (!own_keys)
                c->n_key = 0;
            own_keys = true;
            if (c->n_key < TLS_MAX_CERTS)
                c->key[c->n_key++] = n;
        } else if (strcmp(d, "protocols") == 0) {
            c->protocols = n;
        } else if (strcmp(d, "ciphers") == 0) {
            c->ciphers = n;
        } else if (strcmp(d, "prefer_server_ciphers") == 0) {
            c->prefer = n;
        } else if (strcmp(d, "session_timeout") == 0) {
            c->timeout = n;
        } else if (strcmp(d, "session_tickets") == 0) {
            c->tickets = n;
        } else if (strcmp(d, "session_cache") == 0) {
            c->cache = n;
        } else if (strcmp(d, "ecdh_curve") == 0) {
            c->curve = n;
        } else if (strcmp(d, "dhparam") == 0) {
            c->dhparam = n;
        } else if (strcmp(d, "verify_client") == 0) {
            c->verify = n;
        } else if (strcmp(d, "client_certificate") == 0) {
            c->client_ca = n;
        } else if (strcmp(d, "trusted_certificate") == 0) {
            c->trusted = n;
        } else if (strcmp(d, "verify_depth") == 0) {
            c->depth = n;
        } else if (strcmp(d, "crl") == 0) {
            c->crl = n;
        } else if (strcmp(d, "password_file") == 0) {
            c->password_file = n;
        } else if (strcmp(d, "stapling") == 0) {
            c->stapling = n;
        } else if (strcmp(d, "stapling_file") == 0) {
            c->stapling_file = n;
        } else if (strcmp(d, "conf_command") == 0) {
            if (!own_commands)
                c->n_command = 0;
            own_commands = true;
            if (c->n_command < TLS_MAX_COMMANDS)
                c->command[c->n_command++] = n;
        }
    }
}

static bool flag_on(const struct conf_node *n, bool dflt)
{
    return n ? strcmp(n->args[0], "on") == 0 : dflt;
}

/* ssl_protocols: the lowest and highest version named of TLSv1.2 and TLSv1.3. TLSv1 and
 * TLSv1.1, which nginx's files name (Debian's stock nginx.conf), are left out with a notice:
 * OpenSSL 3's default security level refuses them anyway. */
static int set_protocols(struct build *b, SSL_CTX *ctx, const struct conf_node *n)
{
    int lo = TLS1_2_VERSION, hi = TLS1_3_VERSION;
    if (n) {
        lo = hi = 0;
        for (unsigned i = 0; i < n->n_args; i++) {
            int v;
            if (strcmp(n->args[i], "TLSv1.2") == 0)
                v = TLS1_2_VERSION;
            else if (strcmp(n->args[i], "TLSv1.3") == 0)
                v = TLS1_3_VERSION;
            else if (strcmp(n->args[i], "TLSv1") == 0 || strcmp(n->args[i], "TLSv1.1") == 0) {
                if (b->protocols_noted != n)
                    conf_notice(&b->r, n->line, "ssl_protocols: %s is accepted, not offered "
                                "(OpenSSL's security level refuses it); TLSv1.2 and TLSv1.3 "
                                "are", n->args[i]);
                continue;
            } else if (strcmp(n->args[i], "SSLv3") == 0 || strcmp(n->args[i], "SSLv2") == 0)
                return conf_error(&b->r, n->line, "ssl_protocols: %s is not offered (it is "
                                  "broken); TLSv1.2 and TLSv1.3 are", n->args[i]);
            else
                return conf_error(&b->r, n->line, "ssl_protocols: unknown protocol \"%s\"",
                                  n->args[i]);
            lo = lo && lo < v ? lo : v;
            hi = hi > v ? hi : v;
        }
        b->protocols_noted = n;
        if (!hi)
            return conf_error(&b->r, n->line, "ssl_protocols: neither TLSv1.2 nor TLSv1.3: "
                              "nothing to offer");
    }
    SSL_CTX_set_min_proto_version(ctx, lo);
    SSL_CTX_set_max_proto_version(ctx, hi);
    return 0;
}

/* The passphrases of ssl_password_file, a line each, tried in order on each key. */
struct passwords {
    char line[TLS_MAX_PASSWORDS][256];
    unsigned n;
    unsigned at; /* the one being tried */
};

static int password_cb(char *buf, int size, int rwflag, void *u)
{
    (void)rwflag;
    const struct passwords *pw = u;
    if (!pw || pw->at >= pw->n) /* no passphrase: never asked on a terminal */
        return 0;
    size_t n = strlen(pw->line[pw->at]);
    if (n > (size_t)size)
        n = (size_t)size;
    memcpy(buf, pw->line[pw->at], n);
    return (int)n;
}

static int read_passwords(struct build *b, const struct conf_node *n, struct passwords *pw)
{
    pw->n = pw->at = 0;
    if (!n)
        return 0;
    FILE *f = fopen(n->args[0], "r");
    if (!f)
        return conf_error(&b->r, n->line, "ssl_password_file \"%s\": %s", n->args[0],
                          strerror(errno));
    char line[256];
    while (pw->n < TLS_MAX_PASSWORDS && fgets(line, sizeof(line), f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = '\0';
        if (len)
            memcpy(pw->line[pw->n++], line, len + 1);
    }
    fclose(f);
    OPENSSL_cleanse(line, sizeof(line));
    if (!pw->n)
        return conf_error(&b->r, n->line, "ssl_password_file \"%s\": no passwords",
                          n->args[0]);
    return 0;
}

static int load_certs(struct build *b, SSL_CTX *ctx, const struct tls_conf *c,
                      struct passwords *pwp)
{
    char why[256];
    if (c->n_cert != c->n_key) {
        const struct conf_node *n = c->n_cert > c->n_key ? c->cert[c->n_key] : c->key[c->n_cert];
        return conf_error(&b->r, n->line, "%s \"%s\" has no %s to pair with", n->name,
                          n->args[0], c->n_cert > c->n_key ? "ssl_certificate_key"
                                                           : "ssl_certificate");
    }
    for (unsigned i = 0; i < c->n_cert; i++) {
        const struct conf_node *cn = c->cert[i], *kn = c->key[i];
        if (access(cn->args[0], R_OK) < 0)
            return conf_error(&b->r, cn->line, "ssl_certificate \"%s\": %s", cn->args[0],
                              strerror(errno));
        if (access(kn->args[0], R_OK) < 0)
            return conf_error(&b->r, kn->line, "ssl_certificate_key \"%s\": %s",
                              kn->args[0], strerror(errno));
        errno = 0;
        if (SSL_CTX_use_certificate_chain_file(ctx, cn->args[0]) != 1)
            return conf_error(&b->r, cn->line, "ssl_certificate \"%s\": %s", cn->args[0],
                              ssl_reason(why, sizeof(why)));
        errno = 0;
        int used = 0;
        for (pwp->at = 0; !used; pwp->at++) {
            used = SSL_CTX_use_PrivateKey_file(ctx, kn->args[0], SSL_FILETYPE_PEM) == 1;
            if (!used && pwp->at + 1 >= pwp->n)
                break;
            if (!used)
                ERR_clear_error(); /* the next passphrase */
        }
        if (!used) {
            return conf_error(&b->r, kn->line, "ssl_certificate_key \"%s\": %s%s",
                              kn->args[0], ssl_reason(why, sizeof(why)),
                              c->password_file ? " (no passphrase of ssl_password_file "
                                                 "opens it)" : "");
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            return conf_error(&b->r, kn->line, "ssl_certificate_key \"%s\" does not match "
                              "ssl_certificate \"%s\": %s", kn->args[0], cn->args[0],
                              ssl_reason(why, sizeof(why)));
        }
    }
    return 0;
}

static int set_certs(struct build *b, SSL_CTX *ctx, const struct tls_conf *c)
{
    struct passwords *pw = calloc(1, sizeof(*pw));
    if (!pw)
        return conf_error(&b->r, c->n_cert ? c->cert[0]->line : 0, "out of memory");
    int rc = read_passwords(b, c->password_file, pw);
    if (rc == 0) {
        SSL_CTX_set_default_passwd_cb(ctx, password_cb);
        SSL_CTX_set_default_passwd_cb_userdata(ctx, pw);
        rc = load_certs(b, ctx, c, pw);
    }
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
    OPENSSL_cleanse(pw, sizeof(*pw));
    free(pw);
    return rc;
}

/* ssl_session_cache: off | none | builtin[:SIZE] | shared:NAME:SIZE (SIZE in bytes with
 * k/m, as nginx: about 4000 sessions a megabyte). Returns the cache's size in sessions
 * (0: no cache), or -1. */
static long cache_size(struct build *b, const struct conf_node *n)
{
    if (!n)
        return SESSION_CACHE_DEFAULT;
    long total = 0;
    for (unsigned i = 0; i < n->n_args; i++) {
        const char *a = n->args[i];
        if (strcmp(a, "off") == 0 || strcmp(a, "none") == 0)
            return 0;
        if (strcmp(a, "builtin") == 0) {
            total += SESSION_CACHE_DEFAULT;
        } else if (strncmp(a, "builtin:", 8) == 0) {
            char *end;
            long v = strtol(a + 8, &end, 10);
            if (*end || v <= 0)
                return conf_error(&b->r, n->line, "ssl_session_cache: invalid \"%s\"", a);
            total += v;
        } else if (strncmp(a, "shared:", 7) == 0 && strchr(a + 7, ':')) {
            char *end;
            const char *sz = strchr(a + 7, ':') + 1;
            double v = strtod(sz, &end);
            double unit = *end == 'k' || *end == 'K' ? 1.0 / 1024
                          : *end == 'm' || *end == 'M' ? 1.0 : 1.0 / (1024 * 1024);
            if (end == sz || v <= 0 || (*end && end[1]))
                return conf_error(&b->r, n->line, "ssl_session_cache: invalid size in \"%s\"",
                                  a);
            total += (long)(v * unit * SESSIONS_PER_MB) + 1;
        } else {
            return conf_error(&b->r, n->line, "ssl_session_cache: \"%s\" is not off, none, "
                              "builtin[:N] or shared:NAME:SIZE", a);
        }
    }
    return total;
}

static uint64_t fnv1a(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* The session ID context: a server block's own, so that a session from one block is never
 * resumed by another (client_hello_cb sees that OpenSSL compares the right ones); the same
 * across reloads, made from its certificate files and its names (srv NULL: the top level,
 * without servers). The names set apart two blocks that share a certificate. */
static void set_sid_ctx(SSL_CTX *ctx, const struct tls_conf *c, const struct site_server *srv)
{
    uint64_t h = 1469598103934665603ull;
    for (unsigned i = 0; i < c->n_cert; i++)
        h = fnv1a(h, c->cert[i]->args[0], strlen(c->cert[i]->args[0]) + 1);
    for (unsigned i = 0; srv && i < srv->n_names; i++)
        h = fnv1a(h, srv->names[i].text, srv->names[i].len + 1);
    /* and its client-certificate check: a session whose certificate was checked (or not
     * asked for) under other settings is never resumed here */
    const struct conf_node *check[] = {c->verify, c->client_ca, c->trusted, c->depth, c->crl};
    for (unsigned i = 0; i < sizeof(check) / sizeof(check[0]); i++)
        h = check[i] ? fnv1a(h, check[i]->args[0], strlen(check[i]->args[0]) + 1)
                     : fnv1a(h, "-", 2);
    unsigned char sid[16] = "lfhttpd:";
    memcpy(sid + 8, &h, 8);
    SSL_CTX_set_session_id_context(ctx, sid, sizeof(sid));
}

/* ssl_dhparam FILE: the PEM DH parameters (`openssl dhparam`) the DHE cipher suites of
 * TLS 1.2 use, as nginx's; without it those suites are never chosen (no group). */
static int set_dhparam(struct build *b, SSL_CTX *ctx, const struct conf_node *n)
{
    char why[256];
    FILE *f = fopen(n->args[0], "r");
    if (!f)
        return conf_error(&b->r, n->line, "ssl_dhparam \"%s\": %s", n->args[0],
                          strerror(errno));
    EVP_PKEY *dh = NULL;
    OSSL_DECODER_CTX *dctx = OSSL_DECODER_CTX_new_for_pkey(&dh, "PEM", NULL, "DH",
                                                           OSSL_KEYMGMT_SELECT_DOMAIN_PARAMETERS,
                                                           NULL, NULL);
    int ok = dctx && OSSL_DECODER_from_fp(dctx, f) == 1 && dh;
    OSSL_DECODER_CTX_free(dctx);
    fclose(f);
    if (ok && SSL_CTX_set0_tmp_dh_pkey(ctx, dh) == 1)
        return 0;
    EVP_PKEY_free(dh);
    return conf_error(&b->r, n->line, "ssl_dhparam \"%s\": not PEM DH parameters: %s",
                      n->args[0], ssl_reason(why, sizeof(why)));
}

/* --- client certificates, OCSP stapling, passwords, SSL_CONF ----------------------------- */

/* The handshake goes on whatever the client's certificate: the result is kept for
 * tls_client_refused and $ssl_client_verify, as nginx's callback does. */
static int verify_accept(int ok, X509_STORE_CTX *x)
{
    (void)ok;
    (void)x;
    return 1;
}

/* ssl_verify_client's value, or -1 (said). */
static int verify_mode(struct build *b, const struct tls_conf *c)
{
    static const char *const names[] = {"off", "on", "optional", "optional_no_ca"};
    if (!c->verify)
        return VERIFY_OFF;
    for (int i = 0; i < 4; i++)
        if (strcmp(c->verify->args[0], names[i]) == 0)
            return i;
    return conf_error(&b->r, c->verify->line, "ssl_verify_client: \"%s\" is not on, off, "
                      "optional or optional_no_ca", c->verify->args[0]);
}

static int set_verify(struct build *b, SSL_CTX *ctx, const struct tls_conf *c,
                      struct tls_block *blk)
{
    char why[256];
    int mode = verify_mode(b, c);
    if (mode < 0)
        return -1;
    blk->verify = (enum tls_verify)mode;
    unsigned depth = 1;
    if (c->depth) {
        char *end;
        unsigned long v = strtoul(c->depth->args[0], &end, 10);
        if (*end || end == c->depth->args[0] || v > 100)
            return conf_error(&b->r, c->depth->line, "ssl_verify_depth: invalid number \"%s\"",
                              c->depth->args[0]);
        depth = (unsigned)v;
    }
    if (blk->verify != VERIFY_OFF) {
        if (blk->verify != VERIFY_OPTIONAL_NO_CA && !c->client_ca && !c->trusted)
            return conf_error(&b->r, c->verify->line, "no ssl_client_certificate or "
                              "ssl_trusted_certificate for ssl_verify_client");
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_accept);
        SSL_CTX_set_verify_depth(ctx, (int)depth);
        if (c->client_ca) {
            const char *f = c->client_ca->args[0];
            STACK_OF(X509_NAME) *names_sent = SSL_load_client_CA_file(f);
            if (SSL_CTX_load_verify_locations(ctx, f, NULL) != 1 || !names_sent) {
                sk_X509_NAME_pop_free(names_sent, X509_NAME_free);
                return conf_error(&b->r, c->client_ca->line, "ssl_client_certificate \"%s\": "
                                  "%s", f, ssl_reason(why, sizeof(why)));
            }
            SSL_CTX_set_client_CA_list(ctx, names_sent);
        }
    }
    /* nginx reads these whatever ssl_verify_client says (proxying and OCSP use them too) */
    if (c->trusted && SSL_CTX_load_verify_locations(ctx, c->trusted->args[0], NULL) != 1)
        return conf_error(&b->r, c->trusted->line, "ssl_trusted_certificate \"%s\": %s",
                          c->trusted->args[0], ssl_reason(why, sizeof(why)));
    if (c->crl) {
        X509_STORE *store = SSL_CTX_get_cert_store(ctx);
        X509_LOOKUP *lookup = store ? X509_STORE_add_lookup(store, X509_LOOKUP_file()) : NULL;
        errno = 0;
        if (!lookup || X509_load_cert_crl_file(lookup, c->crl->args[0], X509_FILETYPE_PEM) <= 0)
            return conf_error(&b->r, c->crl->line, "ssl_crl \"%s\": %s", c->crl->args[0],
                              ssl_reason(why, sizeof(why)));
        X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
    }
    return 0;
}

/* OCSP stapling: the file's response, for a client that asks (status_request). */
static int status_cb(SSL *s, void *arg)
{
    (void)arg;
    const struct tls_block *blk = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(s), block_index);
    if (!blk || !blk->staple)
        return SSL_TLSEXT_ERR_NOACK;
    unsigned char *copy = OPENSSL_memdup(blk->staple, blk->staple_len);
    if (!copy)
        return SSL_TLSEXT_ERR_NOACK;
    SSL_set_tlsext_status_ocsp_resp(s, copy, (long)blk->staple_len);
    return SSL_TLSEXT_ERR_OK;
}

static int set_stapling(struct build *b, const struct tls_conf *c, struct tls_block *blk)
{
    if (!flag_on(c->stapling, false))
        return 0;
    if (!c->stapling_file) {
        if (b->stapling_noted != c->stapling)
            conf_notice(&b->r, c->stapling->line, "ssl_stapling: without ssl_stapling_file "
                        "nothing is stapled (no OCSP responder is asked)");
        b->stapling_noted = c->stapling;
        return 0;
    }
    const char *f = c->stapling_file->args[0];
    FILE *fp = fopen(f, "rb");
    if (!fp)
        return conf_error(&b->r, c->stapling_file->line, "ssl_stapling_file \"%s\": %s", f,
                          strerror(errno));
    unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf), fp);
    bool whole = feof(fp);
    fclose(fp);
    const unsigned char *p = buf;
    OCSP_RESPONSE *r = whole ? d2i_OCSP_RESPONSE(NULL, &p, (long)n) : NULL;
    OCSP_RESPONSE_free(r);
    ERR_clear_error();
    if (!r)
        return conf_error(&b->r, c->stapling_file->line, "ssl_stapling_file \"%s\": not a DER "
                          "OCSP response%s", f, whole ? "" : " (over 64 KiB)");
    blk->staple = malloc(n);
    if (!blk->staple)
        return conf_error(&b->r, c->stapling_file->line, "out of memory");
    memcpy(blk->staple, buf, n);
    blk->staple_len = n;
    return 0;
}

/* ssl_conf_command NAME VALUE: OpenSSL's SSL_CONF commands, after every other setting, as
 * nginx applies them. */
static int set_commands(struct build *b, SSL_CTX *ctx, const struct tls_conf *c)
{
    if (!c->n_command)
        return 0;
    SSL_CONF_CTX *cctx = SSL_CONF_CTX_new();
    if (!cctx)
        return conf_error(&b->r, c->command[0]->line, "out of memory");
    SSL_CONF_CTX_set_flags(cctx, SSL_CONF_FLAG_FILE | SSL_CONF_FLAG_SERVER |
                                     SSL_CONF_FLAG_CERTIFICATE | SSL_CONF_FLAG_SHOW_ERRORS);
    SSL_CONF_CTX_set_ssl_ctx(cctx, ctx);
    int rc = 0;
    for (unsigned i = 0; i < c->n_command && rc == 0; i++) {
        const struct conf_node *n = c->command[i];
        char why[256];
        if (SSL_CONF_cmd(cctx, n->args[0], n->args[1]) <= 0)
            rc = conf_error(&b->r, n->line, "ssl_conf_command \"%s\" \"%s\": %s", n->args[0],
                            n->args[1], ssl_reason(why, sizeof(why)));
    }
    if (rc == 0 && SSL_CONF_CTX_finish(cctx) != 1) {
        char why[256];
        rc = conf_error(&b->r, c->command[0]->line, "ssl_conf_command: %s",
                        ssl_reason(why, sizeof(why)));
    }
    SSL_CONF_CTX_free(cctx);
    return rc;
}

static SSL_CTX *ctx_make(struct build *b, const struct tls_conf *c, struct tls_set *t,
                         const struct site_server *srv, unsigned where)
{
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        conf_error(&b->r, where, "TLS: %s", ssl_reason(why, sizeof(why)));
        return NULL;
    }
    uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                    SSL_OP_NO_COMPRESSION | SSL_OP_SINGLE_ECDH_USE;
    if (flag_on(c->prefer, false))
        opts |= SSL_OP_CIPHER_SERVER_PREFERENCE;
    if (!flag_on(c->tickets, true))
        opts |= SSL_OP_NO_TICKET;
    SSL_CTX_set_options(ctx, opts);
    /* Idle connections hold no buffers; a response goes out in pieces the socket takes
     * (from wherever it sits by then: a parked copy); a record read from the socket with
     * as much after it as came (one read instead of two, and a short read says drained). */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(ctx, 1);
    int rc = set_protocols(b, ctx, c->protocols);
    const char *ciphers = c->ciphers ? c->ciphers->args[0] : "ECDHE+AESGCM:ECDHE+CHACHA20";
    if (SSL_CTX_set_cipher_list(ctx, ciphers) != 1)
        rc = conf_error(&b->r, c->ciphers ? c->ciphers->line : where,
                        "ssl_ciphers \"%s\": %s", ciphers, ssl_reason(why, sizeof(why)));
    if (c->curve && strcmp(c->curve->args[0], "auto") != 0) {
        if (SSL_CTX_set1_groups_list(ctx, c->curve->args[0]) != 1)
            rc = conf_error(&b->r, c->curve->line, "ssl_ecdh_curve \"%s\": %s",
                            c->curve->args[0], ssl_reason(why, sizeof(why)));
        SSL_CTX_set_ex_data(ctx, groups_index, (void *)c->curve->args[0]);
    }
    if (c->dhparam)
        rc |= set_dhparam(b, ctx, c->dhparam);
    unsigned timeout_ms = 300000;
    if (c->timeout && config_parse_duration_ms(c->timeout->args[0], &timeout_ms) < 0)
        timeout_ms = 0;
    long timeout = timeout_ms / 1000;
    if (timeout <= 0)
        rc = conf_error(&b->r, c->timeout->line, "ssl_session_timeout: invalid time \"%s\"",
                        c->timeout->args[0]);
    else
        SSL_CTX_set_timeout(ctx, timeout);
    if (timeout > 0 && timeout * 500 > atomic_load(&ticket_rotate_ms))
        atomic_store(&ticket_rotate_ms, timeout * 500);
    long cache = cache_size(b, c->cache);
    if (cache < 0) {
        rc = -1;
    } else if (cache == 0) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        SSL_CTX_sess_set_cache_size(ctx, cache);
    }
    set_sid_ctx(ctx, c, srv);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb);
    SSL_CTX_set_client_hello_cb(ctx, client_hello_cb, t);
    SSL_CTX_set_tlsext_servername_callback(ctx, sni_cb);
    SSL_CTX_set_tlsext_servername_arg(ctx, t);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, NULL);
    rc |= set_certs(b, ctx, c);
    struct tls_block *blk = calloc(1, sizeof(*blk));
    if (!blk || SSL_CTX_set_ex_data(ctx, block_index, blk) != 1) {
        free(blk);
        SSL_CTX_free(ctx);
        conf_error(&b->r, where, "out of memory");
        return NULL;
    }
    rc |= set_verify(b, ctx, c, blk);
    rc |= set_stapling(b, c, blk);
    SSL_CTX_set_tlsext_status_cb(ctx, status_cb);
    if (rc == 0)
        rc |= set_commands(b, ctx, c);
    if (rc < 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* Does the server listen with `ssl` (itself, or through the top-level listens)? */
static const struct site_addr *tls_addr_of(const struct site_set *sites,
                                           const struct site_server *s)
{
    for (unsigned i = 0; i < sites->n_addrs; i++) {
        const struct site_addr *a = &sites->addrs[i];
        if (!a->listen.ssl)
            continue;
        for (unsigned k = 0; k < a->n_servers; k++)
            if (a->servers[k] == s)
                return a;
    }
    return NULL;
}

/* A TLS address whose default server s is (the one it starts its connections with, which
 * must have a certificate), or NULL. */
static const struct site_addr *default_of(const struct site_set *sites,
                                          const struct site_server *s)
{
    for (unsigned i = 0; i < sites->n_addrs; i++) {
        const struct site_addr *a = &sites->addrs[i];
        if (a->listen.ssl && a->n_servers &&
            (a->default_server ? a->default_server : a->servers[0]) == s)
            return a;
    }
    return NULL;
}

/* Does a server name a certificate of its own? */
static bool any_server_cert(const struct site_set *sites)
{
    for (unsigned i = 0; sites && i < sites->n_servers; i++)
        for (const struct conf_node *n = sites->servers[i].first; n; n = n->next)
            if (strcmp(n->name, "ssl_certificate") == 0)
                return true;
    return false;
}

static bool any_ssl(const struct config *cfg, const struct site_set *sites)
{
    if (sites && sites->n_servers) {
        for (unsigned i = 0; i < sites->n_addrs; i++)
            if (sites->addrs[i].listen.ssl)
                return true;
        return false;
    }
    for (unsigned i = 0; i < cfg->n_listen; i++)
        if (cfg->listen[i].ssl)
            return true;
    return false;
}

/* A `listen` with `ssl` among its parameters (in any order, as nginx takes them). */
static bool has_ssl(const struct conf_node *listen)
{
    for (unsigned i = 1; i < listen->n_args; i++)
        if (strcmp(listen->args[i], "ssl") == 0)
            return true;
    return false;
}

static long cache_sessions(SSL_CTX *ctx)
{
    return SSL_CTX_get_session_cache_mode(ctx) == SSL_SESS_CACHE_OFF
               ? 0 : SSL_CTX_sess_get_cache_size(ctx);
}

/* OpenSSL keeps a session in the cache of the context its SSL was made with, the default
 * server's of the address, and looks an offered one up there: the SSL is made before its
 * ClientHello names a block, and cannot be moved to another cache. So a block whose
 * ssl_session_cache differs from its address's default server's has its sessions kept in
 * the default server's cache, as nginx does: said in a warning at its own statement (or at
 * its server when it inherits one), not refused, since certbot's snippet sets a cache in the
 * blocks it manages and not in the others. */
static void check_session_caches(struct build *b, const struct tls_set *t,
                                 const struct tls_conf *top)
{
    const struct site_set *sites = t->sites;
    for (unsigned i = 0; i < sites->n_addrs; i++) {
        const struct site_addr *a = &sites->addrs[i];
        if (!a->listen.ssl || !a->n_servers)
            continue;
        const struct site_server *d = a->default_server ? a->default_server : a->servers[0];
        long want = cache_sessions(t->server_ctx[d - sites->servers]);
        for (unsigned k = 0; k < a->n_servers; k++) {
            const struct site_server *s = a->servers[k];
            if (s == d || !t->server_ctx[s - sites->servers] ||
                cache_sessions(t->server_ctx[s - sites->servers]) == want)
                continue;
            struct tls_conf c = *top, dc = *top;
            read_conf(s->first, &c);
            read_conf(d->first, &dc);
            unsigned at = c.cache && c.cache != top->cache ? c.cache->line : s->node->line;
            unsigned dat = dc.cache ? dc.cache->line : d->node->line;
            log_warn("%s:%u: ssl_session_cache differs from that of the default server of "
                     "%s (%s:%u): its sessions are kept in the default server's cache, "
                     "taken before the client names a server (as nginx does)",
                     conf_line_file(at, b->r.file), conf_line_no(at), a->listen.text,
                     conf_line_file(dat, b->r.file), conf_line_no(dat));
        }
    }
}

int tls_set_build(const struct config *cfg, const struct site_set *sites,
                  struct tls_set **out, char *err, size_t len)
{
    *out = NULL;
    bool tls = any_ssl(cfg, sites);
    if (!tls && !(sites && sites->n_servers && config_next(cfg, "ssl_certificate", NULL)) &&
        !any_server_cert(sites))
        return 0;
    pthread_once(&index_once, index_make);
    /* The notices join the file's (config.c's): the configuration owns their room. */
    struct build b = {{.file = cfg->file, .owner = "", .context = CONF_TOP, .err = err,
                       .err_len = len, .notes = (char *)cfg->notes,
                       .notes_len = sizeof(cfg->notes)}, cfg, NULL, NULL};
    struct tls_set *t = calloc(1, sizeof(*t));
    if (!t)
        return conf_error(&b.r, 0, "out of memory");
    t->sites = sites;
    t->cfg = cfg;
    struct tls_conf top = {0};
    read_conf(cfg->tree, &top);
    if (!sites || !sites->n_servers) {
        const struct conf_node *ssl_listen = config_next(cfg, "listen", NULL);
        while (ssl_listen && !has_ssl(ssl_listen))
            ssl_listen = config_next(cfg, "listen", ssl_listen);
        unsigned line = ssl_listen ? ssl_listen->line : 0;
        if (!top.n_cert)
            conf_error(&b.r, line, "no \"ssl_certificate\" for the server of \"listen %s ssl\"",
                       ssl_listen ? ssl_listen->args[0] : "?");
        else
            t->top_ctx = ctx_make(&b, &top, t, NULL, line);
    } else {
        t->n_servers = sites->n_servers;
        t->server_ctx = calloc(sites->n_servers, sizeof(*t->server_ctx));
        t->verify = calloc(sites->n_servers, sizeof(*t->verify));
        if (!t->server_ctx || !t->verify)
            conf_error(&b.r, 0, "out of memory");
        for (unsigned i = 0; t->server_ctx && t->verify && i < sites->n_servers; i++) {
            const struct site_server *s = &sites->servers[i];
            const struct site_addr *a = tls_addr_of(sites, s);
            if (!a) {
                /* Not served over TLS, but its certificates, keys and passwords are read
                 * and checked all the same, as nginx does. */
                struct tls_conf c = top;
                read_conf(s->first, &c);
                if (c.n_cert)
                    SSL_CTX_free(ctx_make(&b, &c, t, s, s->node->line));
                continue;
            }
            struct tls_conf c = top;
            read_conf(s->first, &c);
            int mode = verify_mode(&b, &c);
            t->verify[i] = mode < 0 ? VERIFY_OFF : mode;
            const struct site_addr *d = default_of(sites, s);
            if (!c.n_cert && d) {
                conf_error(&b.r, s->node->line, "no \"ssl_certificate\" for the server of "
                           "\"listen %s ssl\"", d->listen.text);
                continue;
            }
            /* Without one, as nginx: SNI naming it keeps the default server's context. */
            if (c.n_cert)
                t->server_ctx[i] = ctx_make(&b, &c, t, s, s->node->line);
        }
        if (!b.r.errors)
            check_session_caches(&b, t, &top);
    }
    if (b.r.errors || !tls) {
        tls_set_free(t);
        return b.r.errors ? -1 : 0;
    }
    *out = t;
    return 0;
}

void tls_set_free(struct tls_set *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->n_servers; i++)
        SSL_CTX_free(t->server_ctx[i]);
    free(t->server_ctx);
    free(t->verify);
    SSL_CTX_free(t->top_ctx);
    free(t);
}

/* --- kernel TLS -------------------------------------------------------------------------- */

/* Can this kernel take TLS records over (the "tls" upper-layer protocol on a TCP socket)?
 * Tried on a loopback connection of its own. */
static bool kernel_tls(char *why, size_t cap)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int a = -1;
    bool ok = false;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (l >= 0 && c >= 0 && bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        listen(l, 1) == 0 && getsockname(l, (struct sockaddr *)&sa, &sl) == 0 &&
        connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        (a = accept(l, NULL, NULL)) >= 0) {
        ok = setsockopt(c, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls")) == 0;
        if (!ok)
            snprintf(why, cap, "%s", errno == ENOENT ? "this kernel has no \"tls\" upper-layer "
                                                       "protocol" : strerror(errno));
    } else {
        snprintf(why, cap, "probe: %s", strerror(errno));
    }
    if (a >= 0)
        close(a);
    if (c >= 0)
        close(c);
    if (l >= 0)
        close(l);
    return ok;
}

void tls_log_path(void)
{
    char why[160] = "";
    if (kernel_tls(why, sizeof(why)))
        log_info("TLS: the kernel offers kernel TLS, but file bodies are encrypted in user "
                 "space: read into a per-thread buffer, 16 KiB records");
    else
        log_info("TLS: kernel TLS unavailable (%s): file bodies are read into a per-thread "
                 "buffer and encrypted in 16 KiB records", why);
}
