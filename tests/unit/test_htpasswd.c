/* Unit tests of htpasswd files (modules/htpasswd.c) and of mod_auth's strict base64.
 *
 * The files are made by Apache's own `htpasswd` (apache2-utils, one of the test tools
 * `make check-deps` installs), so that what is tested is what users will feed the server.
 * bcrypt at cost 4, its lowest, to keep the tests quick. The fixed vectors were made by
 * real tools too, as each says: `openssl passwd` (OpenSSL 3.0) and Python's hashlib. */
#define TEST_MAIN
#include "test.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "htpasswd.h"
#include "mod_auth.h"

static char dir[64];
static char path[128];
static char err[1024];
static char warn[4096];

static const char *tmpdir(void)
{
    if (!dir[0]) {
        strcpy(dir, "/tmp/lfhttpd-htpasswd-XXXXXX");
        if (!mkdtemp(dir))
            abort();
    }
    return dir;
}

/* A new file made by htpasswd: `flags` (-B -C 4, -2, -5, -m...) for user and password. */
static const char *made_by_htpasswd(const char *name, const char *flags, const char *user,
                                    const char *pass)
{
    snprintf(path, sizeof(path), "%s/%s", tmpdir(), name);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "htpasswd -c -b %s '%s' '%s' '%s' 2>/dev/null", flags, path,
             user, pass);
    if (system(cmd) != 0)
        abort();
    return path;
}

/* A file with this text. */
static const char *written(const char *name, const char *text)
{
    snprintf(path, sizeof(path), "%s/%s", tmpdir(), name);
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
    return path;
}

/* The hash line htpasswd makes (no file): "user:hash" without the line end. */
static void hash_line(const char *flags, const char *user, const char *pass, char *out,
                      size_t len)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "htpasswd -n -b %s '%s' '%s' 2>/dev/null", flags, user, pass);
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(out, (int)len, p))
        abort();
    pclose(p);
    out[strcspn(out, "\r\n")] = '\0';
}

static enum htpasswd_result check(const struct htpasswd *h, const char *user, const char *pass)
{
    return htpasswd_check(h, user, strlen(user), pass, strlen(pass));
}

static bool refused_at(const char *file, unsigned line)
{
    struct htpasswd *h = htpasswd_load(file, err, sizeof(err), warn, sizeof(warn));
    htpasswd_free(h);
    char want[160];
    snprintf(want, sizeof(want), "%s:%u: ", file, line);
    return h == NULL && strncmp(err, want, strlen(want)) == 0;
}

/* Load file; its warnings in warn. */
static struct htpasswd *load(const char *file)
{
    return htpasswd_load(file, err, sizeof(err), warn, sizeof(warn));
}

/* A file of one line "user:hash" loaded: the user's password checked. */
static enum htpasswd_result check_one(const char *user, const char *hash, const char *pass)
{
    char text[512];
    snprintf(text, sizeof(text), "%s:%s\n", user, hash);
    struct htpasswd *h = load(written("one", text));
    if (!h)
        return HTPASSWD_FAILED;
    enum htpasswd_result r = check(h, user, pass);
    htpasswd_free(h);
    return r;
}

/* Does warn hold a line beginning "FILE:LINE: " that holds each of the words? */
static bool warned_at(const char *file, unsigned line, const char *word, const char *word2)
{
    char want[160];
    snprintf(want, sizeof(want), "%s:%u: ", file, line);
    for (const char *p = warn; *p;) {
        size_t n = strcspn(p, "\n");
        char one[1024];
        snprintf(one, sizeof(one), "%.*s", (int)n, p);
        if (strncmp(one, want, strlen(want)) == 0 && strstr(one, word) &&
            (!word2 || strstr(one, word2)))
            return true;
        p += n + (p[n] == '\n');
    }
    return false;
}

static unsigned warn_lines(void)
{
    unsigned n = 0;
    for (const char *p = warn; *p; p++)
        n += *p == '\n';
    return n;
}

TEST(bcrypt_password_verifies)
{
    struct htpasswd *h = load(made_by_htpasswd("b", "-B -C 4", "alice", "secret"));
    CHECK(h);
    CHECK(check(h, "alice", "secret") == HTPASSWD_OK);
    htpasswd_free(h);
}

