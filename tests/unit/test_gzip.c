/* test_gzip.c — mod_gzip's pure parts: Accept-Encoding negotiation, compression, and the
 * cache of compressed files. One rule a test. */
#define TEST_MAIN
#include "test.h"

#include "mod_gzip.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

static enum gzip_choice ae(const char *value)
{
    return gzip_negotiate(value, strlen(value));
}

/* --- negotiation ---------------------------------------------------------------------- */

TEST(no_accept_encoding_is_identity)
{
    CHECK_EQ_INT(ae(""), GZIP_CHOICE_IDENTITY);
}

TEST(plain_gzip_is_gzip)
{
    CHECK_EQ_INT(ae("gzip"), GZIP_CHOICE_GZIP);
}

TEST(browser_list_is_gzip)
{
    CHECK_EQ_INT(ae("gzip, deflate, br, zstd"), GZIP_CHOICE_GZIP);
}

TEST(coding_names_are_case_insensitive)
{
    CHECK_EQ_INT(ae("GZip"), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("gzip;Q=0"), GZIP_CHOICE_IDENTITY);
}

TEST(x_gzip_is_an_alias_of_gzip)
{
    CHECK_EQ_INT(ae("x-gzip"), GZIP_CHOICE_GZIP);
}

TEST(gzip_with_q_zero_is_identity)
{
    CHECK_EQ_INT(ae("gzip;q=0"), GZIP_CHOICE_IDENTITY);
    CHECK_EQ_INT(ae("gzip;q=0.000"), GZIP_CHOICE_IDENTITY);
}

TEST(gzip_with_low_q_alone_is_still_gzip)
{
    CHECK_EQ_INT(ae("gzip;q=0.5"), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("gzip;q=0.001"), GZIP_CHOICE_GZIP);
}

TEST(identity_preferred_over_gzip_wins)
{
    CHECK_EQ_INT(ae("gzip;q=0.5, identity"), GZIP_CHOICE_IDENTITY);
    CHECK_EQ_INT(ae("identity;q=0.9, gzip;q=0.8"), GZIP_CHOICE_IDENTITY);
}

TEST(equal_weights_favour_gzip)
{
    CHECK_EQ_INT(ae("identity;q=0.5, gzip;q=0.5"), GZIP_CHOICE_GZIP);
}

TEST(star_accepts_gzip)
{
    CHECK_EQ_INT(ae("*"), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("br, *;q=0.1"), GZIP_CHOICE_GZIP);
}

TEST(star_also_weighs_identity)
{
    CHECK_EQ_INT(ae("gzip;q=0.5, *"), GZIP_CHOICE_IDENTITY);
}

TEST(explicit_gzip_zero_overrides_star)
{
    CHECK_EQ_INT(ae("*, gzip;q=0"), GZIP_CHOICE_IDENTITY);
}

TEST(star_zero_refuses_everything)
{
    CHECK_EQ_INT(ae("*;q=0"), GZIP_CHOICE_NONE);
}

TEST(star_zero_with_gzip_is_gzip)
{
    CHECK_EQ_INT(ae("gzip, *;q=0"), GZIP_CHOICE_GZIP);
}

TEST(star_zero_with_identity_is_identity)
{
    CHECK_EQ_INT(ae("*;q=0, identity"), GZIP_CHOICE_IDENTITY);
}

TEST(identity_zero_without_gzip_refuses_everything)
{
    CHECK_EQ_INT(ae("identity;q=0"), GZIP_CHOICE_NONE);
    CHECK_EQ_INT(ae("br, identity;q=0"), GZIP_CHOICE_NONE);
}

TEST(identity_zero_with_gzip_is_gzip)
{
    CHECK_EQ_INT(ae("gzip, identity;q=0"), GZIP_CHOICE_GZIP);
}

TEST(other_codings_only_is_identity)
{
    CHECK_EQ_INT(ae("br, deflate"), GZIP_CHOICE_IDENTITY);
}

