/* Unit tests of the open-file cache: lookups, references, CLOCK eviction, the inactivity
 * sweep, staleness, and many threads at once. Times are passed in, so nothing sleeps. */
#define TEST_MAIN
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_cache.h"

#define VALID_MS 1000
#define INACTIVE_MS 60000

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static unsigned open_fds(void)
{
    unsigned n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* A new entry for key on a descriptor of /dev/null: the cache owns the descriptor. */
static struct file_cache_entry *entry(const char *key)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        abort();
    struct file_cache_entry *e = file_cache_entry_new(key, strlen(key), fd, &st);
    if (!e)
        abort();
    return e;
}

/* Insert a new entry for key at now_ms, keeping no reference to it. */
static void add(struct file_cache *c, const char *key, int64_t now_ms)
{
    struct file_cache_entry *e = entry(key);
    file_cache_insert(c, e, now_ms);
    file_cache_put(e);
}

/* Is key in the cache (looked up at now_ms, which counts as a use)? */
static bool has(struct file_cache *c, const char *key, int64_t now_ms)
{
    struct file_cache_entry *e;
    if (file_cache_get(c, key, strlen(key), now_ms, &e) == FILE_CACHE_MISS)
        return false;
    file_cache_put(e);
    return true;
}

TEST(unknown_key_is_a_miss)
{
    struct file_cache *c = file_cache_create(8, VALID_MS, INACTIVE_MS);
    struct file_cache_entry *e = NULL;
    CHECK_EQ_INT(file_cache_get(c, "a.txt", 5, 1000, &e), FILE_CACHE_MISS);
    CHECK(e == NULL);
    file_cache_destroy(c);
}

TEST(inserted_entry_is_a_hit_with_its_descriptor_and_data)
{
    struct file_cache *c = file_cache_create(8, VALID_MS, INACTIVE_MS);
    struct file_cache_entry *e = entry("dir/a.txt");
    e->type = "text/plain";
    e->variant = 3;
    int fd = e->fd;
    file_cache_insert(c, e, 1000);
    file_cache_put(e);
    struct file_cache_entry *got;
    CHECK_EQ_INT(file_cache_get(c, "dir/a.txt", 9, 1500, &got), FILE_CACHE_HIT);
    CHECK(got == e && got->fd == fd && strcmp(got->type, "text/plain") == 0);
    CHECK_EQ_INT(got->variant, 3);
    file_cache_put(got);
    CHECK_EQ_INT(file_cache_get(c, "dir/a.tx", 8, 1500, &got), FILE_CACHE_MISS);
    CHECK_EQ_INT(file_cache_get(c, "dir/a.txt2", 10, 1500, &got), FILE_CACHE_MISS);
    file_cache_destroy(c);
    CHECK(!fd_open(fd));
}

TEST(entry_is_expired_once_valid_ms_have_passed_and_a_hit_again_once_validated)
{
    struct file_cache *c = file_cache_create(8, VALID_MS, INACTIVE_MS);
    add(c, "a", 1000);
    struct file_cache_entry *e;
    CHECK_EQ_INT(file_cache_get(c, "a", 1, 1000 + VALID_MS - 1, &e), FILE_CACHE_HIT);
    file_cache_put(e);
    CHECK_EQ_INT(file_cache_get(c, "a", 1, 1000 + VALID_MS, &e), FILE_CACHE_EXPIRED);
    file_cache_validated(e, 1000 + VALID_MS);
    file_cache_put(e);
    CHECK_EQ_INT(file_cache_get(c, "a", 1, 1000 + VALID_MS + 1, &e), FILE_CACHE_HIT);
    file_cache_put(e);
    file_cache_destroy(c);
}

TEST(zero_validity_makes_every_lookup_expired)
{
    struct file_cache *c = file_cache_create(8, 0, INACTIVE_MS);
    add(c, "a", 1000);
    struct file_cache_entry *e;
    CHECK_EQ_INT(file_cache_get(c, "a", 1, 1000, &e), FILE_CACHE_EXPIRED);
    file_cache_put(e);
    file_cache_destroy(c);
}

TEST(removed_entry_is_a_miss_but_lives_while_referenced)
{
    struct file_cache *c = file_cache_create(8, VALID_MS, INACTIVE_MS);
    add(c, "a", 1000);
    struct file_cache_entry *e;
    CHECK_EQ_INT(file_cache_get(c, "a", 1, 3000, &e), FILE_CACHE_EXPIRED);
    file_cache_remove(c, e);
    file_cache_remove(c, e); /* a second thread finding it stale too: nothing more */
    CHECK(!has(c, "a", 3000));
    CHECK(fd_open(e->fd));
    int fd = e->fd;
    file_cache_put(e);
    CHECK(!fd_open(fd));
    struct file_cache_stats st;
    file_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.entries, 0);
    CHECK_EQ_INT(st.removed, 1);
    file_cache_destroy(c);
}

