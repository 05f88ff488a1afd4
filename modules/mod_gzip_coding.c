/* mod_gzip_coding.c — one encoder interface over zlib, Brotli and Zstandard.
 *
 * An encoder is started for an input of known size (each library then sizes its window to
 * the input, which saves most of the allocation for small bodies), fed the input in pieces,
 * and finished; every piece of output goes to an `emit` callback, a growing buffer for
 * memory bodies or a memfd for files. The three libraries differ only inside feed().
 *
 * Windows stay within what browsers decode: Zstandard's at most 8 MiB (RFC 9659 section 3:
 * a recipient may refuse a larger one, and Chromium does), Brotli's at most 16 MiB.
 */
#include "mod_gzip_coding.h"

#include <brotli/encode.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define CODING_CHUNK (64 * 1024) /* bytes read and written per step of a file */
#define ZSTD_HTTP_WINDOW_LOG 23  /* 8 MiB: RFC 9659's limit for the zstd coding */
#define ZSTD_MIN_WINDOW_LOG 10   /* zstd.h has its own only under ZSTD_STATIC_LINKING_ONLY */

static const char *const names[CODING_COUNT] = {"gzip", "br", "zstd"};
static const char *const suffixes[CODING_COUNT] = {".gz", ".br", ".zst"};

const char *coding_name(enum content_coding c)
{
    return names[c];
}

const char *coding_suffix(enum content_coding c)
{
    return suffixes[c];
}

typedef int (*emit_fn)(void *arg, const unsigned char *p, size_t n);

/* What a feed does with the input: take it (the coding may hold some back), take it and
 * flush (every byte so far can be decoded from what was emitted), or end the coding. */
enum feed_mode { FEED_MORE, FEED_FLUSH, FEED_END };

struct encoder {
    enum content_coding coding;
    int level, wbits, mem_level; /* gzip: what z was made with (see gzip_reuse) */
    z_stream z;             /* gzip */
    BrotliEncoderState *br; /* br */
    ZSTD_CCtx *zs;          /* zstd */
    unsigned char out[CODING_CHUNK];
    unsigned char in[CODING_CHUNK]; /* a file's input, a chunk at a time */
};

/* The smallest window of 2^bits bytes (within [lo, hi]) that holds `size` bytes. */
static int window_bits(uint64_t size, int lo, int hi)
{
    int bits = lo;
    while (bits < hi && ((uint64_t)1 << bits) < size)
        bits++;
    return bits;
}

/* As nginx does: deflate's window and memory level no larger than the input needs. */
static void gzip_params(uint64_t size, int *wbits, int *mem_level)
{
    *wbits = 15;
    *mem_level = 8;
    while (*wbits > 9 && size < (uint64_t)((1 << (*wbits - 1)) - 262)) {
        (*wbits)--;
        (*mem_level)--;
    }
    if (*mem_level < 1)
        *mem_level = 1;
}

static int gzip_start(struct encoder *e, uint64_t size, int level)
{
    gzip_params(size, &e->wbits, &e->mem_level);
    e->level = level;
    /* 16 + wbits: a gzip wrapper, with zlib's default header (no name, mtime 0) */
    int rc = deflateInit2(&e->z, level, Z_DEFLATED, 16 + e->wbits, e->mem_level,
                          Z_DEFAULT_STRATEGY);
    return rc == Z_OK ? 0 : -ENOMEM;
}

/* Each thread keeps its last gzip encoder for the next compression with the same level,
 * window and memory level (deflateReset, as nginx's gzip reuses its pool): a new one
 * allocates and faults in some 400 KiB, a tenth of a cold 100 KiB compression's time.
 * Freed when the thread ends. */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static _Thread_local struct encoder *spare;

static void spare_free(void *p)
{
    struct encoder *e = p;
    deflateEnd(&e->z);
    free(e);
}

static void spare_key_make(void)
{
    pthread_key_create(&spare_key, spare_free);
}

static void spare_set(struct encoder *e)
{
    spare = e;
    pthread_once(&spare_once, spare_key_make);
    pthread_setspecific(spare_key, e);
}

/* The thread's spare gzip encoder, reset, if it was made for what `size` and `level` need. */
static struct encoder *gzip_reuse(uint64_t size, int level)
{
    int wbits, mem_level;
    gzip_params(size, &wbits, &mem_level);
    struct encoder *e = spare;
    if (!e || e->level != level || e->wbits != wbits || e->mem_level != mem_level ||
        deflateReset(&e->z) != Z_OK)
        return NULL;
    spare_set(NULL);
    return e;
}

static int br_start(struct encoder *e, uint64_t size, int level)
{
    e->br = BrotliEncoderCreateInstance(NULL, NULL, NULL);
    if (!e->br)
        return -ENOMEM;
    uint32_t hint = size > (1u << 30) ? (1u << 30) : (uint32_t)size;
    int lgwin = window_bits(size, BROTLI_MIN_WINDOW_BITS, BROTLI_MAX_WINDOW_BITS);
    if (!BrotliEncoderSetParameter(e->br, BROTLI_PARAM_QUALITY, (uint32_t)level) ||
        !BrotliEncoderSetParameter(e->br, BROTLI_PARAM_LGWIN, (uint32_t)lgwin) ||
        !BrotliEncoderSetParameter(e->br, BROTLI_PARAM_SIZE_HINT, hint))
        return -EINVAL;
    return 0;
}

