/* Unit tests of the keyed hash (modules/keyed_hash.c) that mod_auth's credential cache keys
 * its entries with: SipHash-2-4 by OpenSSL, checked against the reference vectors of
 * Aumasson and Bernstein's paper (key 00 01 .. 0f, message 00 01 .. of each length). */
#define TEST_MAIN
#include "test.h"

#include <stdint.h>

#include "keyed_hash.h"

static struct keyed_hash *reference_key(void)
{
    unsigned char key[KEYED_HASH_KEY_SIZE];
    for (unsigned i = 0; i < sizeof(key); i++)
        key[i] = (unsigned char)i;
    return keyed_hash_new(key);
}

static uint64_t reference_hash(size_t len)
{
    unsigned char m[64];
    for (unsigned i = 0; i < sizeof(m); i++)
        m[i] = (unsigned char)i;
    struct keyed_hash *k = reference_key();
    uint64_t h = 0;
    if (!k || keyed_hash64(k, m, len, &h) < 0)
        h = 0;
    keyed_hash_free(k);
    return h;
}

TEST(siphash24_of_the_papers_15_byte_message_is_its_vector)
{
    CHECK(reference_hash(15) == 0xa129ca6149be45e5ull);
}

TEST(siphash24_of_the_empty_message_is_the_first_reference_vector)
{
    CHECK(reference_hash(0) == 0x726fdb47dd0e0e31ull);
}

TEST(different_keys_give_different_hashes)
{
    struct keyed_hash *a = keyed_hash_new_random(), *b = keyed_hash_new_random();
    uint64_t ha = 0, hb = 0;
    CHECK(a && b);
    CHECK(keyed_hash64(a, "user:password", 13, &ha) == 0);
    CHECK(keyed_hash64(b, "user:password", 13, &hb) == 0);
    CHECK(ha != hb);
    keyed_hash_free(a);
    keyed_hash_free(b);
}
