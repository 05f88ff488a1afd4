/* Unit tests of http_params: query parameters and weighted lists (q-values). */
#define TEST_MAIN
#include "test.h"

#include "http_params.h"

static bool query_has(const char *q, const char *name, const char *value)
{
    return http_query_has((struct http_slice){q, strlen(q)}, name, value);
}

TEST(query_parameter_anywhere_in_the_query)
{
    CHECK(query_has("format=json", "format", "json"));
    CHECK(query_has("a=1&format=json&b", "format", "json"));
    CHECK(query_has("x=1&format=html", "format", "html"));
}

TEST(query_parameter_must_match_exactly)
{
    CHECK(!query_has("", "format", "json"));
    CHECK(!query_has("format=jsonx", "format", "json"));
    CHECK(!query_has("format=jsonp", "format", "json"));
    CHECK(!query_has("xformat=json", "format", "json"));
    CHECK(!query_has("format=html", "format", "json"));
    CHECK(!query_has("format", "format", "json"));
    CHECK(!http_query_has((struct http_slice){NULL, 0}, "format", "json")); /* no query */
}

TEST(qvalues_in_thousandths)
{
    CHECK_EQ_INT(http_qvalue_parse("0.5", 3), 500);
    CHECK_EQ_INT(http_qvalue_parse("1", 1), 1000);
    CHECK_EQ_INT(http_qvalue_parse("1.000", 5), 1000);
    CHECK_EQ_INT(http_qvalue_parse("0.125", 5), 125);
    CHECK_EQ_INT(http_qvalue_parse("0", 1), 0);
}

TEST(qvalues_that_are_not_qvalues)
{
    CHECK_EQ_INT(http_qvalue_parse("", 0), -1);
    CHECK_EQ_INT(http_qvalue_parse("1.5", 3), -1);
    CHECK_EQ_INT(http_qvalue_parse("0.0001", 6), -1); /* three decimals at most */
    CHECK_EQ_INT(http_qvalue_parse("2", 1), -1);
    CHECK_EQ_INT(http_qvalue_parse("abc", 3), -1);
    CHECK_EQ_INT(http_qvalue_parse("-1", 2), -1);
}

/* The list's elements as "value=q" joined with spaces. */
static void qlist(const char *v, char *out, size_t cap)
{
    const char *p = v, *end = v + strlen(v);
    struct http_qitem it;
    size_t n = 0;
    out[0] = '\0';
    while (http_qlist_next(&p, end, &it) && n < cap)
        n += (size_t)snprintf(out + n, cap - n, "%s%.*s=%d", n ? " " : "", (int)it.value.len,
                              it.value.p, it.q);
}

static bool qlist_is(const char *v, const char *want)
{
    char got[256];
    qlist(v, got, sizeof(got));
    if (strcmp(got, want) != 0)
        fprintf(stderr, "  \"%s\": got \"%s\", want \"%s\"\n", v, got, want);
    return strcmp(got, want) == 0;
}

TEST(qlist_reads_tokens_and_media_ranges_with_their_weights)
{
    CHECK(qlist_is("gzip", "gzip=1000"));
    CHECK(qlist_is("gzip;q=0.5, br", "gzip=500 br=1000"));
    CHECK(qlist_is("text/html,application/json;q=0.9,*/*;q=0.8",
                   "text/html=1000 application/json=900 */*=800"));
    CHECK(qlist_is("application/json ; charset=utf-8", "application/json=1000"));
    CHECK(qlist_is("  a ,\tb ; Q=0.7 ,  ", "a=1000 b=700"));
    CHECK(qlist_is(",,a,,", "a=1000"));
    CHECK(qlist_is("", ""));
}

TEST(qlist_skips_malformed_elements)
{
    CHECK(qlist_is("a;q=2, b", "b=1000"));
    CHECK(qlist_is("@@@, b", "b=1000"));
    CHECK(qlist_is("a;q=0 junk, b;q=0", "b=0"));
    CHECK(qlist_is("a;x=\"abc", ""));
    CHECK(qlist_is("text/, b", "b=1000"));
    CHECK(qlist_is("a;q=, b", "b=1000"));
}

TEST(qlist_quoted_parameters_may_hold_commas)
{
    CHECK(qlist_is("a;x=\"b,c;q=0\";q=0.3, d", "a=300 d=1000"));
}