static int zstd_start(struct encoder *e, uint64_t size, int level)
{
    e->zs = ZSTD_createCCtx();
    if (!e->zs)
        return -ENOMEM;
    int wlog = window_bits(size, ZSTD_MIN_WINDOW_LOG, ZSTD_HTTP_WINDOW_LOG);
    if (ZSTD_isError(ZSTD_CCtx_setParameter(e->zs, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(e->zs, ZSTD_c_windowLog, wlog)) ||
        ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(e->zs, size)))
        return -EINVAL;
    return 0;
}

static void encoder_end(struct encoder *e)
{
    if (e->coding == CODING_GZIP) { /* the thread's spare now, in place of an older one */
        if (spare)
            spare_free(spare);
        spare_set(e);
        return;
    }
    if (e->br)
        BrotliEncoderDestroyInstance(e->br);
    if (e->zs)
        ZSTD_freeCCtx(e->zs);
    free(e);
}

static int encoder_start(enum content_coding c, uint64_t size, int level, struct encoder **out)
{
    if (c == CODING_GZIP && (*out = gzip_reuse(size, level)) != NULL)
        return 0;
    struct encoder *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->coding = c;
    int rc = c == CODING_GZIP ? gzip_start(e, size, level)
             : c == CODING_BR ? br_start(e, size, level)
                              : zstd_start(e, size, level);
    if (rc < 0) {
        if (c == CODING_GZIP) /* a failed deflateInit2 holds nothing to end */
            e->coding = CODING_COUNT;
        encoder_end(e);
        return rc;
    }
    *out = e;
    return 0;
}

static int gzip_feed(struct encoder *e, const unsigned char *in, size_t n, enum feed_mode mode,
                     emit_fn emit, void *arg)
{
    bool finish = mode == FEED_END;
    e->z.next_in = (Bytef *)in;
    e->z.avail_in = (uInt)n;
    int flush = finish ? Z_FINISH : mode == FEED_FLUSH ? Z_SYNC_FLUSH : Z_NO_FLUSH;
    for (;;) {
        e->z.next_out = e->out;
        e->z.avail_out = sizeof(e->out);
        int zr = deflate(&e->z, flush);
        if (zr == Z_STREAM_ERROR)
            return -EIO;
        int rc = emit(arg, e->out, sizeof(e->out) - e->z.avail_out);
        if (rc < 0)
            return rc;
        if (finish ? zr == Z_STREAM_END : (e->z.avail_in == 0 && e->z.avail_out != 0))
            return 0;
    }
}

static int br_feed(struct encoder *e, const unsigned char *in, size_t n, enum feed_mode mode,
                   emit_fn emit, void *arg)
{
    bool finish = mode == FEED_END;
    BrotliEncoderOperation op = finish               ? BROTLI_OPERATION_FINISH
                                : mode == FEED_FLUSH ? BROTLI_OPERATION_FLUSH
                                                     : BROTLI_OPERATION_PROCESS;
    for (;;) {
        size_t avail_out = sizeof(e->out);
        uint8_t *next_out = e->out;
        if (!BrotliEncoderCompressStream(e->br, op, &n, &in, &avail_out, &next_out, NULL))
            return -EIO;
        int rc = emit(arg, e->out, sizeof(e->out) - avail_out);
        if (rc < 0)
            return rc;
        if (n == 0 && !BrotliEncoderHasMoreOutput(e->br) &&
            (!finish || BrotliEncoderIsFinished(e->br)))
            return 0;
    }
}

static int zstd_feed(struct encoder *e, const unsigned char *in, size_t n, enum feed_mode mode,
                     emit_fn emit, void *arg)
{
    ZSTD_inBuffer ib = {in, n, 0};
    ZSTD_EndDirective op = mode == FEED_END     ? ZSTD_e_end
                           : mode == FEED_FLUSH ? ZSTD_e_flush
                                                : ZSTD_e_continue;
    for (;;) {
        ZSTD_outBuffer ob = {e->out, sizeof(e->out), 0};
        size_t left = ZSTD_compressStream2(e->zs, &ob, &ib, op);
        if (ZSTD_isError(left))
            return -EIO;
        int rc = emit(arg, e->out, ob.pos);
        if (rc < 0)
            return rc;
        if (op != ZSTD_e_continue ? left == 0 : (ib.pos == ib.size && ob.pos < ob.size))
            return 0;
    }
}

/* Compress n more bytes of input, as mode says. */
static int encoder_feed_mode(struct encoder *e, const void *in, size_t n, enum feed_mode mode,
                             emit_fn emit, void *arg)
{
    const unsigned char *p = in;
    switch (e->coding) {
    case CODING_GZIP:
        return gzip_feed(e, p, n, mode, emit, arg);
    case CODING_BR:
        return br_feed(e, p, n, mode, emit, arg);
    default:
        return zstd_feed(e, p, n, mode, emit, arg);
    }
}

