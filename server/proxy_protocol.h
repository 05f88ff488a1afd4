/* proxy_protocol.h — the PROXY protocol header a load balancer sends before a connection's
 * first byte (HAProxy's specification, versions 1 and 2), parsed without I/O: the
 * connection's layer feeds it what has arrived, in as many pieces as the network gives.
 *
 *   v1  "PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n", or "PROXY UNKNOWN ...\r\n"; at most
 *       107 bytes.
 *   v2  the 12-byte signature, version 2 and a command (LOCAL or PROXY), the family and
 *       transport, the length of what follows (addresses, then TLVs, which are skipped);
 *       at most PROXY_PROTOCOL_MAX bytes in all.
 *
 * As nginx: a LOCAL command, an UNKNOWN, or a v2 family other than TCP or UDP over IPv4 or
 * IPv6 is accepted and says nothing of the addresses.
 */
#ifndef LFHTTPD_PROXY_PROTOCOL_H
#define LFHTTPD_PROXY_PROTOCOL_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#define PROXY_PROTOCOL_V1_MAX 107
#define PROXY_PROTOCOL_MAX 4096

/* An IPv4 or IPv6 address with its port. */
union request_addr {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
};

/* What a PROXY protocol header said of the connection: the client's address and port, and
 * the address it connected to. AF_UNSPEC in src.sa: the header said nothing of them. */
struct proxy_protocol_addrs {
    union request_addr src, dst;
};

/* The header at the start of buf[0, len): its length (> 0) when whole, with the addresses
 * in *out; 0 when what has come is the start of one (read more); -1 when it is none. */
long proxy_protocol_parse(const char *buf, size_t len, struct proxy_protocol_addrs *out);

#endif
