/* mod_mime.c — the media type of a file: by its extension, else by its content.
 *
 * Extensions: one table built at init from three layers, a later layer winning over an
 * earlier one: the built-in defaults; the system's mime.types (`mime_types`), where a later
 * line also overrides an earlier one for the same extension, as Apache and nginx do; and
 * the few types browsers are strict about (a module script, a stylesheet in standards
 * mode, wasm for streaming compilation, fonts are all refused under a wrong type), so that
 * an old or odd mime.types cannot break a site. Extensions are matched without case.
 *
 * Content: a regular file whose extension is absent or unknown is sniffed by libmagic
 * (`mime_magic`) on its first MIME_SNIFF_BYTES, read with pread so the descriptor's offset
 * and state stay as the caller left them (magic_descriptor reads through the descriptor,
 * moving the shared offset while it works, and its man page promises nothing about it).
 * libmagic is slow and a handle must not be used by two threads at once:
 *   - handles live in a pool: a thread takes one, sniffs, gives it back. The pool grows
 *     to the number of threads that ever sniffed at the same time, and fini closes every
 *     handle. (A pool, not thread-local handles: nothing is left behind by threads that
 *     exit, and no handle outlives the state that opened it, however often init and fini
 *     run in one process.)
 *   - results are cached per file, keyed by (st_dev, st_ino) and valid while the mtime,
 *     nanoseconds included, and the size match: MIME_CACHE_SETS sets of MIME_CACHE_WAYS
 *     entries, round-robin eviction within a set. A set has a rwlock for lookups, and a
 *     mutex held by the thread sniffing for it, so that a new file asked for by many
 *     threads at once is sniffed once.
 *
 * Every string returned is interned (owned by the state, alive until fini) and already
 * carries "; charset=utf-8" when it is a text type: a lookup never allocates.
 */
#include <assert.h>
#include <errno.h>
#include <magic.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "module.h"

#define MIME_TYPES_DEFAULT "/etc/mime.types"
#define MIME_DEFAULT_TYPE "application/octet-stream"
#define NGINX_DEFAULT_TYPE "text/plain" /* nginx's default_type, for a file with http { } */
#define MIME_CHARSET "; charset=utf-8"
#define MIME_EXT_MAX 48           /* bytes, NUL included: longer extensions match nothing */
#define MIME_TYPE_MAX 160         /* bytes, NUL and charset included */
#define MIME_SNIFF_BYTES 8192     /* what libmagic sees of a file: every common signature */
#define MIME_CACHE_SETS 1024      /* times MIME_CACHE_WAYS: 4096 files remembered */
#define MIME_CACHE_WAYS 4
#define MIME_MAGIC_TYPES_MAX 1024 /* types libmagic may add to the table's: a bound */
#define MIME_CHARSET_NAME_MAX 40  /* bytes, NUL included */
#define MIME_CHARSET_TYPES_MAX 15 /* charset_types' words (text/html is added) */
#define MIME_CHARSET_TYPE_LEN 96  /* bytes, NUL included */

/* What a block (the top level, a server, a location) sets. */
struct mime_block {
    const char *default_type; /* interned: the state's */
    char charset[MIME_CHARSET_NAME_MAX]; /* "" off (a file with `http { }` only) */
    bool types_any;                      /* charset_types * */
    unsigned n_types;
    char types[MIME_CHARSET_TYPES_MAX + 1][MIME_CHARSET_TYPE_LEN]; /* charset_types */
};

static_assert((MIME_CACHE_SETS & (MIME_CACHE_SETS - 1)) == 0, "sets are indexed by a mask");

/* --- the built-in tables ------------------------------------------------------------- */

struct mime_builtin {
    const char *ext;
    const char *type; /* without charset: it is added by the same rule as for mime.types */
};

/* Used when mime.types is absent or off, and for what it does not list. */
static const struct mime_builtin mime_base[] = {
    {"txt", "text/plain"},
    {"md", "text/markdown"},
    {"csv", "text/csv"},
    {"vtt", "text/vtt"},
    {"ics", "text/calendar"},
    {"xml", "application/xml"},
    {"xhtml", "application/xhtml+xml"},
    {"jsonld", "application/ld+json"},
    {"png", "image/png"},
    {"apng", "image/apng"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"avif", "image/avif"},
    {"bmp", "image/bmp"},
    {"ico", "image/vnd.microsoft.icon"},
    {"tif", "image/tiff"},
    {"tiff", "image/tiff"},
    {"pdf", "application/pdf"},
    {"rtf", "application/rtf"},
    {"ttf", "font/ttf"},
    {"otf", "font/otf"},
    {"mp4", "video/mp4"},
    {"m4v", "video/mp4"},
    {"webm", "video/webm"},
    {"ogv", "video/ogg"},
    {"mov", "video/quicktime"},
    {"mpeg", "video/mpeg"},
    {"mp3", "audio/mpeg"},
    {"m4a", "audio/mp4"},
    {"ogg", "audio/ogg"},
    {"oga", "audio/ogg"},
    {"opus", "audio/ogg"},
    {"flac", "audio/flac"},
    {"wav", "audio/wav"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"tar", "application/x-tar"},
    {"bz2", "application/x-bzip2"},
    {"xz", "application/x-xz"},
    {"zst", "application/zstd"},
    {"7z", "application/x-7z-compressed"},
    {"m3u8", "application/vnd.apple.mpegurl"},
    {"mpd", "application/dash+xml"},
};

