/* keyed_hash.h — SipHash-2-4 (Aumasson and Bernstein, 2012) under a secret key, computed by
 * OpenSSL 3's EVP_MAC: for tables whose entries come from clients, where an unkeyed hash
 * would let a client choose which entries collide (mod_auth's credential cache).
 *
 * The MAC is fetched and keyed once, by keyed_hash_new; each hash is a copy of that keyed
 * state (EVP_MAC_CTX_dup), fed and finished, so one struct keyed_hash serves every thread
 * at once without a lock. */
#ifndef LFHTTPD_KEYED_HASH_H
#define LFHTTPD_KEYED_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KEYED_HASH_KEY_SIZE 16 /* SipHash's 128-bit key */

struct keyed_hash; /* read-only after keyed_hash_new: shared by every thread */

/* A hash under key (copied). NULL when OpenSSL has no SipHash, or out of memory. */
struct keyed_hash *keyed_hash_new(const unsigned char key[KEYED_HASH_KEY_SIZE]);
/* The same with a key drawn from the kernel's random source (getrandom). */
struct keyed_hash *keyed_hash_new_random(void);
void keyed_hash_free(struct keyed_hash *k);

/* SipHash-2-4 of m[0..len), its 64-bit output as the paper writes it (the eight bytes
 * read little-endian). Returns 0, or -1 when OpenSSL fails (out of memory). */
int keyed_hash64(const struct keyed_hash *k, const void *m, size_t len, uint64_t *out);

#endif
