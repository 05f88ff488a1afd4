/* Unit tests of mod_dirlist's pure parts: escaping, encoding, figures, order.
 * The module's file is included (its statics are what is tested) under another name for
 * its module struct, since the real one is linked in too. */
#define TEST_MAIN
#include "test.h"

#define mod_dirlist mod_dirlist_under_test
#include "../../modules/mod_dirlist.c"
#undef mod_dirlist

/* Run an escaper over s and compare with want. */
static bool escapes_to(void (*fn)(struct dl_buf *, const char *, size_t), const char *s,
                       size_t n, const char *want)
{
    struct dl_buf b = {0};
    fn(&b, s, n);
    bool ok = !b.failed && b.len == strlen(want) && memcmp(b.p, want, b.len) == 0;
    if (!ok)
        fprintf(stderr, "  got \"%.*s\", want \"%s\"\n", (int)b.len, b.p ? b.p : "", want);
    free(b.p);
    return ok;
}
#define ESC(fn, lit, want) escapes_to(fn, lit, sizeof(lit) - 1, want)

TEST(utf8_len_accepts_well_formed_sequences)
{
    CHECK_EQ_INT(utf8_len((const unsigned char *)"a", 1), 1);
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xC3\xA9", 2), 2);           /* é */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xE6\x97\xA5", 3), 3);       /* 日 */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xF0\x9F\x98\x80", 4), 4);   /* 😀 */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xF4\x8F\xBF\xBF", 4), 4);   /* U+10FFFF */
}

TEST(utf8_len_rejects_malformed_sequences)
{
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xFF", 1), 0);
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\x80", 1), 0);             /* lone tail */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xC3", 1), 0);             /* cut short */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xC0\xAF", 2), 0);         /* overlong */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xE0\x80\xAF", 3), 0);     /* overlong */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xED\xA0\x80", 3), 0);     /* surrogate */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xF4\x90\x80\x80", 4), 0); /* > U+10FFFF */
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xE6\x97", 2), 0);
    CHECK_EQ_INT(utf8_len((const unsigned char *)"\xE6\x41\xA5", 3), 0);
}

TEST(html_escape_markup_characters)
{
    CHECK(ESC(html_escape, "<img src=x onerror=alert(1)>",
              "&lt;img src=x onerror=alert(1)&gt;"));
    CHECK(ESC(html_escape, "a&b \"q\" 'a'", "a&amp;b &quot;q&quot; &#39;a&#39;"));
    CHECK(ESC(html_escape, "plain.txt", "plain.txt"));
}

TEST(html_escape_keeps_utf8_and_replaces_the_rest)
{
    CHECK(ESC(html_escape, "caf\xC3\xA9", "caf\xC3\xA9"));
    CHECK(ESC(html_escape, "bad\xFF\xFE", "bad\xEF\xBF\xBD\xEF\xBF\xBD"));
    CHECK(ESC(html_escape, "new\nline\x7F", "new\xEF\xBF\xBDline\xEF\xBF\xBD"));
}

TEST(url_encode_everything_but_unreserved_and_slash)
{
    CHECK(ESC(url_encode, "a-b_c.d~e/F9", "a-b_c.d~e/F9"));
    CHECK(ESC(url_encode, "with space #?%&", "with%20space%20%23%3F%25%26"));
    CHECK(ESC(url_encode, "caf\xC3\xA9\xFF", "caf%C3%A9%FF"));
    CHECK(ESC(url_encode, "javascript:x", "javascript%3Ax"));
    CHECK(ESC(url_encode, "<\"'>", "%3C%22%27%3E"));
}

TEST(json_string_escapes_quotes_backslash_and_controls)
{
    CHECK(ESC(json_string, "a\"b\\c", "\"a\\\"b\\\\c\""));
    CHECK(ESC(json_string, "\n\t\x01\x1F", "\"\\u000a\\u0009\\u0001\\u001f\""));
    CHECK(ESC(json_string, "\x7F", "\"\x7F\""));
    CHECK(ESC(json_string, "", "\"\""));
}