/* Win over mime.types: browsers refuse these under another type, or the file is known to
 * be wrong somewhere (an older Debian says application/javascript for js and lacks mjs
 * and wasm; this one lacks map and calls ts "Qt Linguist" where the web means MPEG-TS). */
static const struct mime_builtin mime_strict[] = {
    {"html", "text/html"},
    {"htm", "text/html"},
    {"css", "text/css"},
    {"js", "text/javascript"}, /* RFC 9239 */
    {"mjs", "text/javascript"},
    {"json", "application/json"},
    {"map", "application/json"}, /* source maps */
    {"webmanifest", "application/manifest+json"},
    {"svg", "image/svg+xml"},
    {"wasm", "application/wasm"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"ts", "video/mp2t"}, /* HLS segments */
};

/* --- interned strings: a set that owns them ------------------------------------------ */

struct str_set {
    char **slots; /* open addressing; NULL: free */
    size_t cap;   /* a power of two, or 0 */
    size_t n;
};

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static char **str_set_slot(char **slots, size_t cap, const char *s)
{
    size_t i = hash_bytes(s, strlen(s)) & (cap - 1);
    while (slots[i] && strcmp(slots[i], s) != 0)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static int str_set_grow(struct str_set *set)
{
    size_t cap = set->cap ? set->cap * 2 : 64;
    char **slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < set->cap; i++)
        if (set->slots[i])
            *str_set_slot(slots, cap, set->slots[i]) = set->slots[i];
    free(set->slots);
    set->slots = slots;
    set->cap = cap;
    return 0;
}

/* The set's copy of s, added if new; NULL when out of memory or the set holds limit. */
static const char *str_set_intern(struct str_set *set, const char *s, size_t limit)
{
    if (set->cap) {
        char **slot = str_set_slot(set->slots, set->cap, s);
        if (*slot)
            return *slot;
    }
    if (set->n >= limit)
        return NULL;
    if (2 * (set->n + 1) > set->cap && str_set_grow(set) < 0)
        return NULL;
    char **slot = str_set_slot(set->slots, set->cap, s);
    *slot = strdup(s);
    if (!*slot)
        return NULL;
    set->n++;
    return *slot;
}

static void str_set_free(struct str_set *set)
{
    for (size_t i = 0; i < set->cap; i++)
        free(set->slots[i]);
    free(set->slots);
    memset(set, 0, sizeof(*set));
}

/* --- the extension table ------------------------------------------------------------- */

struct ext_entry {
    char *ext;        /* lowercase; NULL: a free slot */
    const char *type; /* interned */
};

struct ext_table {
    struct ext_entry *slots; /* open addressing */
    size_t cap;              /* a power of two, or 0 */
    size_t n;
};

/* The extension of the last segment of path, lowercased into buf (MIME_EXT_MAX bytes).
 * False when there is none ("README", ".profile", "a.") or it is too long. */
