/* Unit tests of mod_dirlist's pure parts: figures, order, breadcrumbs. (Its escaping is
 * strbuf's: test_strbuf.c; its query parameter http_params': test_http_params.c.) */
#define TEST_MAIN
#include "test.h"

#include <stdint.h>

#include "mod_dirlist.h"

TEST(human_size_units)
{
    char out[16];
    dirlist_human_size(0, out);
    CHECK(strcmp(out, "0 B") == 0);
    dirlist_human_size(1023, out);
    CHECK(strcmp(out, "1023 B") == 0);
    dirlist_human_size(1024, out);
    CHECK(strcmp(out, "1.0 KiB") == 0);
    dirlist_human_size(1536, out);
    CHECK(strcmp(out, "1.5 KiB") == 0);
    dirlist_human_size(150000, out);
    CHECK(strcmp(out, "146 KiB") == 0);
    dirlist_human_size(1024 * 1024 - 1, out); /* not "1024 KiB" */
    CHECK(strcmp(out, "1.0 MiB") == 0);
    dirlist_human_size(5ull << 30, out);
    CHECK(strcmp(out, "5.0 GiB") == 0);
    dirlist_human_size(UINT64_MAX, out);
    CHECK(strcmp(out, "16 EiB") == 0);
}

TEST(iso_time_is_utc)
{
    char out[32];
    dirlist_iso_time(0, out);
    CHECK(strcmp(out, "1970-01-01T00:00:00Z") == 0);
    dirlist_iso_time(1700000000, out);
    CHECK(strcmp(out, "2023-11-14T22:13:20Z") == 0);
}

TEST(entries_sort_directories_first_then_bytes)
{
    struct dl_entry v[] = {
        {.name = "b.txt"}, {.name = "Z", .is_dir = true}, {.name = "\xC3\xA9"},
        {.name = "B.txt"}, {.name = "a", .is_dir = true}, {.name = "a.txt"},
    };
    qsort(v, 6, sizeof(v[0]), dirlist_entry_cmp);
    const char *want[] = {"Z", "a", "B.txt", "a.txt", "b.txt", "\xC3\xA9"};
    for (int i = 0; i < 6; i++)
        CHECK(strcmp(v[i].name, want[i]) == 0);
}

TEST(breadcrumbs_are_relative_links)
{
    struct strbuf b = STRBUF_INIT(1 << 20);
    dirlist_render_crumbs(&b, "/", 1);
    const char *root = "<a href=\"./\">/</a>";
    CHECK(b.len == strlen(root) && memcmp(b.p, root, b.len) == 0);
    b.len = 0;
    dirlist_render_crumbs(&b, "/a/<b>/", 7);
    const char *want = "<a href=\"../../\">/</a><a href=\"../\">a/</a>"
                       "<a href=\"./\">&lt;b&gt;/</a>";
    CHECK(b.len == strlen(want) && memcmp(b.p, want, b.len) == 0);
    free(b.p);
}

TEST(a_version_younger_than_a_second_is_not_kept)
{
    struct timespec now = {.tv_sec = 1000, .tv_nsec = 500};
    struct timespec ctime = {.tv_sec = 999, .tv_nsec = 499};
    CHECK(dirlist_version_settled(&ctime, &now)); /* 1 s and 1 ns old */
    ctime.tv_nsec = 500;
    CHECK(!dirlist_version_settled(&ctime, &now)); /* exactly 1 s */
    ctime = (struct timespec){.tv_sec = 998, .tv_nsec = 999999999};
    CHECK(dirlist_version_settled(&ctime, &now));
    ctime = (struct timespec){.tv_sec = 1000, .tv_nsec = 0};
    CHECK(!dirlist_version_settled(&ctime, &now));
    ctime = (struct timespec){.tv_sec = 1001, .tv_nsec = 0}; /* a clock set back */
    CHECK(!dirlist_version_settled(&ctime, &now));
}
