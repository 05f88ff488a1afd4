/* Unit tests of htpasswd files (modules/htpasswd.c) and of mod_auth's strict base64.
 *
 * The files are made by Apache's own `htpasswd` (apache2-utils, one of the test tools
 * `make check-deps` installs), so that what is tested is what users will feed the server.
 * bcrypt at cost 4, its lowest, to keep the tests quick. */
#define TEST_MAIN
#include "test.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "htpasswd.h"
#include "mod_auth.h"

static char dir[64];
static char path[128];
static char err[1024];

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
    struct htpasswd *h = htpasswd_load(file, err, sizeof(err));
    htpasswd_free(h);
    char want[160];
    snprintf(want, sizeof(want), "%s:%u: ", file, line);
    return h == NULL && strncmp(err, want, strlen(want)) == 0;
}

TEST(bcrypt_password_verifies)
{
    struct htpasswd *h = htpasswd_load(made_by_htpasswd("b", "-B -C 4", "alice", "secret"),
                                       err, sizeof(err));
    CHECK(h);
    CHECK(check(h, "alice", "secret") == HTPASSWD_OK);
    htpasswd_free(h);
}

TEST(bcrypt_wrong_password_is_a_mismatch)
{
    struct htpasswd *h = htpasswd_load(made_by_htpasswd("b", "-B -C 4", "alice", "secret"),
                                       err, sizeof(err));
    CHECK(h);
    CHECK(check(h, "alice", "Secret") == HTPASSWD_MISMATCH);
    CHECK(check(h, "alice", "") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(sha256_crypt_password_verifies)
{
    struct htpasswd *h = htpasswd_load(made_by_htpasswd("s2", "-2", "bob", "hunter2"), err,
                                       sizeof(err));
    CHECK(h);
    CHECK(check(h, "bob", "hunter2") == HTPASSWD_OK);
    CHECK(check(h, "bob", "hunter3") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(sha512_crypt_password_verifies)
{
    struct htpasswd *h = htpasswd_load(made_by_htpasswd("s5", "-5", "carol", "pa:ss word"),
                                       err, sizeof(err));
    CHECK(h);
    CHECK(check(h, "carol", "pa:ss word") == HTPASSWD_OK);
    CHECK(check(h, "carol", "pa:ss") == HTPASSWD_MISMATCH);
    htpasswd_free(h);
}

TEST(unknown_user_is_no_user)
{
    struct htpasswd *h = htpasswd_load(made_by_htpasswd("b", "-B -C 4", "alice", "secret"),
                                       err, sizeof(err));
    CHECK(h);
    CHECK(check(h, "mallory", "secret") == HTPASSWD_NO_USER);
    CHECK(check(h, "Alice", "secret") == HTPASSWD_NO_USER);
    htpasswd_free(h);
}

TEST(password_with_a_nul_byte_never_matches)
{
    struct htpasswd *h = htpasswd_load(made_by_htpasswd("b", "-B -C 4", "alice", "secret"),
                                       err, sizeof(err));
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
    struct htpasswd *h = htpasswd_load(written("mixed", text), err, sizeof(err));
    CHECK(h);
    CHECK(htpasswd_count(h) == 2);
    CHECK(check(h, "alice", "secret") == HTPASSWD_OK);
    CHECK(check(h, "bob", "hunter2") == HTPASSWD_OK);
    htpasswd_free(h);
}

TEST(apache_md5_is_refused_with_file_and_line)
{
    char a[256], m[256], text[1024];
    hash_line("-B -C 4", "alice", "secret", a, sizeof(a));
    hash_line("-m", "dave", "x", m, sizeof(m));
    snprintf(text, sizeof(text), "# users\n%s\n%s\n", a, m);
    CHECK(refused_at(written("apr1", text), 3));
    CHECK(strstr(err, "$apr1$"));
}

TEST(unsalted_sha1_is_refused)
{
    CHECK(refused_at(made_by_htpasswd("sha", "-s", "erin", "x"), 1));
    CHECK(strstr(err, "{SHA}"));
}

TEST(crypt_des_is_refused)
{
    CHECK(refused_at(made_by_htpasswd("des", "-d", "frank", "x"), 1));
}

TEST(plain_text_is_refused)
{
    CHECK(refused_at(written("plain", "grace:secret\n"), 1));
}

TEST(truncated_bcrypt_hash_is_refused)
{
    char a[256];
    hash_line("-B -C 4", "alice", "secret", a, sizeof(a));
    a[strlen(a) - 1] = '\0';
    strcat(a, "\n");
    CHECK(refused_at(written("short", a), 1));
}

TEST(user_listed_twice_is_refused_naming_both_lines)
{
    char a[256], b[256], text[1024];
    hash_line("-B -C 4", "alice", "one", a, sizeof(a));
    hash_line("-5", "alice", "two", b, sizeof(b));
    snprintf(text, sizeof(text), "%s\n# again\n%s\n", a, b);
    CHECK(refused_at(written("twice", text), 3));
    CHECK(strstr(err, "line 1"));
}

TEST(line_without_a_colon_is_refused)
{
    CHECK(refused_at(written("nocolon", "# x\nalice\n"), 2));
}

TEST(empty_file_is_refused)
{
    CHECK(!htpasswd_load(written("empty", ""), err, sizeof(err)));
    CHECK(strstr(err, "no user"));
    CHECK(!htpasswd_load(written("comments", "# nobody yet\n\n"), err, sizeof(err)));
    CHECK(strstr(err, "no user"));
}

TEST(missing_file_is_refused)
{
    snprintf(path, sizeof(path), "%s/none", tmpdir());
    CHECK(!htpasswd_load(path, err, sizeof(err)));
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
