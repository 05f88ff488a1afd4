/* mod_dirlist.h — the parts of mod_dirlist that need no directory, for its unit tests:
 * the figures of a listing, the order of its entries and its breadcrumbs. The module
 * itself is `mod_dirlist` in module_chain.c's table.
 */
#ifndef LFHTTPD_MOD_DIRLIST_H
#define LFHTTPD_MOD_DIRLIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "strbuf.h"

/* One entry of a listing. */
struct dl_entry {
    const char *name; /* NUL-terminated, in the list's names buffer */
    size_t name_off;  /* where in that buffer, while it may still move */
    size_t name_len;
    bool is_dir;
    uint64_t size_bytes; /* 0 for directories */
    int64_t mtime_s;
};

/* "512 B", "1.5 KiB", "23 MiB": three significant figures at most. */
void dirlist_human_size(uint64_t n, char out[16]);
/* "2024-05-01T12:34:56Z" (UTC) */
void dirlist_iso_time(int64_t t, char out[32]);
/* qsort's order of entries: directories first, then files; each in byte order of names. */
int dirlist_entry_cmp(const void *a, const void *b);
/* "Index of /a/b/" with each step a link, relative ("../../", "../", "./"). */
void dirlist_render_crumbs(struct strbuf *b, const char *path, size_t len);
/* May a listing of the directory version with this ctime, read from `now` (the real-time
 * clock) on, be kept? Only if the version is over a second old: a change within the same
 * timestamp tick would not change the key (see mod_dirlist.c). */
bool dirlist_version_settled(const struct timespec *ctime, const struct timespec *now);

#endif
