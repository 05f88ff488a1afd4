/* keyed_hash.c — SipHash-2-4 through OpenSSL's EVP_MAC (see keyed_hash.h).
 *
 * OpenSSL's SipHash answers 16 bytes (SipHash-128) unless told its size: it is set to 8
 * with the key. Fetching the MAC costs far more than a hash, so it is done once per key;
 * a hash then costs a copy of the keyed context, an update and a final. */
#include "keyed_hash.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

struct keyed_hash {
    EVP_MAC_CTX *keyed; /* keyed and sized, never fed: each hash works on a copy */
};

struct keyed_hash *keyed_hash_new(const unsigned char key[KEYED_HASH_KEY_SIZE])
{
    struct keyed_hash *k = calloc(1, sizeof(*k));
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
    if (k && mac)
        k->keyed = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac); /* the context holds its own reference */
    size_t size = 8;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
                           OSSL_PARAM_construct_end()};
    if (!k || !k->keyed || !EVP_MAC_init(k->keyed, key, KEYED_HASH_KEY_SIZE, params)) {
        keyed_hash_free(k);
        return NULL;
    }
    return k;
}

struct keyed_hash *keyed_hash_new_random(void)
{
    unsigned char key[KEYED_HASH_KEY_SIZE];
    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
        return NULL;
    struct keyed_hash *k = keyed_hash_new(key);
    explicit_bzero(key, sizeof(key));
    return k;
}

void keyed_hash_free(struct keyed_hash *k)
{
    if (!k)
        return;
    EVP_MAC_CTX_free(k->keyed);
    free(k);
}

int keyed_hash64(const struct keyed_hash *k, const void *m, size_t len, uint64_t *out)
{
    EVP_MAC_CTX *c = EVP_MAC_CTX_dup(k->keyed);
    unsigned char h[8];
    size_t n = 0;
    int ok = c && EVP_MAC_update(c, m, len) && EVP_MAC_final(c, h, &n, sizeof(h)) &&
             n == sizeof(h);
    EVP_MAC_CTX_free(c);
    if (!ok)
        return -1;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = (x << 8) | h[i];
    *out = x;
    return 0;
}