TEST(reference_keeps_an_evicted_entry_and_its_descriptor_alive)
{
    struct file_cache *c = file_cache_create(1, VALID_MS, INACTIVE_MS);
    struct file_cache_entry *a = entry("a");
    file_cache_insert(c, a, 1000); /* the test keeps its reference: a response sending it */
    add(c, "b", 1001);             /* the only slot: a is evicted */
    CHECK(!has(c, "a", 1002));
    CHECK(has(c, "b", 1002));
    CHECK(fd_open(a->fd));
    char buf[4];
    CHECK_EQ_INT(pread(a->fd, buf, sizeof(buf), 0), 0); /* /dev/null, still readable */
    int fd = a->fd;
    file_cache_put(a);
    CHECK(!fd_open(fd));
    file_cache_destroy(c);
}

TEST(full_cache_evicts_to_stay_at_max_entries)
{
    struct file_cache *c = file_cache_create(4, VALID_MS, INACTIVE_MS);
    unsigned fds0 = open_fds();
    const char *keys[] = {"a", "b", "c", "d", "e", "f", "g"};
    for (unsigned i = 0; i < 7; i++)
        add(c, keys[i], 1000 + i);
    struct file_cache_stats st;
    file_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.entries, 4);
    CHECK_EQ_INT(st.max_entries, 4);
    CHECK_EQ_INT(st.inserts, 7);
    CHECK_EQ_INT(st.evictions, 3);
    CHECK_EQ_INT(open_fds(), fds0 + 4); /* the evicted entries' descriptors are closed */
    unsigned present = 0;
    for (unsigned i = 0; i < 7; i++)
        present += has(c, keys[i], 2000);
    CHECK_EQ_INT(present, 4);
    CHECK(has(c, "g", 2000)); /* the newest is never the victim */
    file_cache_destroy(c);
    CHECK_EQ_INT(open_fds(), fds0);
}

TEST(entry_hit_since_the_hand_passed_survives_eviction)
{
    struct file_cache *c = file_cache_create(4, VALID_MS, INACTIVE_MS);
    add(c, "a", 1000);
    add(c, "b", 1000);
    add(c, "c", 1000);
    add(c, "d", 1000);
    add(c, "e", 1000); /* one full turn clears every bit; a goes */
    CHECK(!has(c, "a", 1001));
    CHECK(has(c, "b", 1001)); /* b is used again: its bit is set */
    add(c, "f", 1001);        /* the hand passes b, takes c */
    CHECK(has(c, "b", 1002));
    CHECK(!has(c, "c", 1002));
    CHECK(has(c, "d", 1002) && has(c, "e", 1002) && has(c, "f", 1002));
    file_cache_destroy(c);
}

TEST(inserting_the_same_key_replaces_the_entry)
{
    struct file_cache *c = file_cache_create(4, VALID_MS, INACTIVE_MS);
    struct file_cache_entry *old = entry("a");
    file_cache_insert(c, old, 1000);
    struct file_cache_entry *new = entry("a");
    file_cache_insert(c, new, 1001);
    struct file_cache_entry *e;
    CHECK_EQ_INT(file_cache_get(c, "a", 1, 1002, &e), FILE_CACHE_HIT);
    CHECK(e == new);
    file_cache_put(e);
    struct file_cache_stats st;
    file_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.entries, 1);
    CHECK(fd_open(old->fd)); /* still referenced by its first user */
    file_cache_put(old);
    file_cache_put(new);
    file_cache_destroy(c);
}

TEST(entries_unused_for_inactive_ms_are_dropped_by_a_later_lookup)
{
    struct file_cache *c = file_cache_create(8, VALID_MS, 5000);
    add(c, "old", 1000);
    add(c, "used", 1000);
    CHECK(has(c, "used", 4000));
    CHECK(has(c, "x", 6500) == false); /* a lookup of anything sweeps: old unused 5.5 s */
    struct file_cache_stats st;
    file_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.inactive, 1);
    CHECK_EQ_INT(st.entries, 1);
    CHECK(has(c, "used", 6500));
    CHECK(!has(c, "old", 6500));
    file_cache_destroy(c);
}

/* --- staleness of a real file --------------------------------------------------------- */

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char path[128];
    if (!tmpdir[0]) {
        strcpy(tmpdir, "/tmp/lfhttpd-file-cache-XXXXXX");
        if (!mkdtemp(tmpdir))
            abort();
    }
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    return path;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
}

/* An entry for the file at path, as mod_static makes one. */
static struct file_cache_entry *file_entry(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        abort();
    return file_cache_entry_new("k", 1, fd, &st);
}

TEST(same_file_holds_for_an_unchanged_file)
{
    const char *p = tmp_path("same");
    write_file(p, "hello");
    struct file_cache_entry *e = file_entry(p);
    struct stat st;
    CHECK(stat(p, &st) == 0);
    CHECK(file_cache_same_file(e, &st));
    file_cache_put(e);
}