/* Compress n more bytes of input; with finish, they are the last, and the stream ends. */
static int encoder_feed(struct encoder *e, const void *in, size_t n, bool finish, emit_fn emit,
                        void *arg)
{
    return encoder_feed_mode(e, in, n, finish ? FEED_END : FEED_MORE, emit, arg);
}

/* --- memory ------------------------------------------------------------------------------- */

struct membuf {
    char *p;
    size_t len, cap;
};

static int membuf_emit(void *arg, const unsigned char *p, size_t n)
{
    struct membuf *b = arg;
    if (n == 0) /* nothing yet (b->p may still be NULL, which memcpy must not see) */
        return 0;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *bigger = realloc(b->p, cap);
        if (!bigger)
            return -ENOMEM;
        b->p = bigger;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

int coding_compress_iov(enum content_coding c, const struct iovec *in, unsigned n, int level,
                        char **out, size_t *out_len)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += in[i].iov_len;
    if (total > UINT32_MAX / 2)
        return -EFBIG;
    struct encoder *e;
    int rc = encoder_start(c, total, level, &e);
    if (rc < 0)
        return rc;
    struct membuf b = {0};
    for (unsigned i = 0; rc == 0 && i < n; i++)
        rc = encoder_feed(e, in[i].iov_base, in[i].iov_len, false, membuf_emit, &b);
    if (rc == 0)
        rc = encoder_feed(e, NULL, 0, true, membuf_emit, &b);
    encoder_end(e);
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    *out = b.p ? b.p : malloc(1);
    *out_len = b.len;
    return *out ? 0 : -ENOMEM;
}

/* --- files ------------------------------------------------------------------------------- */

static int fd_emit(void *arg, const unsigned char *p, size_t n)
{
    int fd = *(int *)arg;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int compress_fd(struct encoder *e, int fd, uint64_t size, int out_fd, unsigned char *in)
{
    uint64_t off = 0;
    for (;;) {
        size_t want = size - off < CODING_CHUNK ? (size_t)(size - off) : CODING_CHUNK;
        ssize_t got = want ? pread(fd, in, want, (off_t)off) : 0;
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -errno;
        if (got == 0 && want)
            return -ESTALE; /* the file shrank */
        off += (uint64_t)got;
        int rc = encoder_feed(e, in, (size_t)got, off == size, fd_emit, &out_fd);
        if (rc < 0 || off == size)
            return rc;
    }
}

int coding_compress_file(enum content_coding c, int fd, uint64_t size, int level, int *memfd,
                         uint64_t *out_len)
{
    struct encoder *e;
    int rc = encoder_start(c, size, level, &e);
    if (rc < 0)
        return rc;
    int mfd = memfd_create("lfhttpd-compressed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0)
        rc = -errno;
    else
        rc = compress_fd(e, fd, size, mfd, e->in);
    encoder_end(e);
    off_t len = rc == 0 ? lseek(mfd, 0, SEEK_CUR) : -1;
    if (rc == 0 && len < 0)
        rc = -errno;
    if (rc < 0) {
        if (mfd >= 0)
            close(mfd);
        return rc;
    }
    /* Sealed: nothing can change the bytes a cached variant promises. */
    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
    *memfd = mfd;
    *out_len = (uint64_t)len;
    return 0;
}

/* --- streams ----------------------------------------------------------------------------- */

/* A body of unknown length, compressed piece by piece as it arrives. Its window is bounded
 * whatever the body's length, so that a stream's memory is too: deflate's usual 32 KiB, and
 * 512 KiB for br and zstd (nginx's brotli module's default window). */
#define STREAM_WINDOW_BITS 19

struct coding_stream {
    struct encoder *e;
};

int coding_stream_start(enum content_coding c, int level, struct coding_stream **out)
{
    struct coding_stream *s = malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->e = NULL;
    /* A size hint of the window's: gzip's parameters are then its largest, br's and zstd's
     * window STREAM_WINDOW_BITS; zstd pledges no size (the body's is not known). */
    uint64_t hint = (uint64_t)1 << STREAM_WINDOW_BITS;
    int rc = encoder_start(c, c == CODING_GZIP ? UINT64_MAX : hint, level, &s->e);
    if (rc == 0 && c == CODING_ZSTD &&
        ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(s->e->zs, ZSTD_CONTENTSIZE_UNKNOWN)))
        rc = -EINVAL;
    if (rc == 0 && c == CODING_BR && /* no size hint: the body may be longer */
        !BrotliEncoderSetParameter(s->e->br, BROTLI_PARAM_SIZE_HINT, 0))
        rc = -EINVAL;
    if (rc < 0) {
        if (s->e)
            encoder_end(s->e);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int coding_stream_feed(struct coding_stream *s, const void *in, size_t n, bool end,
                       int (*emit)(void *arg, const unsigned char *p, size_t n), void *arg)
{
    return encoder_feed_mode(s->e, in, n, end ? FEED_END : FEED_FLUSH, emit, arg);
}

void coding_stream_free(struct coding_stream *s)
{
    if (!s)
        return;
    encoder_end(s->e);
    free(s);
}