TEST(whitespace_around_elements_and_parameters_is_allowed)
{
    CHECK_EQ_INT(ae("  br ,\tgzip ; q=0.7 ,  "), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("gzip ;\tq = 0"), GZIP_CHOICE_IDENTITY);
    CHECK_EQ_INT(ae(",,gzip,,"), GZIP_CHOICE_GZIP);
}

TEST(q_one_with_decimals_is_valid)
{
    CHECK_EQ_INT(ae("gzip;q=1.000"), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("gzip;q=1."), GZIP_CHOICE_GZIP);
}

TEST(invalid_qvalues_drop_the_element)
{
    /* Above 1, four decimals, not a number: the element is ignored. */
    CHECK_EQ_INT(ae("gzip;q=1.5"), GZIP_CHOICE_IDENTITY);
    CHECK_EQ_INT(ae("gzip;q=0.0001"), GZIP_CHOICE_IDENTITY);
    CHECK_EQ_INT(ae("gzip;q=abc"), GZIP_CHOICE_IDENTITY);
    CHECK_EQ_INT(ae("gzip;q="), GZIP_CHOICE_IDENTITY);
    CHECK_EQ_INT(ae("gzip;q=-1"), GZIP_CHOICE_IDENTITY);
}

TEST(a_malformed_element_does_not_spoil_the_others)
{
    CHECK_EQ_INT(ae("gzip;q=2, *"), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("@@@, gzip"), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("gzip;q=0 junk, identity;q=0"), GZIP_CHOICE_NONE);
}

TEST(other_parameters_are_ignored)
{
    CHECK_EQ_INT(ae("gzip;level=9"), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("gzip;x=\"a,b;q=0\";q=0.3"), GZIP_CHOICE_GZIP);
    CHECK_EQ_INT(ae("gzip;x=\"a,b\";q=0"), GZIP_CHOICE_IDENTITY);
}

TEST(unterminated_quote_drops_the_element)
{
    CHECK_EQ_INT(ae("gzip;x=\"abc"), GZIP_CHOICE_IDENTITY);
}

TEST(gzip_as_a_prefix_is_another_coding)
{
    CHECK_EQ_INT(ae("gzipx, gzi"), GZIP_CHOICE_IDENTITY);
}

TEST(the_kinder_weight_of_a_repeated_coding_counts)
{
    CHECK_EQ_INT(ae("gzip;q=0, gzip;q=0.4"), GZIP_CHOICE_GZIP);
}

TEST(several_field_lines_are_one_list)
{
    struct gzip_accept a;
    gzip_accept_init(&a);
    gzip_accept_parse(&a, "br", 2);
    gzip_accept_parse(&a, "gzip;q=0.2", 10);
    CHECK_EQ_INT(gzip_accept_choose(&a), GZIP_CHOICE_GZIP);
    gzip_accept_parse(&a, "identity;q=0.3", 14);
    CHECK_EQ_INT(gzip_accept_choose(&a), GZIP_CHOICE_IDENTITY);
}

TEST(value_is_not_read_past_its_length)
{
    const char v[] = "gzip;q=0.5";
    /* only "gzip;q=0" of it */
    CHECK_EQ_INT(gzip_negotiate(v, 8), GZIP_CHOICE_IDENTITY);
    CHECK_EQ_INT(gzip_negotiate(v, 4), GZIP_CHOICE_GZIP);
}

/* --- compression ---------------------------------------------------------------------- */

/* Decompress a gzip member; returns the length or -1. */
static long gunzip(const void *in, size_t in_len, char *out, size_t cap)
{
    z_stream z = {0};
    if (inflateInit2(&z, 16 + 15) != Z_OK)
        return -1;
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)in_len;
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)cap;
    int rc = inflate(&z, Z_FINISH);
    long n = rc == Z_STREAM_END && z.avail_in == 0 ? (long)z.total_out : -1;
    inflateEnd(&z);
    return n;
}

static char *sample(size_t n)
{
    char *p = malloc(n);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245 + 12345;
        p[i] = "lorem ipsum dolor sit amet <div class=\"x\"></div>\n"[(x >> 16) % 50];
    }
    return p;
}

