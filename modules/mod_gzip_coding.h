/* mod_gzip_coding.h — the content codings mod_gzip makes (RFC 9110 section 8.4.1):
 * gzip (zlib), br (Brotli, RFC 7932) and zstd (Zstandard, RFC 9659), behind one interface,
 * so that the filter, its cache and its sidecars treat them alike.
 */
#ifndef LFHTTPD_MOD_GZIP_CODING_H
#define LFHTTPD_MOD_GZIP_CODING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum content_coding {
    CODING_GZIP = 0,
    CODING_BR,
    CODING_ZSTD,
    CODING_COUNT,
};

#define CODING_BIT(c) (1u << (c))

/* "gzip", "br", "zstd": the Content-Encoding token, also the ETag suffix and log prefix. */
const char *coding_name(enum content_coding c);
/* ".gz", ".br", ".zst": the suffix of a precompressed sidecar. */
const char *coding_suffix(enum content_coding c);

/* Compress the concatenation of in[0..n) into one stream of coding c at `level` (gzip 1-9,
 * br 0-11, zstd 1-19) in a new malloc'd buffer the caller frees. The same input and level
 * give the same bytes. Returns 0, or -EFBIG / -ENOMEM / -EIO. */
int coding_compress_iov(enum content_coding c, const struct iovec *in, unsigned n, int level,
                        char **out, size_t *out_len);

/* Compress bytes [0, size) of the file fd into a new sealed memfd. Returns 0 with *memfd
 * (the caller's) and *out_len, or -errno (-ESTALE: the file was shorter than size). */
int coding_compress_file(enum content_coding c, int fd, uint64_t size, int level, int *memfd,
                         uint64_t *out_len);

/* A body of unknown length, compressed piece by piece as it streams, with a bounded window
 * (its memory does not grow with the body). */
struct coding_stream;
/* A stream of coding c at level. Returns 0 with *out, or -ENOMEM / -EINVAL. */
int coding_stream_start(enum content_coding c, int level, struct coding_stream **out);
/* Compress in[0..n) and flush: what emit was given decodes to every byte fed so far. end:
 * the input is over, and the coding's end is emitted. Returns 0, or a negative errno. */
int coding_stream_feed(struct coding_stream *s, const void *in, size_t n, bool end,
                       int (*emit)(void *arg, const unsigned char *p, size_t n), void *arg);
void coding_stream_free(struct coding_stream *s);

#endif
