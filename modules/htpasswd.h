/* htpasswd.h — the user files of Apache's `htpasswd` (apache2-utils), for mod_auth.
 *
 * A file is read whole at load (start, reload, `lfhttpd -t`) into a table of users, and is
 * never read again while the configuration lives: a changed file takes effect at the next
 * reload. One line per user, `NAME:HASH` (a third field, `:COMMENT`, is ignored, as nginx
 * does); blank lines and lines whose first non-blank byte is '#' are skipped; a CRLF line
 * end is accepted. The hashes accepted are those libxcrypt verifies and `htpasswd` makes
 * safely:
 *   $2y$ (also $2a$, $2b$)  bcrypt                  htpasswd -B
 *   $5$                     SHA-256 crypt            htpasswd -2
 *   $6$                     SHA-512 crypt            htpasswd -5
 * Every other kind is refused at load with FILE:LINE: Apache's MD5 ($apr1$, htpasswd's
 * default!), {SHA} (unsalted SHA-1), traditional DES crypt and plain text are either weak or
 * guessable from the file, and a server that quietly accepts them is a server whose
 * password file is as good as public. Two lines for one user are an error too: which of
 * them would count is a guess.
 */
#ifndef LFHTTPD_HTPASSWD_H
#define LFHTTPD_HTPASSWD_H

#include <stdbool.h>
#include <stddef.h>

#define HTPASSWD_LINE_MAX 1024  /* a longer line is an error */
#define HTPASSWD_USERS_MAX 100000
#define HTPASSWD_SECRET_MAX 512 /* the longest user:password a request may carry */

struct htpasswd; /* read-only after htpasswd_load: shared by every thread */

/* Read the file at path. Returns the table, or NULL with "PATH:LINE: message" (or
 * "PATH: message") in err: unreadable, empty (no user at all), a malformed line, a hash
 * kind refused, a user listed twice. */
struct htpasswd *htpasswd_load(const char *path, char *err, size_t err_len);
void htpasswd_free(struct htpasswd *h);

/* How many users the table holds. */
size_t htpasswd_count(const struct htpasswd *h);

enum htpasswd_result {
    HTPASSWD_OK = 0,        /* the user exists and the password is theirs */
    HTPASSWD_NO_USER = 1,   /* no such user */
    HTPASSWD_MISMATCH = 2,  /* the user exists, the password is wrong */
    HTPASSWD_FAILED = -1,   /* could not verify (out of memory): answer 500 */
};

/* Check user's password (neither NUL-terminated; a NUL byte never matches). Costs one
 * hash computation whether the user exists or not (an unknown user is hashed against a
 * stand-in), so that the time taken does not tell which names exist. */
enum htpasswd_result htpasswd_check(const struct htpasswd *h, const char *user, size_t user_len,
                                    const char *pass, size_t pass_len);

#endif