TEST(compress_round_trips)
{
    size_t n = 200000;
    char *in = sample(n), *back = malloc(n + 1);
    struct iovec iov = {in, n};
    char *out;
    size_t out_len;
    CHECK_EQ_INT(gzip_compress_iov(&iov, 1, 6, &out, &out_len), 0);
    CHECK(out_len < n);
    CHECK((unsigned char)out[0] == 0x1f && (unsigned char)out[1] == 0x8b);
    CHECK_EQ_INT(gunzip(out, out_len, back, n + 1), n);
    CHECK(memcmp(in, back, n) == 0);
    free(in);
    free(back);
    free(out);
}

TEST(compress_of_pieces_equals_compress_of_the_whole)
{
    size_t n = 70000;
    char *in = sample(n);
    struct iovec whole = {in, n};
    struct iovec parts[3] = {{in, 10}, {in + 10, 40000}, {in + 40010, n - 40010}};
    char *a, *b;
    size_t al, bl;
    CHECK_EQ_INT(gzip_compress_iov(&whole, 1, 6, &a, &al), 0);
    CHECK_EQ_INT(gzip_compress_iov(parts, 3, 6, &b, &bl), 0);
    char *back = malloc(n);
    CHECK_EQ_INT(gunzip(b, bl, back, n), n);
    CHECK(memcmp(back, in, n) == 0);
    CHECK_EQ_INT(gunzip(a, al, back, n), n);
    free(a);
    free(b);
    free(back);
    free(in);
}

TEST(compress_is_deterministic)
{
    char *in = sample(5000);
    struct iovec iov = {in, 5000};
    char *a, *b;
    size_t al, bl;
    CHECK_EQ_INT(gzip_compress_iov(&iov, 1, 9, &a, &al), 0);
    CHECK_EQ_INT(gzip_compress_iov(&iov, 1, 9, &b, &bl), 0);
    CHECK(al == bl && memcmp(a, b, al) == 0);
    free(a);
    free(b);
    free(in);
}

/* A thread keeps its last encoder for the next compression with the same parameters:
 * each member must still be whole and alone, whatever came before it. */
TEST(compressions_one_after_another_are_each_whole)
{
    static const size_t sizes[] = {100000, 300, 100000, 100000, 20000, 100000};
    static const int levels[] = {6, 6, 6, 1, 6, 6};
    char *in = sample(100000), *back = malloc(100001);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        struct iovec iov = {in, sizes[i]};
        char *out;
        size_t out_len;
        CHECK_EQ_INT(gzip_compress_iov(&iov, 1, levels[i], &out, &out_len), 0);
        CHECK_EQ_INT(gunzip(out, out_len, back, 100001), (long)sizes[i]);
        CHECK(memcmp(back, in, sizes[i]) == 0);
        free(out);
    }
    free(in);
    free(back);
}

TEST(compress_of_nothing_is_a_valid_empty_member)
{
    char *out, back[4];
    size_t out_len;
    CHECK_EQ_INT(gzip_compress_iov(NULL, 0, 1, &out, &out_len), 0);
    CHECK_EQ_INT(gunzip(out, out_len, back, sizeof(back)), 0);
    free(out);
}

TEST(compress_of_incompressible_bytes_still_round_trips)
{
    size_t n = 100000;
    unsigned char *in = malloc(n);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        in[i] = (unsigned char)x;
    }
    struct iovec iov = {in, n};
    char *out, *back = malloc(n);
    size_t out_len;
    CHECK_EQ_INT(gzip_compress_iov(&iov, 1, 9, &out, &out_len), 0);
    CHECK_EQ_INT(gunzip(out, out_len, back, n), n);
    CHECK(memcmp(in, back, n) == 0);
    free(in);
    free(out);
    free(back);
}

static int temp_file(const char *data, size_t n)
{
    char path[] = "/tmp/test_gzip_XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    if (fd >= 0 && write(fd, data, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    return fd;
}

