/* test.h — a minimal unit-test harness: TEST(name) { ... CHECK(expr); ... }.
 *
 * Each test registers itself before main (a constructor), runs in order of definition,
 * and the runner prints one line per failure and the closing line
 * "N passed, N failed". The exit status is 1 if anything failed.
 * Run one test with: ./test_x name_of_test
 */
#ifndef LFHTTPD_TEST_H
#define LFHTTPD_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct test_case {
    const char *name;
    void (*fn)(void);
};

#define TEST_MAX 1024
extern struct test_case test_cases[TEST_MAX];
extern int test_count;
extern int test_failed_now;

#define TEST(name)                                                                             \
    static void test_##name(void);                                                             \
    __attribute__((constructor)) static void register_##name(void)                             \
    {                                                                                          \
        if (test_count < TEST_MAX)                                                             \
            test_cases[test_count++] = (struct test_case){#name, test_##name};                 \
    }                                                                                          \
    static void test_##name(void)

#define CHECK(expr)                                                                            \
    do {                                                                                       \
        if (!(expr)) {                                                                         \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #expr);         \
            test_failed_now = 1;                                                               \
            return;                                                                            \
        }                                                                                      \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                     \
    do {                                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                                    \
        if (a_ != b_) {                                                                        \
            fprintf(stderr, "  %s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__,  \
                    #a, a_, #b, b_);                                                           \
            test_failed_now = 1;                                                               \
            return;                                                                            \
        }                                                                                      \
    } while (0)

/* Compare a (pointer, length) slice with a C string. */
#define CHECK_SLICE(s, str)                                                                    \
    do {                                                                                       \
        size_t l_ = strlen(str);                                                               \
        if ((s).len != l_ || memcmp((s).p, (str), l_) != 0) {                                  \
            fprintf(stderr, "  %s:%d: %s is \"%.*s\", expected \"%s\"\n", __FILE__, __LINE__,  \
                    #s, (int)(s).len, (s).p ? (s).p : "", str);                                \
            test_failed_now = 1;                                                               \
            return;                                                                            \
        }                                                                                      \
    } while (0)

#ifdef TEST_MAIN
struct test_case test_cases[TEST_MAX];
int test_count;
int test_failed_now;

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    for (int i = 0; i < test_count; i++) {
        if (argc > 1 && strcmp(argv[1], test_cases[i].name) != 0)
            continue;
        test_failed_now = 0;
        test_cases[i].fn();
        if (test_failed_now) {
            fprintf(stderr, "FAIL %s\n", test_cases[i].name);
            failed++;
        } else {
            passed++;
        }
    }
    printf("%s: %d passed, %d failed\n", argv[0], passed, failed);
    return failed ? 1 : 0;
}
#endif

#endif