TEST(json_string_passes_utf8_and_replaces_invalid_bytes)
{
    CHECK(ESC(json_string, "\xE6\x97\xA5", "\"\xE6\x97\xA5\""));
    CHECK(ESC(json_string, "x\xFFy\xC3", "\"x\\ufffdy\\ufffd\""));
    CHECK(ESC(json_string, "\xED\xA0\x80", "\"\\ufffd\\ufffd\\ufffd\""));
}

TEST(human_size_units)
{
    char out[16];
    human_size(0, out);
    CHECK(strcmp(out, "0 B") == 0);
    human_size(1023, out);
    CHECK(strcmp(out, "1023 B") == 0);
    human_size(1024, out);
    CHECK(strcmp(out, "1.0 KiB") == 0);
    human_size(1536, out);
    CHECK(strcmp(out, "1.5 KiB") == 0);
    human_size(150000, out);
    CHECK(strcmp(out, "146 KiB") == 0);
    human_size(1024 * 1024 - 1, out); /* not "1024 KiB" */
    CHECK(strcmp(out, "1.0 MiB") == 0);
    human_size(5ull << 30, out);
    CHECK(strcmp(out, "5.0 GiB") == 0);
    human_size(UINT64_MAX, out);
    CHECK(strcmp(out, "16 EiB") == 0);
}

TEST(iso_time_is_utc)
{
    char out[32];
    iso_time(0, out);
    CHECK(strcmp(out, "1970-01-01T00:00:00Z") == 0);
    iso_time(1700000000, out);
    CHECK(strcmp(out, "2023-11-14T22:13:20Z") == 0);
}

static bool json_query(const char *q)
{
    struct http_request h = {0};
    h.query = (struct http_slice){q, strlen(q)};
    h.has_query = true;
    return query_wants_json(&h);
}

TEST(query_format_json)
{
    CHECK(json_query("format=json"));
    CHECK(json_query("a=1&format=json&b"));
    CHECK(!json_query(""));
    CHECK(!json_query("format=jsonx"));
    CHECK(!json_query("xformat=json"));
    CHECK(!json_query("format=html"));
    struct http_request none = {0}; /* no query: a NULL slice */
    CHECK(!query_wants_json(&none));
}

TEST(entries_sort_directories_first_then_bytes)
{
    struct dl_entry v[] = {
        {.name = "b.txt"}, {.name = "Z", .is_dir = true}, {.name = "\xC3\xA9"},
        {.name = "B.txt"}, {.name = "a", .is_dir = true}, {.name = "a.txt"},
    };
    qsort(v, 6, sizeof(v[0]), entry_cmp);
    const char *want[] = {"Z", "a", "B.txt", "a.txt", "b.txt", "\xC3\xA9"};
    for (int i = 0; i < 6; i++)
        CHECK(strcmp(v[i].name, want[i]) == 0);
}

TEST(breadcrumbs_are_relative_links)
{
    struct dl_buf b = {0};
    render_crumbs(&b, "/", 1);
    const char *root = "<a href=\"./\">/</a>";
    CHECK(b.len == strlen(root) && memcmp(b.p, root, b.len) == 0);
    b.len = 0;
    render_crumbs(&b, "/a/<b>/", 7);
    const char *want = "<a href=\"../../\">/</a><a href=\"../\">a/</a>"
                       "<a href=\"./\">&lt;b&gt;/</a>";
    CHECK(b.len == strlen(want) && memcmp(b.p, want, b.len) == 0);
    free(b.p);
}

TEST(buffer_stops_at_its_limit)
{
    struct dl_buf b = {0};
    buf_puts(&b, "0123456789");
    CHECK(!b.failed);
    CHECK(!buf_reserve(&b, DIRLIST_BODY_MAX - 9));
    CHECK(b.failed);
    buf_puts(&b, "x"); /* nothing more is added once failed */
    CHECK_EQ_INT(b.len, 10);
    free(b.p);
}