TEST(compress_file_fills_a_sealed_memfd_that_round_trips)
{
    size_t n = 300000; /* several chunks */
    char *in = sample(n);
    int fd = temp_file(in, n);
    CHECK(fd >= 0);
    int mfd;
    uint64_t gz_len;
    CHECK_EQ_INT(gzip_compress_file(fd, n, 6, &mfd, &gz_len), 0);
    CHECK_EQ_INT(lseek(mfd, 0, SEEK_END), gz_len);
    CHECK(fcntl(mfd, F_GET_SEALS) & F_SEAL_WRITE);
    char *gz = malloc(gz_len), *back = malloc(n);
    CHECK_EQ_INT(pread(mfd, gz, gz_len, 0), gz_len);
    CHECK_EQ_INT(gunzip(gz, gz_len, back, n), n);
    CHECK(memcmp(in, back, n) == 0);
    /* The same bytes as compressing it from memory. */
    struct iovec iov = {in, n};
    char *mem;
    size_t mem_len;
    CHECK_EQ_INT(gzip_compress_iov(&iov, 1, 6, &mem, &mem_len), 0);
    CHECK(mem_len == gz_len && memcmp(mem, gz, mem_len) == 0);
    free(mem);
    free(gz);
    free(back);
    free(in);
    close(mfd);
    close(fd);
}

TEST(compress_file_shorter_than_promised_is_estale)
{
    int fd = temp_file("short", 5);
    int mfd;
    uint64_t gz_len;
    CHECK_EQ_INT(gzip_compress_file(fd, 100, 6, &mfd, &gz_len), -ESTALE);
    close(fd);
}

/* --- the cache ------------------------------------------------------------------------- */

static int memfd_of(size_t n)
{
    int fd = memfd_create("test", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)n) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static struct gzip_file_id file_id(ino_t ino, int64_t mtime)
{
    return (struct gzip_file_id){.dev = 1, .ino = ino, .mtime_ns = mtime, .size = 1000};
}

/* Get (expecting a miss) and fill with a memfd of n bytes. */
static int put(struct gzip_cache *c, struct gzip_file_id id, size_t n)
{
    int fd;
    uint64_t len;
    struct gzip_cache_entry *e;
    if (gzip_cache_get(c, &id, &fd, &len, &e) != GZIP_CACHE_MISS)
        return -1;
    int m = memfd_of(n);
    gzip_cache_fill(c, e, m, n);
    close(m);
    return 0;
}

static bool has(struct gzip_cache *c, struct gzip_file_id id)
{
    int fd;
    uint64_t len;
    struct gzip_cache_entry *e;
    enum gzip_cache_result r = gzip_cache_get(c, &id, &fd, &len, &e);
    if (r == GZIP_CACHE_HIT) {
        close(fd);
        return true;
    }
    if (r == GZIP_CACHE_MISS)
        gzip_cache_abandon(c, e);
    return false;
}

TEST(cache_miss_then_hit_gives_a_duplicate_of_the_variant)
{
    struct gzip_cache *c = gzip_cache_create(1 << 20, 16);
    struct gzip_file_id id = file_id(7, 100);
    int fd;
    uint64_t len;
    struct gzip_cache_entry *e;
    CHECK_EQ_INT(gzip_cache_get(c, &id, &fd, &len, &e), GZIP_CACHE_MISS);
    int m = memfd_create("v", MFD_CLOEXEC);
    CHECK_EQ_INT(write(m, "abc", 3), 3);
    gzip_cache_fill(c, e, m, 3);
    close(m); /* the cache keeps its own */
    CHECK_EQ_INT(gzip_cache_get(c, &id, &fd, &len, &e), GZIP_CACHE_HIT);
    CHECK_EQ_INT(len, 3);
    char buf[4] = {0};
    CHECK_EQ_INT(pread(fd, buf, 3, 0), 3);
    CHECK(strcmp(buf, "abc") == 0);
    close(fd);
    struct gzip_cache_stats st;
    gzip_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.entries, 1);
    CHECK_EQ_INT(st.hits, 1);
    CHECK_EQ_INT(st.misses, 1);
    gzip_cache_destroy(c);
}

