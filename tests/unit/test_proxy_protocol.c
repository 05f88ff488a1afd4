/* Unit tests of the PROXY protocol header parser (proxy_protocol.h): versions 1 and 2,
 * whole, in pieces, and broken. */
#define TEST_MAIN
#include "test.h"

#include <arpa/inet.h>
#include <string.h>

#include "proxy_protocol.h"

static struct proxy_protocol_addrs pp;

static long parse(const char *buf, size_t len)
{
    memset(&pp, 0xaa, sizeof(pp));
    return proxy_protocol_parse(buf, len, &pp);
}

static const char *addr_text(const union request_addr *a)
{
    static char out[INET6_ADDRSTRLEN];
    if (a->sa.sa_family == AF_INET)
        return inet_ntop(AF_INET, &a->in.sin_addr, out, sizeof(out));
    if (a->sa.sa_family == AF_INET6)
        return inet_ntop(AF_INET6, &a->in6.sin6_addr, out, sizeof(out));
    return "";
}

static unsigned port_of(const union request_addr *a)
{
    return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in.sin_port);
}

#define V1 "PROXY TCP4 192.0.2.1 198.51.100.2 5555 443\r\n"

TEST(v1_tcp4_gives_both_addresses_and_ports)
{
    CHECK_EQ_INT(parse(V1 "GET", strlen(V1) + 3), (long)strlen(V1));
    CHECK(strcmp(addr_text(&pp.src), "192.0.2.1") == 0);
    CHECK(strcmp(addr_text(&pp.dst), "198.51.100.2") == 0);
    CHECK_EQ_INT(port_of(&pp.src), 5555);
    CHECK_EQ_INT(port_of(&pp.dst), 443);
}

TEST(v1_tcp6)
{
    const char *h = "PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n";
    CHECK_EQ_INT(parse(h, strlen(h)), (long)strlen(h));
    CHECK(strcmp(addr_text(&pp.src), "2001:db8::1") == 0);
    CHECK_EQ_INT(port_of(&pp.dst), 65535);
}

TEST(v1_unknown_says_nothing_of_the_addresses)
{
    const char *h = "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n";
    CHECK_EQ_INT(parse(h, strlen(h)), (long)strlen(h));
    CHECK_EQ_INT(pp.src.sa.sa_family, AF_UNSPEC);
}

TEST(every_prefix_of_a_v1_header_asks_for_more)
{
    for (size_t n = 1; n < strlen(V1); n++)
        CHECK_EQ_INT(parse(V1, n), 0);
}

TEST(v1_broken_headers_are_refused)
{
    const char *bad[] = {
        "GET / HTTP/1.1\r\n", "PROXY TCP5 1.1.1.1 1.1.1.1 1 2\r\n",
        "PROXY TCP4 1.1.1.1 1.1.1.1 1 2\n", "PROXY TCP4 1.1.1.1 1.1.1.1 1 65536\r\n",
        "PROXY TCP4 300.1.1.1 1.1.1.1 1 2\r\n", "PROXY TCP4 1.1.1.1 1.1.1.1 1\r\n",
        "PROXY TCP4 1.1.1.1  1.1.1.1 1 2\r\n", "proxy TCP4 1.1.1.1 1.1.1.1 1 2\r\n",
        /* an address of the other family than the protocol word says */
        "PROXY TCP4 192.0.2.10 2001:db8::1 1 2\r\n", "PROXY TCP6 2001:db8::1 1.1.1.1 1 2\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ_INT(parse(bad[i], strlen(bad[i])), -1);
}

TEST(v1_without_its_end_within_107_bytes_is_refused)
{
    char h[200];
    memset(h, ' ', sizeof(h));
    memcpy(h, "PROXY UNKNOWN", 13);
    CHECK_EQ_INT(parse(h, 106), 0);
    CHECK_EQ_INT(parse(h, 107), -1);
}

/* A v2 header: the signature, version 2 with command, family, length, then body. */
static size_t v2(char *out, unsigned char cmd, unsigned char fam, const char *body, size_t n)
{
    memcpy(out, "\r\n\r\n\0\r\nQUIT\n", 12);
    out[12] = (char)cmd;
    out[13] = (char)fam;
    out[14] = (char)(n >> 8);
    out[15] = (char)(n & 0xff);
    memcpy(out + 16, body, n);
    return 16 + n;
}

static const char v4_body[] = {(char)192, 0, 2, 1, (char)198, 51, 100, 2, 0x15, (char)0xb3,
                               0x01, (char)0xbb, 0x03, 0x00, 0x01, 0x07};

TEST(v2_tcp4_with_a_tlv)
{
    char h[64];
    size_t n = v2(h, 0x21, 0x11, v4_body, sizeof(v4_body));
    CHECK_EQ_INT(parse(h, n), (long)n);
    CHECK(strcmp(addr_text(&pp.src), "192.0.2.1") == 0);
    CHECK(strcmp(addr_text(&pp.dst), "198.51.100.2") == 0);
    CHECK_EQ_INT(port_of(&pp.src), 5555);
    CHECK_EQ_INT(port_of(&pp.dst), 443);
}

TEST(every_prefix_of_a_v2_header_asks_for_more)
{
    char h[64];
    size_t n = v2(h, 0x21, 0x11, v4_body, sizeof(v4_body));
    for (size_t k = 1; k < n; k++)
        CHECK_EQ_INT(parse(h, k), 0);
}

TEST(v2_local_and_unspecified_family_say_nothing)
{
    char h[64];
    size_t n = v2(h, 0x20, 0x00, "", 0);
    CHECK_EQ_INT(parse(h, n), 16);
    CHECK_EQ_INT(pp.src.sa.sa_family, AF_UNSPEC);
    n = v2(h, 0x21, 0x00, "", 0);
    CHECK_EQ_INT(parse(h, n), 16);
    CHECK_EQ_INT(pp.src.sa.sa_family, AF_UNSPEC);
}

TEST(v2_broken_headers_are_refused)
{
    char h[64];
    size_t n = v2(h, 0x31, 0x11, v4_body, 12); /* version 3 */
    CHECK_EQ_INT(parse(h, n), -1);
    n = v2(h, 0x22, 0x11, v4_body, 12); /* command 2 */
    CHECK_EQ_INT(parse(h, n), -1);
    n = v2(h, 0x21, 0x11, v4_body, 8); /* too short for two IPv4 addresses */
    CHECK_EQ_INT(parse(h, n), -1);
    n = v2(h, 0x21, 0x21, v4_body, 16); /* too short for IPv6 */
    CHECK_EQ_INT(parse(h, n), -1);
    h[14] = (char)0x10; /* 4096 bytes after the 16: over PROXY_PROTOCOL_MAX */
    h[15] = 0;
    CHECK_EQ_INT(parse(h, 16), -1);
}

