/* htpasswd.h — the user files of Apache's `htpasswd` (apache2-utils), for mod_auth.
 *
 * A file is read whole at load (start, reload, `lfhttpd -t`) into a table of users, and is
 * never read again while the configuration lives: a changed file takes effect at the next
 * reload. One line per user, `NAME:HASH` (a third field, `:COMMENT`, is ignored, as nginx
 * does); blank lines and lines whose first non-blank byte is '#' are skipped; a CRLF line
 * end is accepted. The hashes are those nginx takes:
 *   $2y$ (also $2a$, $2b$)  bcrypt                  htpasswd -B
 *   $5$ $6$                 SHA-256/512 crypt        htpasswd -2 / -5
 *   $apr1$                  Apache MD5               htpasswd (its default), openssl passwd -apr1
 *   $1$                     MD5-crypt                openssl passwd -1
 *   13 characters           traditional DES crypt    htpasswd -d
 *   {SHA}                   base64 of SHA-1          htpasswd -s
 *   {SSHA}                  base64 of SHA-1(password salt), then the salt
 *   {PLAIN}                 the password itself
 * and any other method libxcrypt knows ($y$ yescrypt...). Every kind but bcrypt, SHA-crypt
 * and libxcrypt's sound methods is weak, or readable from the file: the load says so,
 * once a kind a file, naming the first line and the user. What nginx would take and never
 * match is taken, and never matches (401), with a word at load too: a malformed hash
 * (`$apr1$` alone, `{SSHA}` with bad base64, `$1$` alone). A line that is not NAME:HASH (no
 * ':', or an empty name) is skipped, as nginx skips it; a user listed again counts by
 * their first line, as in nginx; both are said at load.
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
 * "PATH: message") in err: unreadable, no user at all, a line too long, a control
 * character in a name. What the load noticed (see above) goes to warn (may be NULL), one
 * "PATH:LINE: message" a line, each ended by '\n'; "" when nothing. On NULL errno says
 * why: fopen's or the read's error, ENOMEM, or EINVAL for what the text holds. */
struct htpasswd *htpasswd_load(const char *path, char *err, size_t err_len, char *warn,
                               size_t warn_len);
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
 * stand-in, the first user whose hash is not malformed), so that the time taken does not
 * tell which names exist. */
enum htpasswd_result htpasswd_check(const struct htpasswd *h, const char *user, size_t user_len,
                                    const char *pass, size_t pass_len);

#endif