TEST(bcrypt_wrong_password_is_a_mismatch)
{
    struct htpasswd *h = load(made_by_htpasswd("b", "-B -C 4", "alice", "secret"));
    CHECK(h);
    CHECK(check(h, "alice", "Secret") == HTPASSWD_MISMATCH);
    CHECK(check(h, "alice", "") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(sha256_crypt_password_verifies)
{
    struct htpasswd *h = load(made_by_htpasswd("s2", "-2", "bob", "hunter2"));
    CHECK(h);
    CHECK(check(h, "bob", "hunter2") == HTPASSWD_OK);
    CHECK(check(h, "bob", "hunter3") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(sha512_crypt_password_verifies)
{
    struct htpasswd *h = load(made_by_htpasswd("s5", "-5", "carol", "pa:ss word"));
    CHECK(h);
    CHECK(check(h, "carol", "pa:ss word") == HTPASSWD_OK);
    CHECK(check(h, "carol", "pa:ss") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(unknown_user_is_no_user)
{
    struct htpasswd *h = load(made_by_htpasswd("b", "-B -C 4", "alice", "secret"));
    CHECK(h);
    CHECK(check(h, "mallory", "secret") == HTPASSWD_NO_USER);
    CHECK(check(h, "Alice", "secret") == HTPASSWD_NO_USER);
    htpasswd_free(h);
}

TEST(password_with_a_nul_byte_never_matches)
{
    struct htpasswd *h = load(made_by_htpasswd("b", "-B -C 4", "alice", "secret"));
    CHECK(h);
    CHECK(htpasswd_check(h, "alice", 5, "secret\0x", 8) != HTPASSWD_OK);
    htpasswd_free(h);
}

TEST(comments_blank_lines_crlf_and_comment_field_are_accepted)
{
    char a[256], b[256], text[1024];
    hash_line("-B -C 4", "alice", "secret", a, sizeof(a));
    hash_line("-5", "bob", "hunter2", b, sizeof(b));
    snprintf(text, sizeof(text), "# staff\n\n   # indented comment\n%s\r\n%s:Bob Smith\n", a,
             b);
    struct htpasswd *h = load(written("mixed", text));
    CHECK(h);
    CHECK(htpasswd_count(h) == 2);
    CHECK(check(h, "alice", "secret") == HTPASSWD_OK);
    CHECK(check(h, "bob", "hunter2") == HTPASSWD_OK);
    htpasswd_free(h);
}

TEST(strong_hashes_load_without_a_warning)
{
    char a[256], b[256], text[1024];
    hash_line("-B -C 4", "alice", "secret", a, sizeof(a));
    hash_line("-5", "bob", "hunter2", b, sizeof(b));
    snprintf(text, sizeof(text), "%s\n%s\n", a, b);
    struct htpasswd *h = load(written("strong", text));
    CHECK(h);
    CHECK(warn[0] == '\0');
    htpasswd_free(h);
}

/* --- the weak kinds nginx takes: verified, and warned about ---------------------------- */

TEST(apache_md5_made_by_htpasswd_verifies)
{
    struct htpasswd *h = load(made_by_htpasswd("m", "-m", "dave", "pa:ss word"));
    CHECK(h);
    CHECK(check(h, "dave", "pa:ss word") == HTPASSWD_OK);
    CHECK(check(h, "dave", "pa:ss Word") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(apache_md5_made_by_openssl_verifies)
{
    /* openssl passwd -apr1 -salt saltsalt password */
    CHECK(check_one("u", "$apr1$saltsalt$yAAkm4libquA.ZWLHbSBq/", "password") == HTPASSWD_OK);
    CHECK(check_one("u", "$apr1$saltsalt$yAAkm4libquA.ZWLHbSBq/", "passwore") ==
          HTPASSWD_MISMATCH);
    /* openssl passwd -apr1 -salt ab 'a much longer password, over sixteen bytes' */
    CHECK(check_one("u", "$apr1$ab$BssM3aYvOQ9eneAScCPa40",
                    "a much longer password, over sixteen bytes") == HTPASSWD_OK);
    /* openssl passwd -apr1 -salt xyz '' */
    CHECK(check_one("u", "$apr1$xyz$Pix4eE3fQHxJjb6LqtyMK1", "") == HTPASSWD_OK);
    CHECK(check_one("u", "$apr1$xyz$Pix4eE3fQHxJjb6LqtyMK1", "x") == HTPASSWD_MISMATCH);
}

TEST(md5_crypt_made_by_openssl_verifies)
{
    /* openssl passwd -1 -salt saltsalt password */
    CHECK(check_one("u", "$1$saltsalt$qjXMvbEw8oaL.CzflDtaK/", "password") == HTPASSWD_OK);
    CHECK(check_one("u", "$1$saltsalt$qjXMvbEw8oaL.CzflDtaK/", "Password") ==
          HTPASSWD_MISMATCH);
}

TEST(des_crypt_made_by_htpasswd_verifies)
{
    struct htpasswd *h = load(made_by_htpasswd("d", "-d", "frank", "secret"));
    CHECK(h);
    CHECK(check(h, "frank", "secret") == HTPASSWD_OK);
    CHECK(check(h, "frank", "secreT") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(unsalted_sha1_made_by_htpasswd_verifies)
{
    struct htpasswd *h = load(made_by_htpasswd("s", "-s", "erin", "secret"));
    CHECK(h);
    CHECK(check(h, "erin", "secret") == HTPASSWD_OK);
    CHECK(check(h, "erin", "secret ") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(salted_sha1_made_by_hashlib_verifies)
{
    /* salt b"\x01\x02salty\xff": "{SSHA}" + base64(sha1(b"secret" + salt).digest() + salt) */
    const char *ssha = "{SSHA}ZxL1aTmQ97x/b+ot1ikpcFLjCcwBAnNhbHR5/w==";
    CHECK(check_one("u", ssha, "secret") == HTPASSWD_OK);
    CHECK(check_one("u", ssha, "secreT") == HTPASSWD_MISMATCH);
}

TEST(plain_prefix_verifies_the_text_after_it)
{
    CHECK(check_one("u", "{PLAIN}open sesame", "open sesame") == HTPASSWD_OK);
    CHECK(check_one("u", "{PLAIN}open sesame", "open sesam") == HTPASSWD_MISMATCH);
    CHECK(check_one("u", "{PLAIN}open sesame", "open sesame!") == HTPASSWD_MISMATCH);
}

TEST(weak_hash_is_warned_naming_file_line_user_and_kind)
{
    char a[256], m[256], text[1024];
    hash_line("-B -C 4", "alice", "secret", a, sizeof(a));
    hash_line("-m", "dave", "x", m, sizeof(m));
    snprintf(text, sizeof(text), "# users\n%s\n%s\n", a, m);
    const char *file = written("apr1", text);
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(warned_at(file, 3, "user 'dave'", "Apache MD5 ($apr1$)"));
    CHECK(strstr(warn, "htpasswd -B"));
    CHECK(warn_lines() == 1);
    htpasswd_free(h);
}

TEST(each_weak_kind_is_named)
{
    const char *file = written("kinds", "a:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n"
                                        "b:{SSHA}ZxL1aTmQ97x/b+ot1ikpcFLjCcwBAnNhbHR5/w==\n"
                                        "c:{PLAIN}x\n"
                                        "d:BpM2ej8Rkzogo\n"
                                        "e:$1$saltsalt$qjXMvbEw8oaL.CzflDtaK/\n");
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(warned_at(file, 1, "user 'a'", "{SHA} (unsalted SHA-1)"));
    CHECK(warned_at(file, 2, "user 'b'", "{SSHA} (salted SHA-1)"));
    CHECK(warned_at(file, 3, "user 'c'", "{PLAIN} (plain text)"));
    CHECK(warned_at(file, 4, "user 'd'", "DES crypt"));
    CHECK(warned_at(file, 5, "user 'e'", "MD5-crypt ($1$)"));
    CHECK(warn_lines() == 5);
    htpasswd_free(h);
}

TEST(many_weak_hashes_of_a_kind_make_one_line)
{
    const char *file = written("many", "a:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n"
                                       "b:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n"
                                       "c:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n");
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(warn_lines() == 1);
    CHECK(warned_at(file, 1, "user 'a'", "2 more lines"));
    htpasswd_free(h);
}

/* --- what nginx takes and never matches -------------------------------------------------- */

TEST(malformed_hashes_load_and_never_match)
{
    CHECK(check_one("u", "$apr1$", "") == HTPASSWD_MISMATCH);
    CHECK(check_one("u", "$apr1$salt$Xxd1irWT9ycqoYxGFn4c", "password") == HTPASSWD_MISMATCH);
    CHECK(check_one("u", "$1$", "") == HTPASSWD_MISMATCH);
    CHECK(check_one("u", "{SSHA}_____wQadOA1e+/f+T+H3eCQQhRzYWx0", "password") ==
          HTPASSWD_MISMATCH);
    CHECK(check_one("u", "{SSHA}Zm9vCg==", "foo\n") == HTPASSWD_MISMATCH);
    CHECK(check_one("u", "{SHA}Zm9vCg==", "") == HTPASSWD_MISMATCH);
    CHECK(check_one("u", "", "") == HTPASSWD_MISMATCH);
}

TEST(malformed_hash_is_warned_without_showing_it)
{
    const char *file = written("bad", "# x\nbob:$apr1$\ncarol:{SSHA}!!!!\n");
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(htpasswd_count(h) == 2);
    CHECK(warned_at(file, 2, "user 'bob'", "malformed Apache MD5"));
    CHECK(warned_at(file, 2, "never matches", "1 more line of"));
    htpasswd_free(h);
}

TEST(plain_text_without_its_prefix_never_matches_and_is_warned)
{
    const char *file = made_by_htpasswd("p", "-p", "grace", "secret");
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(check(h, "grace", "secret") == HTPASSWD_MISMATCH);
    CHECK(warned_at(file, 1, "user 'grace'", "{PLAIN}"));
    CHECK(!strstr(warn, "secret"));
    htpasswd_free(h);
}

TEST(unknown_user_is_no_user_when_every_hash_is_malformed)
{
    struct htpasswd *h = load(written("allbad", "a:$1$\nb:{SHA}\n"));
    CHECK(h);
    CHECK(check(h, "c", "x") == HTPASSWD_NO_USER);
    CHECK(check(h, "a", "x") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(unknown_user_costs_a_sound_hash_not_a_malformed_one)
{
    /* The stand-in an unknown user is hashed against is the first user whose hash is not
     * malformed: "a" (sorted first, "$1$" alone, answered at once) would tell a name that
     * does not exist from one whose bcrypt takes milliseconds. */
    char b[256], text[512];
    hash_line("-B -C 10", "b", "secret", b, sizeof(b));
    snprintf(text, sizeof(text), "a:$1$\n%s\n", b);
    struct htpasswd *h = load(written("standin", text));
    CHECK(h);
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(check(h, "b", "wrong") == HTPASSWD_MISMATCH);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(check(h, "nobody", "wrong") == HTPASSWD_NO_USER);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    double known = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    double unknown = (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) / 1e9;
    CHECK(unknown > known / 4);
    htpasswd_free(h);
}

TEST(truncated_bcrypt_hash_never_matches)
{
    char a[256];
    hash_line("-B -C 4", "alice", "secret", a, sizeof(a));
    a[strlen(a) - 1] = '\0';
    strcat(a, "\n");
    const char *file = written("short", a);
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(check(h, "alice", "secret") == HTPASSWD_MISMATCH);
    CHECK(warned_at(file, 1, "user 'alice'", "malformed bcrypt"));
    htpasswd_free(h);
}

/* --- lines ----------------------------------------------------------------------------- */

TEST(user_listed_twice_counts_by_the_first_line_with_a_warning)
{
    char a[256], b[256], text[1024];
    hash_line("-B -C 4", "alice", "one", a, sizeof(a));
    hash_line("-5", "alice", "two", b, sizeof(b));
    snprintf(text, sizeof(text), "%s\n# again\n%s\n", a, b);
    const char *file = written("twice", text);
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(htpasswd_count(h) == 1);
    CHECK(check(h, "alice", "one") == HTPASSWD_OK);
    CHECK(check(h, "alice", "two") == HTPASSWD_MISMATCH);
    CHECK(warned_at(file, 3, "user 'alice' listed again", "line 1"));
    htpasswd_free(h);
}

TEST(user_listed_twice_counts_by_the_first_line_whatever_the_names_around)
{
    const char *file = written("twice2", "b:{PLAIN}1\nz:{PLAIN}z\na:{PLAIN}a\nb:{PLAIN}2\n"
                                         "b:{PLAIN}3\n");
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(htpasswd_count(h) == 3);
    CHECK(check(h, "b", "1") == HTPASSWD_OK);
    CHECK(check(h, "b", "2") == HTPASSWD_MISMATCH);
    CHECK(check(h, "b", "3") == HTPASSWD_MISMATCH);
    CHECK(check(h, "a", "a") == HTPASSWD_OK && check(h, "z", "z") == HTPASSWD_OK);
    htpasswd_free(h);
}

TEST(line_without_a_colon_is_skipped_with_a_warning)
{
    const char *file = written("nocolon", "# x\nalice\nbob:{PLAIN}b\n:{PLAIN}c\n");
    struct htpasswd *h = load(file);
    CHECK(h);
    CHECK(htpasswd_count(h) == 1);
    CHECK(check(h, "bob", "b") == HTPASSWD_OK);
    CHECK(check(h, "alice", "") == HTPASSWD_NO_USER);
    CHECK(warned_at(file, 2, "not NAME:HASH", "skipped"));
    CHECK(warned_at(file, 2, "1 more line of", NULL));
    htpasswd_free(h);
}

TEST(control_character_in_a_user_name_is_refused_with_file_and_line)
{
    CHECK(refused_at(written("ctl", "# x\na\001b:{PLAIN}x\n"), 2));
    CHECK(strstr(err, "control character"));
}

TEST(file_of_lines_without_a_colon_is_refused_as_having_no_user)
{
    CHECK(!load(written("nocolons", "alice\nbob\n")));
    CHECK(strstr(err, "no user"));
}

TEST(empty_file_is_refused)
{
    CHECK(!load(written("empty", "")));
    CHECK(strstr(err, "no user"));
    CHECK(!load(written("comments", "# nobody yet\n\n")));
    CHECK(strstr(err, "no user"));
}

TEST(missing_file_is_refused)
{
    snprintf(path, sizeof(path), "%s/none", tmpdir());
    CHECK(!load(path));
    CHECK(strstr(err, "cannot open"));
}

/* --- mod_auth's base64 ------------------------------------------------------------- */

static long decode(const char *s, char *out)
{
    long n = auth_base64_decode(s, strlen(s), (unsigned char *)out, 64);
    if (n >= 0)
        out[n] = '\0';
    return n;
}

TEST(base64_decodes_padded_groups)
{
    char out[65];
    CHECK(decode("YWxpY2U6c2VjcmV0", out) == 12 && strcmp(out, "alice:secret") == 0);
    CHECK(decode("YTpi", out) == 3 && strcmp(out, "a:b") == 0);
    CHECK(decode("YTo=", out) == 2 && strcmp(out, "a:") == 0);
    CHECK(decode("YQ==", out) == 1 && strcmp(out, "a") == 0);
}

TEST(base64_without_its_padding_is_refused)
{
    char out[65];
    CHECK(decode("YTo", out) == -1);
    CHECK(decode("YQ", out) == -1);
    CHECK(decode("", out) == -1);
}

TEST(base64_with_stray_characters_is_refused)
{
    char out[65];
    CHECK(decode("YWxp Y2U6", out) == -1);
    CHECK(decode("YW=pY2U6", out) == -1);
    CHECK(decode("YWxpY2U6c2VjcmV0====", out) == -1);
    CHECK(decode("YWx-Y2U_", out) == -1); /* the URL alphabet is not Basic's */
    CHECK(decode("Y===", out) == -1);
}

TEST(base64_with_bits_past_the_last_byte_is_refused)
{
    char out[65];
    CHECK(decode("YR==", out) == -1);
    CHECK(decode("YTp=", out) == -1);
}

TEST(base64_longer_than_the_buffer_is_refused)
{
    unsigned char out[3];
    CHECK(auth_base64_decode("YWxpY2U6", 8, out, sizeof(out)) == -1);
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (dir[0] && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

__attribute__((constructor)) static void at_exit_clean(void)
{
    atexit(remove_tmpdir);
}
