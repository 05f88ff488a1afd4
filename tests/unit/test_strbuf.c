/* Unit tests of strbuf: the growable buffer and its HTML, JSON and URL escapers. */
#define TEST_MAIN
#include "test.h"

#include <stdint.h>

#include "strbuf.h"

/* Run an escaper over s and compare with want. */
static bool escapes_to(void (*fn)(struct strbuf *, const char *, size_t), const char *s,
                       size_t n, const char *want)
{
    struct strbuf b = STRBUF_INIT(1 << 20);
    fn(&b, s, n);
    bool ok = !b.failed && b.len == strlen(want) && memcmp(b.p, want, b.len) == 0;
    if (!ok)
        fprintf(stderr, "  got \"%.*s\", want \"%s\"\n", (int)b.len, b.p ? b.p : "", want);
    free(b.p);
    return ok;
}
#define ESC(fn, lit, want) escapes_to(fn, lit, sizeof(lit) - 1, want)

TEST(utf8_seq_len_accepts_well_formed_sequences)
{
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"a", 1), 1);
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xC3\xA9", 2), 2);         /* é */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xE6\x97\xA5", 3), 3);     /* 日 */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xF0\x9F\x98\x80", 4), 4); /* 😀 */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xF4\x8F\xBF\xBF", 4), 4); /* U+10FFFF */
}

TEST(utf8_seq_len_rejects_malformed_sequences)
{
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xFF", 1), 0);
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\x80", 1), 0);             /* lone tail */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xC3", 1), 0);             /* cut short */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xC0\xAF", 2), 0);         /* overlong */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xE0\x80\xAF", 3), 0);     /* overlong */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xED\xA0\x80", 3), 0);     /* surrogate */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xF4\x90\x80\x80", 4), 0); /* > U+10FFFF */
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xE6\x97", 2), 0);
    CHECK_EQ_INT(utf8_seq_len((const unsigned char *)"\xE6\x41\xA5", 3), 0);
}

TEST(html_escape_markup_characters)
{
    CHECK(ESC(strbuf_html, "<img src=x onerror=alert(1)>",
              "&lt;img src=x onerror=alert(1)&gt;"));
    CHECK(ESC(strbuf_html, "a&b \"q\" 'a'", "a&amp;b &quot;q&quot; &#39;a&#39;"));
    CHECK(ESC(strbuf_html, "plain.txt", "plain.txt"));
}

TEST(html_escape_keeps_utf8_and_replaces_the_rest)
{
    CHECK(ESC(strbuf_html, "caf\xC3\xA9", "caf\xC3\xA9"));
    CHECK(ESC(strbuf_html, "bad\xFF\xFE", "bad\xEF\xBF\xBD\xEF\xBF\xBD"));
    CHECK(ESC(strbuf_html, "new\nline\x7F", "new\xEF\xBF\xBDline\xEF\xBF\xBD"));
}

TEST(url_path_encodes_everything_but_unreserved_and_slash)
{
    CHECK(ESC(strbuf_url_path, "a-b_c.d~e/F9", "a-b_c.d~e/F9"));
    CHECK(ESC(strbuf_url_path, "with space #?%&", "with%20space%20%23%3F%25%26"));
    CHECK(ESC(strbuf_url_path, "caf\xC3\xA9\xFF", "caf%C3%A9%FF"));
    CHECK(ESC(strbuf_url_path, "javascript:x", "javascript%3Ax"));
    CHECK(ESC(strbuf_url_path, "<\"'>", "%3C%22%27%3E"));
}

TEST(prometheus_label_escapes_backslash_quote_and_newline)
{
    CHECK(ESC(strbuf_prom_label, "a.test", "\"a.test\""));
    CHECK(ESC(strbuf_prom_label, "say \"hi\"\\\n", "\"say \\\"hi\\\"\\\\\\n\""));
}

TEST(json_string_escapes_quotes_backslash_and_controls)
{
    CHECK(ESC(strbuf_json, "a\"b\\c", "\"a\\\"b\\\\c\""));
    CHECK(ESC(strbuf_json, "\n\t\x01\x1F", "\"\\u000a\\u0009\\u0001\\u001f\""));
    CHECK(ESC(strbuf_json, "\x7F", "\"\x7F\""));
    CHECK(ESC(strbuf_json, "", "\"\""));
}

TEST(json_string_passes_utf8_and_replaces_invalid_bytes)
{
    CHECK(ESC(strbuf_json, "\xE6\x97\xA5", "\"\xE6\x97\xA5\""));
    CHECK(ESC(strbuf_json, "x\xFFy\xC3", "\"x\\ufffdy\\ufffd\""));
    CHECK(ESC(strbuf_json, "\xED\xA0\x80", "\"\\ufffd\\ufffd\\ufffd\""));
}

TEST(buffer_stops_at_its_limit)
{
    struct strbuf b = STRBUF_INIT(64);
    strbuf_puts(&b, "0123456789");
    CHECK(!b.failed);
    CHECK(!strbuf_reserve(&b, 64 - 9));
    CHECK(b.failed);
    strbuf_puts(&b, "x"); /* nothing more is added once failed */
    CHECK_EQ_INT(b.len, 10);
    free(b.p);
}

TEST(buffer_grows_past_its_first_allocation)
{
    struct strbuf b = STRBUF_INIT(1 << 20);
    for (int i = 0; i < 10000; i++)
        strbuf_puts(&b, "0123456789");
    CHECK(!b.failed);
    CHECK_EQ_INT(b.len, 100000);
    CHECK(memcmp(b.p + 99990, "0123456789", 10) == 0);
    free(b.p);
}

TEST(printf_longer_than_a_line_is_whole)
{
    char big[1000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    struct strbuf b = STRBUF_INIT(1 << 20);
    strbuf_printf(&b, "<%s>%d", big, 42);
    CHECK(!b.failed);
    CHECK_EQ_INT(b.len, 999 + 4);
    CHECK(b.p[0] == '<' && b.p[1000] == '>' && memcmp(b.p + 1001, "42", 2) == 0);
    free(b.p);
}

TEST(printf_past_the_limit_fails)
{
    struct strbuf b = STRBUF_INIT(8);
    strbuf_printf(&b, "%s", "123456789");
    CHECK(b.failed);
    CHECK_EQ_INT(b.len, 0);
    free(b.p);
}
