/* mod_auth.h — access control: `allow`/`deny` by client address, then HTTP Basic
 * authentication (RFC 7617) against an htpasswd file, as nginx's access and auth_basic
 * modules do.
 *
 *   allow ADDR|CIDR|all;         deny ADDR|CIDR|all;
 *       IPv4 or IPv6; the rules are checked in file order and the first that matches the
 *       client decides: deny is 403, allow goes on to authentication. No rule matches: go on.
 *   auth_basic "REALM"|off;      auth_basic_user_file PATH;
 *       Without valid credentials: 401 with `WWW-Authenticate: Basic realm="REALM",
 *       charset="UTF-8"`. The realm is escaped (\" and \\) and may hold no control byte,
 *       so that it cannot break the header line.
 *
 *   satisfy all|any;
 *       all: both the rules and the password must let the request on; any: either does (an
 *       `allow` rule that matches, or a valid password), as nginx's access phase: with
 *       neither, 401 when a password is asked for, else 403.
 *
 * The settings are one struct (struct auth_settings) read from one block's statements by
 * conf_read_owned with auth_directives, so that any block (the top level today; a server
 * or a location) can hold its own: read, merged with the outer block's as nginx merges
 * (rules, realm and file each inherited when the block does not set them), loaded (the
 * user file is read), then asked with auth_check() for each request. A loaded struct is
 * read-only, and shared by every thread; its credential cache has its own lock.
 */
#ifndef LFHTTPD_MOD_AUTH_H
#define LFHTTPD_MOD_AUTH_H

#include <stdbool.h>

#include "config.h"
#include "directive.h"
#include "htpasswd.h"
#include "module.h"
#include "vars.h"

#define AUTH_RULES_MAX 64
#define AUTH_REALM_MAX 256
#define AUTH_CACHE_TTL_S 60 /* how long a verified credential is remembered */

struct auth_rule {
    struct config_cidr cidr; /* unused when all */
    bool all;                /* `all`: every client */
    bool allow;              /* allow, or deny */
    unsigned line;
};

struct auth_cache;

enum { AUTH_SATISFY_ALL = 0, AUTH_SATISFY_ANY = 1 };

struct auth_settings {
    /* Read from the block (auth_directives) */
    struct auth_rule rules[AUTH_RULES_MAX]; /* allow and deny, in file order */
    unsigned n_rules;
    bool basic_set;                  /* auth_basic given (a realm, or off) */
    bool basic_off;                  /* auth_basic off */
    char realm[AUTH_REALM_MAX];      /* as written; escaped into challenge */
    unsigned basic_line;
    char user_file[CONFIG_PATH_MAX]; /* "" when not given */
    unsigned user_file_line;
    /* A user file named with variables (`$arg_f`): read at each request, as nginx reads
     * it, and not at load; NULL for a plain path. Owned by the block that sets it. */
    struct vars_value *user_file_var;
    bool owns_user_file_var;
    bool basic_on; /* auth_basic asks for credentials here (made by auth_settings_load) */
    int satisfy;                     /* `satisfy`: AUTH_SATISFY_ALL or _ANY; -1 unset */
    /* Made by auth_settings_load */
    struct htpasswd *users;      /* NULL: no authentication here */
    struct auth_cache *cache;
    char challenge[2 * AUTH_REALM_MAX + 48]; /* the WWW-Authenticate value */
};

/* The directives, for conf_read_owned (base: a struct auth_settings; ctx: unused). */
extern const struct conf_directive auth_directives[];

/* Settings that say nothing: no rule, no authentication. */
void auth_settings_init(struct auth_settings *s);

/* Fill what s does not set from outer (nginx's merge). Before auth_settings_load. */
void auth_settings_merge(struct auth_settings *s, const struct auth_settings *outer);

/* Read the user file and prepare the answer, for settings read (and merged). conf_file
 * names the configuration for messages. Returns 0, or -1 with "CONF:LINE: message" in err;
 * an auth_basic REALM without a user file is an error (nginx would quietly not ask). What
 * the user file's load noticed (htpasswd_load's warn: weak or malformed hashes, skipped
 * lines) goes to warn (may be NULL), "PATH:LINE: message" a line. */
int auth_settings_load(struct auth_settings *s, const char *conf_file, char *err,
                       size_t err_len, char *warn, size_t warn_len);
void auth_settings_free(struct auth_settings *s);

/* The access decision for one request: MOD_DECLINED (go on), or MOD_HANDLED with a 403,
 * 401 or 400 (two Authorization fields) filled in, or MOD_ERROR. */
enum mod_result auth_check(const struct auth_settings *s, const struct request *req,
                           struct response *resp);

/* Decode standard base64 (RFC 4648 section 4) strictly: the alphabet, length a multiple
 * of 4, '=' only as the padding. Returns the decoded length, or -1. Exposed for tests. */
long auth_base64_decode(const char *in, size_t len, unsigned char *out, size_t cap);

#endif
