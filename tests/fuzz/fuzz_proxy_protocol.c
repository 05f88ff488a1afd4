/* fuzz_proxy_protocol.c — libFuzzer target for the PROXY protocol header parser
 * (proxy_protocol_parse), which the connection feeds with whatever has arrived.
 *
 * What it checks, beyond "no crash, no sanitizer report": the answer for every prefix of
 * the input agrees with the answer for the whole, as reading in pieces needs:
 *   - a header of length L (> 0): every shorter prefix asks for more (0), every longer
 *     one gives L again, with the same addresses; L is at most PROXY_PROTOCOL_MAX;
 *   - asking for more (0) is never said of a longer input after a refusal (-1) of a
 *     shorter one: once refused, refused;
 *   - the addresses are AF_INET, AF_INET6, or AF_UNSPEC in both src and dst.
 *
 * Input: the first bytes of a connection (seeds in tests/fuzz/corpus/fuzz_proxy_protocol/:
 * v1 and v2 headers with a request after them).
 * Links: server/proxy_protocol.c only.
 *   clang -O1 -g -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iserver \
 *     -o build/fuzz/fuzz_proxy_protocol tests/fuzz/fuzz_proxy_protocol.c \
 *     server/proxy_protocol.c
 * or `make fuzz FUZZ_SECONDS=60` (every target).
 */
#include "proxy_protocol.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(x)                                                                             \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static int family(const union request_addr *a)
{
    return a->sa.sa_family;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 2 * PROXY_PROTOCOL_MAX)
        return 0;
    char *buf = malloc(size ? size : 1); /* exactly size bytes: reads past it are caught */
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    struct proxy_protocol_addrs whole, part;
    long all = proxy_protocol_parse(buf, size, &whole);
    REQUIRE(all >= -1 && all <= (long)size && all <= PROXY_PROTOCOL_MAX);
    if (all > 0) {
        int f = family(&whole.src);
        REQUIRE(f == AF_INET || f == AF_INET6 || f == AF_UNSPEC);
        REQUIRE(family(&whole.dst) == f);
    }
    bool refused = false;
    for (size_t k = 1; k <= size; k++) {
        long r = proxy_protocol_parse(buf, k, &part);
        if (all > 0 && (long)k < all)
            REQUIRE(r == 0);
        if (all > 0 && (long)k >= all) {
            REQUIRE(r == all);
            REQUIRE(memcmp(&part, &whole, sizeof(part)) == 0);
        }
        if (all == 0)
            REQUIRE(r == 0);
        if (refused)
            REQUIRE(r == -1);
        refused = r == -1;
    }
    free(buf);
    return 0;
}