TEST(same_file_fails_for_a_file_rewritten_with_another_size)
{
    const char *p = tmp_path("resized");
    write_file(p, "hello");
    struct file_cache_entry *e = file_entry(p);
    write_file(p, "hello, world");
    struct stat st;
    CHECK(stat(p, &st) == 0);
    CHECK(!file_cache_same_file(e, &st));
    file_cache_put(e);
}

TEST(same_file_fails_for_a_file_with_a_new_mtime)
{
    const char *p = tmp_path("touched");
    write_file(p, "hello");
    struct file_cache_entry *e = file_entry(p);
    struct timespec times[2] = {{0, UTIME_OMIT}, {e->st.st_mtim.tv_sec, 1}};
    if (e->st.st_mtim.tv_nsec == 1)
        times[1].tv_nsec = 2;
    CHECK(utimensat(AT_FDCWD, p, times, 0) == 0); /* same size, nanoseconds apart */
    struct stat st;
    CHECK(stat(p, &st) == 0);
    CHECK(!file_cache_same_file(e, &st));
    file_cache_put(e);
}

TEST(same_file_fails_for_a_file_replaced_by_rename)
{
    const char *p = tmp_path("replaced"), *q = tmp_path("replaced.new");
    char path[128];
    snprintf(path, sizeof(path), "%s", p);
    write_file(path, "hello");
    struct file_cache_entry *e = file_entry(path);
    write_file(q, "hello"); /* the same bytes, another inode */
    CHECK(rename(q, path) == 0);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK(!file_cache_same_file(e, &st));
    file_cache_put(e);
}

/* --- many threads --------------------------------------------------------------------- */

#define THREADS 4
#define ROUNDS 20000

struct worker {
    struct file_cache *c;
    unsigned seed;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    static const char *keys[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
    for (unsigned i = 0; i < ROUNDS; i++) {
        w->seed = w->seed * 1103515245u + 12345u;
        const char *key = keys[(w->seed >> 16) % 10];
        int64_t now = 1000 + i / 8; /* time goes on: entries expire now and then */
        struct file_cache_entry *e;
        enum file_cache_result r = file_cache_get(w->c, key, 1, now, &e);
        if (r == FILE_CACHE_MISS) {
            e = entry(key);
            file_cache_insert(w->c, e, now);
        } else if (r == FILE_CACHE_EXPIRED) {
            if ((w->seed >> 8) & 1) {
                file_cache_remove(w->c, e);
            } else {
                file_cache_validated(e, now);
            }
        }
        char b;
        if (pread(e->fd, &b, 1, 0) != 0 || strcmp(e->key, key) != 0)
            abort();
        file_cache_put(e);
    }
    return NULL;
}

TEST(threads_hitting_inserting_and_removing_at_once_leak_no_descriptor)
{
    unsigned fds0 = open_fds();
    struct file_cache *c = file_cache_create(6, 20, 200); /* fewer slots than keys */
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (struct worker){c, i + 1};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    struct file_cache_stats st;
    file_cache_get_stats(c, &st);
    CHECK(st.entries <= 6);
    CHECK(st.evictions > 0);
    file_cache_destroy(c);
    CHECK_EQ_INT(open_fds(), fds0);
}

/* --- an eviction that finds no victim --------------------------------------------------- */

struct hitter {
    struct file_cache *c;
    const char *key;
    atomic_bool stop;
};

/* Hit key again and again: its CLOCK bit is set again as soon as the hand clears it. */
static void *hit(void *arg)
{
    struct hitter *h = arg;
    while (!atomic_load(&h->stop)) {
        struct file_cache_entry *e;
        if (file_cache_get(h->c, h->key, 1, 1000, &e) != FILE_CACHE_MISS)
            file_cache_put(e);
    }
    return NULL;
}

TEST(insert_into_a_table_whose_entries_are_all_hit_again_serves_uncached)
{
    unsigned fds0 = open_fds();
    struct file_cache *c = file_cache_create(1, VALID_MS, INACTIVE_MS);
    struct hitter h[2] = {{c, "a", false}, {c, "b", false}};
    pthread_t t[2];
    for (unsigned i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, hit, &h[i]);
    unsigned refused = 0;
    for (unsigned i = 0; i < 400000 && refused == 0; i++) {
        struct file_cache_entry *e = entry(i % 2 ? "b" : "a");
        if (!file_cache_insert(c, e, 1000)) {
            refused++;
            CHECK(pread(e->fd, &(char){0}, 1, 0) == 0); /* still the caller's to serve */
        }
        file_cache_put(e);
    }
    for (unsigned i = 0; i < 2; i++) {
        atomic_store(&h[i].stop, true);
        pthread_join(t[i], NULL);
    }
    struct file_cache_stats st;
    file_cache_get_stats(c, &st);
    CHECK(st.entries <= 1);
    file_cache_destroy(c);
    CHECK_EQ_INT(open_fds(), fds0); /* a refused entry's descriptor closed with its put */
}