TEST(cache_another_version_of_the_file_is_a_miss_and_drops_the_old)
{
    struct gzip_cache *c = gzip_cache_create(1 << 20, 16);
    CHECK_EQ_INT(put(c, file_id(7, 100), 10), 0);
    CHECK(has(c, file_id(7, 100)));
    struct gzip_file_id newer = file_id(7, 200);
    CHECK(!has(c, newer));
    struct gzip_file_id bigger = file_id(7, 100);
    bigger.size = 2000;
    CHECK(!has(c, bigger));
    struct gzip_cache_stats st;
    gzip_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.entries, 0);
    CHECK_EQ_INT(st.bytes, 0);
    gzip_cache_destroy(c);
}

TEST(cache_evicts_the_least_recently_used_past_its_bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    struct gzip_cache *c = gzip_cache_create(3 * (uint64_t)page, 16);
    CHECK_EQ_INT(put(c, file_id(1, 1), 10), 0); /* each costs a page */
    CHECK_EQ_INT(put(c, file_id(2, 1), 10), 0);
    CHECK_EQ_INT(put(c, file_id(3, 1), 10), 0);
    CHECK(has(c, file_id(1, 1))); /* 1 is now the most recent; 2 the least */
    CHECK_EQ_INT(put(c, file_id(4, 1), 10), 0);
    CHECK(!has(c, file_id(2, 1)));
    CHECK(has(c, file_id(1, 1)));
    CHECK(has(c, file_id(3, 1)));
    CHECK(has(c, file_id(4, 1)));
    struct gzip_cache_stats st;
    gzip_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.bytes, 3 * page);
    CHECK_EQ_INT(st.evictions, 1);
    gzip_cache_destroy(c);
}

TEST(cache_counts_whole_pages)
{
    long page = sysconf(_SC_PAGESIZE);
    struct gzip_cache *c = gzip_cache_create(1 << 20, 16);
    CHECK_EQ_INT(put(c, file_id(1, 1), (size_t)page + 1), 0);
    struct gzip_cache_stats st;
    gzip_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.bytes, 2 * page);
    gzip_cache_destroy(c);
}

TEST(cache_keeps_at_most_max_entries_descriptors)
{
    struct gzip_cache *c = gzip_cache_create(1 << 20, 2);
    CHECK_EQ_INT(put(c, file_id(1, 1), 10), 0);
    CHECK_EQ_INT(put(c, file_id(2, 1), 10), 0);
    CHECK_EQ_INT(put(c, file_id(3, 1), 10), 0);
    CHECK(!has(c, file_id(1, 1)));
    struct gzip_cache_stats st;
    gzip_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.entries, 2);
    gzip_cache_destroy(c);
}

TEST(cache_does_not_keep_a_variant_larger_than_itself)
{
    long page = sysconf(_SC_PAGESIZE);
    struct gzip_cache *c = gzip_cache_create((uint64_t)page, 16);
    CHECK_EQ_INT(put(c, file_id(1, 1), 10), 0);
    CHECK_EQ_INT(put(c, file_id(2, 1), (size_t)page * 2), 0);
    CHECK(!has(c, file_id(2, 1)));
    CHECK(has(c, file_id(1, 1))); /* and evicted nothing for it */
    gzip_cache_destroy(c);
}

TEST(cache_an_evicted_variant_stays_readable_through_its_duplicate)
{
    struct gzip_cache *c = gzip_cache_create(1 << 20, 1);
    struct gzip_file_id id = file_id(1, 1);
    int fd;
    uint64_t len;
    struct gzip_cache_entry *e;
    CHECK_EQ_INT(gzip_cache_get(c, &id, &fd, &len, &e), GZIP_CACHE_MISS);
    int m = memfd_create("v", MFD_CLOEXEC);
    CHECK_EQ_INT(write(m, "hello", 5), 5);
    gzip_cache_fill(c, e, m, 5);
    close(m);
    CHECK_EQ_INT(gzip_cache_get(c, &id, &fd, &len, &e), GZIP_CACHE_HIT);
    CHECK_EQ_INT(put(c, file_id(2, 1), 10), 0); /* evicts id 1 */
    CHECK(!has(c, id));
    char buf[6] = {0};
    CHECK_EQ_INT(pread(fd, buf, 5, 0), 5);
    CHECK(strcmp(buf, "hello") == 0);
    close(fd);
    gzip_cache_destroy(c);
}