static bool path_extension(const char *path, char *buf)
{
    if (!path)
        return false;
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name || !dot[1])
        return false;
    size_t len = strlen(dot + 1);
    if (len >= MIME_EXT_MAX)
        return false;
    for (size_t i = 0; i <= len; i++) {
        char c = dot[1 + i];
        buf[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    return true;
}

static struct ext_entry *ext_table_slot(struct ext_entry *slots, size_t cap, const char *ext)
{
    size_t i = hash_bytes(ext, strlen(ext)) & (cap - 1);
    while (slots[i].ext && strcmp(slots[i].ext, ext) != 0)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static const char *ext_table_get(const struct ext_table *t, const char *ext)
{
    if (!t->cap)
        return NULL;
    return ext_table_slot(t->slots, t->cap, ext)->type;
}

static int ext_table_grow(struct ext_table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 256;
    struct ext_entry *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].ext)
            *ext_table_slot(slots, cap, t->slots[i].ext) = t->slots[i];
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* Map ext (any case, an optional leading '.') to type, replacing an earlier mapping.
 * Returns 0, 1 if ext is not usable (skipped), or -ENOMEM. */
static int ext_table_set(struct ext_table *t, const char *ext, const char *type)
{
    if (ext[0] == '.')
        ext++;
    char lower[MIME_EXT_MAX];
    size_t len = strlen(ext);
    if (len == 0 || len >= sizeof(lower) || strchr(ext, '/'))
        return 1;
    for (size_t i = 0; i <= len; i++)
        lower[i] = (ext[i] >= 'A' && ext[i] <= 'Z') ? (char)(ext[i] - 'A' + 'a') : ext[i];
    if (2 * (t->n + 1) > t->cap && ext_table_grow(t) < 0)
        return -ENOMEM;
    struct ext_entry *e = ext_table_slot(t->slots, t->cap, lower);
    if (!e->ext) {
        e->ext = strdup(lower);
        if (!e->ext)
            return -ENOMEM;
        t->n++;
    }
    e->type = type;
    return 0;
}

static void ext_table_free(struct ext_table *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->slots[i].ext);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

/* --- media types ---------------------------------------------------------------------- */

static bool is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* RFC 9110 section 8.3.1: token "/" token, then, if params, "; ..." in visible ASCII,
 * spaces and tabs (nothing that could end a header line). */
static bool media_type_valid(const char *s, bool params)
{
    size_t i = 0;
    while (is_tchar(s[i]))
        i++;
    if (i == 0 || s[i] != '/')
        return false;
    size_t sub = ++i;
    while (is_tchar(s[i]))
        i++;
    if (i == sub)
        return false;
    if (!s[i])
        return i + sizeof(MIME_CHARSET) <= MIME_TYPE_MAX;
    if (!params)
        return false;
    for (size_t j = i; s[j]; j++)
        if ((s[j] < 0x20 && s[j] != '\t') || s[j] == 0x7f)
            return false;
    for (; s[i] == ' ' || s[i] == '\t'; i++)
        ;
    return s[i] == ';' && strlen(s) < MIME_TYPE_MAX;
}

/* Text a browser shows: what it decodes should be told the charset. application/json is
 * not here: RFC 8259 defines no charset parameter (JSON is UTF-8 by definition). */
static bool media_type_is_text(const char *type)
{
    return strncasecmp(type, "text/", 5) == 0 || strcasecmp(type, "application/javascript") == 0 ||
           strcasecmp(type, "application/x-javascript") == 0 ||
           strcasecmp(type, "application/ecmascript") == 0;
}

/* --- the state ----------------------------------------------------------------------- */

/* One libmagic handle, with the buffer a file's head is read into for it. */
struct magic_handle {
    magic_t cookie;
    struct magic_handle *next_idle;
    unsigned char buf[MIME_SNIFF_BYTES];
};

struct mime_cache_entry {
    dev_t dev; /* (dev, ino): the file */
    ino_t ino;
    struct timespec mtime; /* (mtime, size): the version sniffed */
    off_t size_bytes;
    const char *type; /* interned; NULL: an empty way */
};

struct mime_cache_set {
    alignas(64) pthread_rwlock_t lock; /* guards ways and victim */
    pthread_mutex_t sniffing;          /* held by the one thread sniffing for this set */
    struct mime_cache_entry ways[MIME_CACHE_WAYS];
    unsigned victim; /* the way replaced next when every way is taken */
};

struct mime_state {
    struct ext_table exts;        /* read-only after init */
    pthread_mutex_t types_lock;   /* guards types: libmagic answers are added at run time */
    struct str_set types;         /* every string content_type returns */
    size_t types_max;             /* how many types may hold: no bound during init */
    const char *default_type;     /* interned */
    unsigned index;               /* in the chain: for module_settings() */
    bool magic;                   /* mime_magic on */
    bool nginx;                   /* the file has nginx's `http { }`: types carry no charset, */
                                  /* the `charset` filter adds it as nginx's does */
    pthread_mutex_t pool_lock;    /* guards idle and n_handles */
    struct magic_handle *idle;    /* handles no thread is using */
    unsigned n_handles;           /* opened, idle or not */
    struct mime_cache_set *cache; /* MIME_CACHE_SETS sets, or NULL when magic is off */
};

/* The interned form of a media type, with the charset added to text types that carry no
 * parameter (not in a file with `http { }`: there the charset filter decides, per block).
 * NULL when out of memory, or types is full. */
static const char *mime_intern(struct mime_state *ms, const char *type)
{
    char buf[MIME_TYPE_MAX];
    bool add = !ms->nginx && !strchr(type, ';') && media_type_is_text(type);
    int n = snprintf(buf, sizeof(buf), "%s%s", type, add ? MIME_CHARSET : "");
    if (n < 0 || (size_t)n >= sizeof(buf))
        return NULL;
    pthread_mutex_lock(&ms->types_lock);
    const char *s = str_set_intern(&ms->types, buf, ms->types_max);
    pthread_mutex_unlock(&ms->types_lock);
    return s;
}

static int mime_add_builtins(struct mime_state *ms, const struct mime_builtin *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *type = mime_intern(ms, b[i].type);
        if (!type || ext_table_set(&ms->exts, b[i].ext, type) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* Read a mime.types file: "type ext ext ...", '#' comments. Lines whose type is not a
 * valid media type are skipped. Returns 0 or -ENOMEM. */
static int mime_load_types(struct mime_state *ms, FILE *f)
{
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        char *save;
        const char *tok = strtok_r(line, " \t\r\n", &save);
        if (!tok || tok[0] == '#' || !media_type_valid(tok, false))
            continue;
        const char *type = mime_intern(ms, tok);
        if (!type) {
            rc = -ENOMEM;
            break;
        }
        while ((tok = strtok_r(NULL, " \t\r\n", &save)) && tok[0] != '#')
            if (ext_table_set(&ms->exts, tok, type) < 0) {
                rc = -ENOMEM;
                break;
            }
    }
    free(line);
    return rc;
}

/* --- libmagic: the handle pool -------------------------------------------------------- */

static struct magic_handle *magic_handle_open(char *err, size_t err_len)
{
    struct magic_handle *h = malloc(sizeof(*h));
    if (!h) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    h->next_idle = NULL;
    h->cookie = magic_open(MAGIC_MIME_TYPE);
    if (!h->cookie) {
        snprintf(err, err_len, "magic_open: %s", strerror(errno));
        free(h);
        return NULL;
    }
    if (magic_load(h->cookie, NULL) < 0) {
        const char *e = magic_error(h->cookie);
        snprintf(err, err_len, "magic_load: %s", e ? e : "failed");
        magic_close(h->cookie);
        free(h);
        return NULL;
    }
    return h;
}

/* An idle handle, or a new one: NULL if none can be opened. Opening happens under the
 * pool's lock: it is rare (once per thread that sniffs at the same time as others), and
 * nothing then asks of libmagic's loader that it be reentrant. */
static struct magic_handle *magic_take(struct mime_state *ms)
{
    pthread_mutex_lock(&ms->pool_lock);
    struct magic_handle *h = ms->idle;
    if (h) {
        ms->idle = h->next_idle;
    } else {
        char err[256];
        h = magic_handle_open(err, sizeof(err));
        if (h)
            log_debug("mime: libmagic handle %u opened", ++ms->n_handles);
        else
            log_warn("mime: libmagic: %s", err);
    }
    pthread_mutex_unlock(&ms->pool_lock);
    return h;
}

static void magic_give(struct mime_state *ms, struct magic_handle *h)
{
    pthread_mutex_lock(&ms->pool_lock);
    h->next_idle = ms->idle;
    ms->idle = h;
    pthread_mutex_unlock(&ms->pool_lock);
}

/* --- libmagic: the per-file cache ----------------------------------------------------- */

static struct mime_cache_set *cache_set_of(const struct mime_state *ms, const struct stat *st)
{
    uint64_t h = (uint64_t)st->st_ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)st->st_dev;
    h ^= h >> 29;
    return &ms->cache[(h * 0xbf58476d1ce4e5b9ull >> 32) & (MIME_CACHE_SETS - 1)];
}

static bool cache_entry_is(const struct mime_cache_entry *e, const struct stat *st)
{
    return e->dev == st->st_dev && e->ino == st->st_ino;
}

static const char *cache_get(struct mime_cache_set *set, const struct stat *st)
{
    const char *type = NULL;
    pthread_rwlock_rdlock(&set->lock);
    for (unsigned i = 0; i < MIME_CACHE_WAYS; i++) {
        const struct mime_cache_entry *e = &set->ways[i];
        if (e->type && cache_entry_is(e, st) && e->size_bytes == st->st_size &&
            e->mtime.tv_sec == st->st_mtim.tv_sec && e->mtime.tv_nsec == st->st_mtim.tv_nsec) {
            type = e->type;
            break;
        }
    }
    pthread_rwlock_unlock(&set->lock);
    return type;
}

/* Remember type for this version of the file: in its own way if it has one (an older
 * version), else a free way, else the next victim. */
static void cache_put(struct mime_cache_set *set, const struct stat *st, const char *type)
{
    pthread_rwlock_wrlock(&set->lock);
    struct mime_cache_entry *e = NULL;
    for (unsigned i = 0; i < MIME_CACHE_WAYS && !e; i++)
        if (set->ways[i].type && cache_entry_is(&set->ways[i], st))
            e = &set->ways[i];
    for (unsigned i = 0; i < MIME_CACHE_WAYS && !e; i++)
        if (!set->ways[i].type)
            e = &set->ways[i];
    if (!e) {
        e = &set->ways[set->victim];
        set->victim = (set->victim + 1) % MIME_CACHE_WAYS;
    }
    *e = (struct mime_cache_entry){st->st_dev, st->st_ino, st->st_mtim, st->st_size, type};
    pthread_rwlock_unlock(&set->lock);
}

/* What libmagic says of the file's head, interned; default_type when it does not know.
 * NULL on a failure worth retrying later (a read error, no handle): not cached. */
static const char *mime_sniff(struct mime_state *ms, int fd, const struct stat *st)
{
    if (st->st_size == 0)
        return ms->default_type;
    struct magic_handle *h = magic_take(ms);
    if (!h)
        return NULL;
    ssize_t n;
    do
        n = pread(fd, h->buf, sizeof(h->buf), 0);
    while (n < 0 && errno == EINTR);
    const char *type = NULL;
    if (n > 0) {
        /* The answer lives in the handle: intern it before giving the handle back. */
        const char *raw = magic_buffer(h->cookie, h->buf, (size_t)n);
        bool unknown = !raw || !media_type_valid(raw, false) ||
                       strcmp(raw, "application/octet-stream") == 0 ||
                       strcmp(raw, "application/x-empty") == 0 ||
                       strcmp(raw, "inode/x-empty") == 0;
        type = unknown ? NULL : mime_intern(ms, raw);
        if (!type) /* unknown, or no room for another type: the default, cached as well */
            type = ms->default_type;
    } else if (n == 0) {
        type = ms->default_type; /* truncated since fstat: empty now */
    }
    magic_give(ms, h);
    return type;
}

static const char *mime_by_content(struct mime_state *ms, int fd, const struct stat *st)
{
    struct mime_cache_set *set = cache_set_of(ms, st);
    const char *type = cache_get(set, st);
    if (type)
        return type;
    pthread_mutex_lock(&set->sniffing);
    type = cache_get(set, st); /* sniffed by another thread while this one waited? */
    if (!type) {
        type = mime_sniff(ms, fd, st);
        if (type)
            cache_put(set, st, type);
        /* The inode, not the path: a decoded path may hold anything, newlines included. */
        log_debug("mime: sniffed inode %llu on device %llu: %s",
                  (unsigned long long)st->st_ino, (unsigned long long)st->st_dev,
                  type ? type : "(failed)");
    }
    pthread_mutex_unlock(&set->sniffing);
    return type ? type : ms->default_type;
}

/* --- the hook ------------------------------------------------------------------------- */

static const char *mime_by_name_or_content(struct mime_state *ms, const char *path, int fd,
                                           const struct stat *st)
{
    char ext[MIME_EXT_MAX];
    if (path_extension(path, ext)) {
        const char *type = ext_table_get(&ms->exts, ext);
        if (type)
            return type;
    }
    if (!ms->magic || fd < 0 || !st || !S_ISREG(st->st_mode))
        return ms->default_type;
    return mime_by_content(ms, fd, st);
}

/* The type by extension, then content; the block's default_type for the rest. */
static const char *mime_content_type(void *state, const struct request *req, const char *path,
                                     int fd, const struct stat *st)
{
    struct mime_state *ms = state;
    const char *type = mime_by_name_or_content(ms, path, fd, st);
    const struct mime_block *mb = req ? module_settings(req, ms->index) : NULL;
    return type == ms->default_type && mb ? mb->default_type : type;
}

/* --- charset: nginx's charset filter, in a file with `http { }` ----------------------- */

/* Does the media type (a header value: "type/sub; params", any case) stand in the list? */
static bool charset_type_listed(const struct mime_block *mb, const char *v, size_t len)
{
    if (mb->types_any)
        return true;
    size_t n = 0;
    while (n < len && v[n] != ';' && v[n] != ' ' && v[n] != '\t')
        n++;
    for (unsigned i = 0; i < mb->n_types; i++)
        if (strlen(mb->types[i]) == n && strncasecmp(mb->types[i], v, n) == 0)
            return true;
    return false;
}

/* Does a Content-Type value name its charset already? */
static bool has_charset_param(const char *v, size_t len)
{
    static const char key[] = "charset=";
    for (const char *p = memchr(v, ';', len); p; p = memchr(p + 1, ';', len - (size_t)(p + 1 - v))) {
        const char *q = p + 1;
        while (q < v + len && (*q == ' ' || *q == '\t'))
            q++;
        if ((size_t)(v + len - q) >= sizeof(key) - 1 && strncasecmp(q, key, sizeof(key) - 1) == 0)
            return true;
        if (p + 1 >= v + len)
            break;
    }
    return false;
}

/* nginx's charset filter: an answer of a listed type that names no charset gets the
 * block's, whoever made it (a file, `return`, an error page, an upstream). */
static void mime_filter(void *state, const struct request *req, struct response *resp)
{
    const struct mime_state *ms = state;
    if (!ms->nginx)
        return; /* lfhttpd's own files: text types are interned with their charset */
    const struct mime_block *mb = module_settings(req, ms->index);
    if (!mb)
        return;
    if (resp_is_builtin_page(resp)) { /* the core's error page: text/html, as nginx's */
        char page[sizeof("text/html; charset=") + MIME_CHARSET_NAME_MAX];
        snprintf(page, sizeof(page), "text/html%s%s", mb->charset[0] ? "; charset=" : "",
                 mb->charset);
        resp_header_set(resp, "Content-Type", page);
        return;
    }
    if (!mb->charset[0])
        return;
    size_t len;
    const char *v = resp_header_get(resp, "Content-Type", &len);
    while (v && len && (*v == ' ' || *v == '\t'))
        v++, len--;
    while (v && len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    if (!v || !len || has_charset_param(v, len) || !charset_type_listed(mb, v, len))
        return;
    char buf[MIME_TYPE_MAX + sizeof("; charset=") + MIME_CHARSET_NAME_MAX];
    int n = snprintf(buf, sizeof(buf), "%.*s; charset=%s", (int)len, v, mb->charset);
    if (n > 0 && (size_t)n < sizeof(buf))
        resp_header_set(resp, "Content-Type", buf);
}

/* --- init and fini -------------------------------------------------------------------- */

/* What the directives set. */
struct mime_settings {
    char types_file[CONFIG_PATH_MAX];   /* mime_types: a file of the mime.types form, or off */
    bool magic;                         /* mime_magic: sniff files without a known extension */
    char default_type[CONFIG_PATH_MAX]; /* default_type: for the rest */
    char charset[MIME_CHARSET_NAME_MAX]; /* charset: "off", a name; "" not said */
    const struct conf_node *charset_types; /* charset_types: its statement; NULL not said */
};

/* `charset NAME|off`: a file with `http { }` takes any name, as nginx (a label: answers are
 * not recoded); lfhttpd's own files carry utf-8 on text types always. */
static int set_charset(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct mime_settings *set = base;
    const struct module_init *mi = ctx;
    const char *v = n->args[0];
    if (strchr(v, '$'))
        return snprintf(msg, len, "\"%s\": a charset from a variable is not supported; "
                        "name it", v), -1;
    size_t vl = strlen(v);
    bool token = vl > 0 && vl < MIME_CHARSET_NAME_MAX;
    for (size_t i = 0; token && i < vl; i++)
        token = is_tchar(v[i]);
    if (!token)
        return snprintf(msg, len, "\"%s\" is not a charset name", v), -1;
    if (!mi->cfg->http_block && strcasecmp(v, "utf-8") != 0 && strcmp(v, "off") != 0)
        return snprintf(msg, len, "\"%s\": only utf-8 (text types always carry "
                        "\"; charset=utf-8\" in a file without nginx's http { }; any charset "
                        "in one with it)", v), -1;
    snprintf(set->charset, sizeof(set->charset), "%s", v);
    return 0;
}

static int set_charset_types(void *base, const struct conf_node *n, void *ctx, char *msg,
                             size_t len)
{
    struct mime_settings *set = base;
    (void)ctx;
    if (n->n_args > MIME_CHARSET_TYPES_MAX)
        return snprintf(msg, len, "at most %d types", MIME_CHARSET_TYPES_MAX), -1;
    for (unsigned i = 0; i < n->n_args; i++)
        if (strcmp(n->args[i], "*") != 0 &&
            (!media_type_valid(n->args[i], false) || strlen(n->args[i]) >= MIME_CHARSET_TYPE_LEN))
            return snprintf(msg, len, "\"%s\" is not a media type", n->args[i]), -1;
    set->charset_types = n;
    return 0;
}

/* `source_charset`, `override_charset`: answers are never recoded here. */
static int set_recode(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)base;
    (void)ctx;
    if (strcmp(n->name, "override_charset") == 0 && strcmp(n->args[0], "off") == 0)
        return 0;
    if (strcmp(n->name, "source_charset") == 0)
        return 0; /* the charset an answer is in: with nothing recoded, a label only */
    return snprintf(msg, len, "on: answers are not recoded here (nginx's charset_map "
                    "tables); the charset names what they are"), -1;
}

#define SETTING(field) CONF_AT(struct mime_settings, field)

static const struct conf_directive mime_directives[] = {
    {"mime_types", CONF_PATH, CONF_TOP, .usage = "PATH|off", SETTING(types_file),
     .dflt = "/etc/mime.types",
     .doc = "A `mime.types` file read after the built-in list (a later line wins, as in Apache "
        "and nginx); a few types browsers are strict about always win (html, css, js/mjs as "
        "`text/javascript`, json, svg, wasm, woff2...). `off`: the built-in list alone."},
    {"mime_magic", CONF_FLAG, CONF_TOP, SETTING(magic),
     .dflt = "on (off in a file with nginx's `http { }`)",
     .doc = "A file with no extension or an unknown one is identified by its content with "
        "libmagic (its first 8 KiB), cached per file version. nginx has no such step: a "
        "file with nginx's `http { }` block gets `default_type` instead unless it says "
        "`mime_magic on`."},
    {"types", CONF_BLOCK, CONF_TOP, CONF_REPEATS, .min_args = 0, .max_args = 0,
     .set = conf_set_later, .usage = "{ TYPE EXT...; ... }",
     .doc = "nginx's type map (`include mime.types;` reads nginx's file): each `TYPE EXT...;` "
        "maps the extensions to TYPE, a later line winning. In a file with nginx's "
        "`http { }`, the `types` blocks are the whole map, as nginx's replace its built-in "
        "one (with a `mime_types` file only if one is named); in lfhttpd's own files they "
        "override entries of the built-in list and `mime_types`, which stay for the "
        "extensions they do not name. At the top level (nginx's http) only."},
    {"default_type", CONF_STRING, CONF_TOP | CONF_SERVER | CONF_LOCATION, .usage = "TYPE",
     SETTING(default_type),
     .dflt = "application/octet-stream (nginx's text/plain in a file with `http { }`)",
     .doc = "The type of files no extension or sniffing names, and of `return` texts."},
    {"charset", CONF_STRING, CONF_TOP | CONF_SERVER | CONF_LOCATION, .usage = "NAME|off",
     .set = set_charset, .dflt = "off (lfhttpd's own files: utf-8 on text types)",
     .doc = "In a file with nginx's `http { }`, as nginx: an answer whose type `charset_types` "
        "lists and that names no charset gets `; charset=NAME`, whoever made it (files, "
        "`return`, upstreams). Answers are never recoded (nginx's `charset_map`). In a file "
        "without it, text types always carry `; charset=utf-8`: `utf-8` and `off` are "
        "accepted, other names refused."},
    {"charset_types", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, .min_args = 1,
     .max_args = CONFIG_MAX_ARGS, .usage = "TYPE...|*", .set = set_charset_types,
     .dflt = "text/html text/xml text/plain text/vnd.wap.wml application/javascript "
        "application/rss+xml",
     .doc = "The types `charset` labels, text/html always among them (nginx's list); `*` is "
        "every type. A file with `http { }` only."},
    {"source_charset", CONF_STRING, CONF_TOP | CONF_SERVER | CONF_LOCATION, .usage = "NAME",
     .set = set_recode, .doc = "Accepted: answers are not recoded here, so the charset they "
        "are in is the one `charset` names."},
    {"override_charset", CONF_FLAG, CONF_TOP | CONF_SERVER | CONF_LOCATION, .set = set_recode,
     .dflt = "off", .doc = "`off` only: an answer that names its charset keeps it (`on` would "
        "recode it)."},
    {.name = NULL},
};

static void mime_fini(void *state)
{
    struct mime_state *ms = state;
    if (!ms)
        return;
    while (ms->idle) {
        struct magic_handle *h = ms->idle;
        ms->idle = h->next_idle;
        magic_close(h->cookie);
        free(h);
    }
    if (ms->cache) {
        for (unsigned i = 0; i < MIME_CACHE_SETS; i++) {
            pthread_rwlock_destroy(&ms->cache[i].lock);
            pthread_mutex_destroy(&ms->cache[i].sniffing);
        }
        free(ms->cache);
    }
    ext_table_free(&ms->exts);
    str_set_free(&ms->types);
    pthread_mutex_destroy(&ms->types_lock);
    pthread_mutex_destroy(&ms->pool_lock);
    free(ms);
}

/* `types { TYPE EXT...; }`: the last layer, the file's own word, over every other. */
static int mime_add_types_blocks(struct module_init *mi, struct mime_state *ms)
{
    int rc = 0;
    for (const struct conf_node *b = module_directive(mi, "types"); b;
         b = module_directive_next(mi, "types", b)) {
        for (const struct conf_node *t = b->children; t; t = t->next) {
            if (t->is_block || !media_type_valid(t->name, false)) {
                rc = module_error(mi, t, "types: \"%s\" is not a media type (TYPE EXT...;)",
                                  t->name);
                continue;
            }
            const char *type = mime_intern(ms, t->name);
            for (unsigned i = 0; type && i < t->n_args; i++)
                if (ext_table_set(&ms->exts, t->args[i], type) < 0)
                    type = NULL;
            if (!type)
                return module_error(mi, t, "out of memory");
        }
    }
    return rc;
}

/* nginx's way with a named mime_types: the file, then the types blocks. */
static int mime_build_nginx_file(struct module_init *mi, struct mime_state *ms, const char *path,
                                 const struct conf_node *where)
{
    if (strcmp(path, "off") != 0) {
        FILE *f = fopen(path, "re");
        if (!f)
            return module_error(mi, where, "mime_types \"%s\": %s", path, strerror(errno));
        int rc = mime_load_types(ms, f);
        fclose(f);
        if (rc < 0)
            return module_error(mi, where, "mime_types \"%s\": out of memory", path);
    }
    return mime_add_types_blocks(mi, ms);
}

/* The extension table: built-ins, the file, the strict built-ins, the types blocks. In a
 * file with nginx's `http { }` that has `types` blocks, those alone (and a `mime_types`
 * it names), as nginx's `types` replaces its built-in map. */
static int mime_build_table(struct module_init *mi, struct mime_state *ms, const char *path)
{
    const struct conf_node *where = module_directive(mi, "mime_types");
    if (ms->nginx && module_directive(mi, "types")) {
        if (where)
            return mime_build_nginx_file(mi, ms, path, where);
        return mime_add_types_blocks(mi, ms);
    }
    if (mime_add_builtins(ms, mime_base, sizeof(mime_base) / sizeof(mime_base[0])) < 0)
        return module_error(mi, NULL, "out of memory");
    if (strcmp(path, "off") != 0) {
        FILE *f = fopen(path, "re");
        /* The system's file is optional; one named in the configuration is not. */
        if (!f && (where || errno != ENOENT))
            return module_error(mi, where, "mime_types \"%s\": %s", path, strerror(errno));
        int rc = f ? mime_load_types(ms, f) : 0;
        if (f)
            fclose(f);
        if (rc < 0)
            return module_error(mi, where, "mime_types \"%s\": out of memory", path);
    }
    if (mime_add_builtins(ms, mime_strict, sizeof(mime_strict) / sizeof(mime_strict[0])) < 0)
        return module_error(mi, NULL, "out of memory");
    return mime_add_types_blocks(mi, ms);
}

/* mime_magic: load libmagic once now, so that a missing database is a configuration error
 * (and `lfhttpd -t` says so); the handle becomes the pool's first. Then the cache. */
static int mime_start_magic(struct module_init *mi, struct mime_state *ms, bool magic)
{
    ms->magic = magic;
    if (!ms->magic)
        return 0;
    char err[256];
    struct magic_handle *h = magic_handle_open(err, sizeof(err));
    if (!h)
        return module_error(mi, module_directive(mi, "mime_magic"), "libmagic: %s", err);
    ms->idle = h;
    ms->n_handles = 1;
    ms->cache = aligned_alloc(alignof(struct mime_cache_set),
                              MIME_CACHE_SETS * sizeof(struct mime_cache_set));
    if (!ms->cache)
        return module_error(mi, NULL, "out of memory");
    memset(ms->cache, 0, MIME_CACHE_SETS * sizeof(struct mime_cache_set));
    for (unsigned i = 0; i < MIME_CACHE_SETS; i++) {
        pthread_rwlock_init(&ms->cache[i].lock, NULL);
        pthread_mutex_init(&ms->cache[i].sniffing, NULL);
    }
    return 0;
}

static int mime_init(struct module_init *mi, void **state)
{
    struct mime_state *ms = calloc(1, sizeof(*ms));
    if (!ms)
        return module_error(mi, NULL, "out of memory");
    pthread_mutex_init(&ms->types_lock, NULL);
    pthread_mutex_init(&ms->pool_lock, NULL);
    ms->types_max = SIZE_MAX;
    ms->index = mi->index;

    /* A file with nginx's `http { }` gets nginx's defaults: no sniffing, text/plain. */
    bool nginx = mi->cfg->http_block;
    ms->nginx = nginx;
    struct mime_settings set = {.types_file = MIME_TYPES_DEFAULT, .magic = !nginx,
                                .default_type = MIME_DEFAULT_TYPE};
    if (nginx)
        snprintf(set.default_type, sizeof(set.default_type), "%s", NGINX_DEFAULT_TYPE);
    if (module_read_directives(mi, &set) < 0)
        goto fail;
    if (!media_type_valid(set.default_type, true)) {
        module_error(mi, module_directive(mi, "default_type"),
                     "default_type: \"%s\" is not a media type", set.default_type);
        goto fail;
    }
    ms->default_type = mime_intern(ms, set.default_type);
    if (!ms->default_type) {
        module_error(mi, NULL, "out of memory");
        goto fail;
    }
    if (mime_build_table(mi, ms, set.types_file) < 0 ||
        mime_start_magic(mi, ms, set.magic) < 0)
        goto fail;
    ms->types_max = ms->types.n + MIME_MAGIC_TYPES_MAX;
    *state = ms;
    return 0;
fail:
    mime_fini(ms);
    return -1;
}

/* A block's settings: its default_type (a string of its own, or the outer block's) and
 * charset, each inherited when the block does not say it, as nginx merges them. */
static void *mime_block(void *state, const struct module_block *b)
{
    struct mime_state *ms = state;
    const struct mime_block *outer = b->outer;
    if (outer && !module_block_has(b))
        return (void *)outer;
    struct mime_settings set = {.default_type = ""};
    if (b->context != CONF_TOP && module_block_read(b, &set) < 0)
        return NULL;
    if (b->context == CONF_TOP && module_read_directives(b->mi, &set) < 0)
        return NULL;
    const char *type = set.default_type[0] ? set.default_type
                       : outer                ? outer->default_type
                                              : ms->default_type;
    if (!media_type_valid(type, true)) {
        module_error(b->mi, b->first, "default_type: \"%s\" is not a media type", type);
        return NULL;
    }
    struct mime_block *mb = calloc(1, sizeof(*mb));
    if (!mb) {
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    mb->default_type = mime_intern(ms, type); /* the state's: freed with it */
    if (!mb->default_type) {
        free(mb);
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    /* charset: off unless said, in a file with http { }; lfhttpd's files ignore it here */
    if (set.charset[0])
        snprintf(mb->charset, sizeof(mb->charset), "%s",
                 strcmp(set.charset, "off") == 0 ? "" : set.charset);
    else if (outer)
        memcpy(mb->charset, outer->charset, sizeof(mb->charset));
    if (set.charset_types) {
        const struct conf_node *n = set.charset_types;
        mb->n_types = 1;
        snprintf(mb->types[0], sizeof(mb->types[0]), "text/html");
        for (unsigned i = 0; i < n->n_args && mb->n_types < MIME_CHARSET_TYPES_MAX + 1; i++)
            if (strcmp(n->args[i], "*") == 0)
                mb->types_any = true;
            else
                snprintf(mb->types[mb->n_types++], sizeof(mb->types[0]), "%s", n->args[i]);
    } else if (outer) {
        mb->types_any = outer->types_any;
        mb->n_types = outer->n_types;
        memcpy(mb->types, outer->types, sizeof(mb->types));
    } else {
        static const char *const dflt[] = {"text/html", "text/xml", "text/plain",
                                           "text/vnd.wap.wml", "application/javascript",
                                           "application/rss+xml"};
        for (size_t i = 0; i < sizeof(dflt) / sizeof(dflt[0]); i++)
            snprintf(mb->types[mb->n_types++], sizeof(mb->types[0]), "%s", dflt[i]);
    }
    return mb;
}

static void mime_block_free(void *state, void *settings)
{
    (void)state;
    free(settings);
}

const struct module mod_mime = {
    .name = "mime",
    .directives = mime_directives,
    .init = mime_init,
    .fini = mime_fini,
    .content_type = mime_content_type,
    .filter = mime_filter,
    .block = mime_block,
    .block_free = mime_block_free,
};