TEST(cache_abandoned_miss_leaves_nothing)
{
    struct gzip_cache *c = gzip_cache_create(1 << 20, 16);
    CHECK(!has(c, file_id(1, 1)));
    CHECK(!has(c, file_id(1, 1))); /* a miss again, not a wait on a ghost */
    struct gzip_cache_stats st;
    gzip_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.entries, 0);
    CHECK_EQ_INT(st.misses, 2);
    gzip_cache_destroy(c);
}

TEST(cache_another_version_in_progress_is_bypassed)
{
    struct gzip_cache *c = gzip_cache_create(1 << 20, 16);
    struct gzip_file_id v1 = file_id(1, 1), v2 = file_id(1, 2);
    int fd;
    uint64_t len;
    struct gzip_cache_entry *e1, *e2;
    CHECK_EQ_INT(gzip_cache_get(c, &v1, &fd, &len, &e1), GZIP_CACHE_MISS);
    CHECK_EQ_INT(gzip_cache_get(c, &v2, &fd, &len, &e2), GZIP_CACHE_BYPASS);
    CHECK(e2 == NULL);
    gzip_cache_abandon(c, e1);
    gzip_cache_destroy(c);
}

/* A thread asking for a version another is making is told so at once; it never waits. */
struct asker {
    struct gzip_cache *c;
    struct gzip_file_id id;
    enum gzip_cache_result res;
};

static void *ask(void *arg)
{
    struct asker *a = arg;
    int fd;
    uint64_t len;
    struct gzip_cache_entry *e;
    a->res = gzip_cache_get(a->c, &a->id, &fd, &len, &e);
    return NULL;
}

TEST(cache_a_version_being_made_is_busy_and_not_waited_for)
{
    struct gzip_cache *c = gzip_cache_create(1 << 20, 16);
    struct asker a = {.c = c, .id = file_id(5, 1), .res = GZIP_CACHE_HIT};
    int fd;
    uint64_t len;
    struct gzip_cache_entry *e;
    CHECK_EQ_INT(gzip_cache_get(c, &a.id, &fd, &len, &e), GZIP_CACHE_MISS);
    pthread_t t;
    pthread_create(&t, NULL, ask, &a);
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += 5;
    bool answered = pthread_timedjoin_np(t, NULL, &limit) == 0;
    CHECK(answered); /* a wait would last until the fill below */
    int m = memfd_of(100);
    gzip_cache_fill(c, e, m, 100);
    close(m);
    if (!answered)
        pthread_join(t, NULL);
    CHECK_EQ_INT(a.res, GZIP_CACHE_BUSY);
    struct gzip_cache_stats st;
    gzip_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.busy, 1);
    CHECK(has(c, a.id)); /* and once made, it is there for everyone */
    gzip_cache_destroy(c);
}

/* Many threads ask for one file at once: one compresses, the others are told it is busy
 * until it is ready, then share it. */
struct race {
    struct gzip_cache *c;
    pthread_mutex_t lock;
    int compressions;
    int hits;
    int busy;
};

static void *racer(void *arg)
{
    struct race *r = arg;
    struct gzip_file_id id = file_id(42, 1);
    for (int i = 0; i < 200; i++) {
        int fd;
        uint64_t len;
        struct gzip_cache_entry *e;
        enum gzip_cache_result res = gzip_cache_get(r->c, &id, &fd, &len, &e);
        if (res == GZIP_CACHE_MISS) {
            usleep(2000); /* "compressing" while the others ask */
            int m = memfd_of(100);
            gzip_cache_fill(r->c, e, m, 100);
            close(m);
            pthread_mutex_lock(&r->lock);
            r->compressions++;
            pthread_mutex_unlock(&r->lock);
        } else if (res == GZIP_CACHE_HIT) {
            close(fd);
            pthread_mutex_lock(&r->lock);
            r->hits++;
            pthread_mutex_unlock(&r->lock);
        } else if (res == GZIP_CACHE_BUSY) {
            pthread_mutex_lock(&r->lock);
            r->busy++;
            pthread_mutex_unlock(&r->lock);
        }
    }
    return NULL;
}

TEST(cache_a_hot_file_is_compressed_once_by_many_threads)
{
    struct race r = {.c = gzip_cache_create(1 << 20, 16), .lock = PTHREAD_MUTEX_INITIALIZER};
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, racer, &r);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_INT(r.compressions, 1);
    CHECK_EQ_INT(r.hits + r.busy, 8 * 200 - 1);
    gzip_cache_destroy(r.c);
}

/* --- the gate ----------------------------------------------------------------------------- */

#define MS 1000000ll /* nanoseconds */
#define SEC 1000000000ll

TEST(gate_refuses_past_max_running_until_one_leaves)
{
    struct gzip_gate *g = gzip_gate_create(2, 0, 0);
    CHECK_EQ_INT(gzip_gate_enter(g, 0), GZIP_GATE_OPEN);
    CHECK_EQ_INT(gzip_gate_enter(g, 0), GZIP_GATE_OPEN);
    CHECK_EQ_INT(gzip_gate_enter(g, 0), GZIP_GATE_BUSY);
    gzip_gate_leave(g, 5 * MS);
    CHECK_EQ_INT(gzip_gate_enter(g, 0), GZIP_GATE_OPEN);
    struct gzip_gate_stats st;
    gzip_gate_get_stats(g, &st);
    CHECK_EQ_INT(st.running, 2);
    CHECK_EQ_INT(st.busy, 1);
    gzip_gate_destroy(g);
}

TEST(gate_without_budget_is_never_spent)
{
    struct gzip_gate *g = gzip_gate_create(1, 0, 0);
    for (int i = 0; i < 100; i++) {
        CHECK_EQ_INT(gzip_gate_enter(g, 0), GZIP_GATE_OPEN);
        gzip_gate_leave(g, 10 * SEC);
    }
    gzip_gate_destroy(g);
}

TEST(gate_overrun_budget_refuses_until_repaid)
{
    struct gzip_gate *g = gzip_gate_create(8, 10 * MS, 0); /* 10 ms of CPU a second */
    CHECK_EQ_INT(gzip_gate_enter(g, 0), GZIP_GATE_OPEN);
    gzip_gate_leave(g, 30 * MS); /* 20 ms owed: two seconds of budget */
    CHECK_EQ_INT(gzip_gate_enter(g, 1 * SEC), GZIP_GATE_SPENT);
    CHECK_EQ_INT(gzip_gate_enter(g, 2 * SEC), GZIP_GATE_SPENT); /* back to 0: not above */
    CHECK_EQ_INT(gzip_gate_enter(g, 2 * SEC + 100 * MS), GZIP_GATE_OPEN);
    gzip_gate_destroy(g);
}

TEST(gate_budget_saves_up_at_most_one_second)
{
    struct gzip_gate *g = gzip_gate_create(8, 10 * MS, 0);
    CHECK_EQ_INT(gzip_gate_enter(g, 100 * SEC), GZIP_GATE_OPEN); /* idle a long time */
    gzip_gate_leave(g, 10 * MS);
    CHECK_EQ_INT(gzip_gate_enter(g, 100 * SEC), GZIP_GATE_SPENT);
    struct gzip_gate_stats st;
    gzip_gate_get_stats(g, &st);
    CHECK_EQ_INT(st.credit_ns, 0);
    CHECK_EQ_INT(st.spent, 1);
    gzip_gate_destroy(g);
}
