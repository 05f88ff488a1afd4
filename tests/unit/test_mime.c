/* Unit tests of mod_mime, through its hooks: init with a configuration, content_type, fini. */
#define TEST_MAIN
#include "test.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "module_chain.h"

extern const struct module mod_mime;

/* A PNG's first bytes: signature and IHDR, all libmagic needs. */
static const unsigned char png_head[] = {
    0x89, 'P',  'N',  'G',  '\r', '\n', 0x1a, '\n', 0,    0,    0,    13,   'I',
    'H',  'D',  'R',  0,    0,    0,    1,    0,    0,    0,    1,    8,    2,
    0,    0,    0,    0x90, 0x77, 0x53, 0xde, 0,    0,    0,    0,    'I',  'E',
    'N',  'D',  0xae, 0x42, 0x60, 0x82,
};

static const char text_body[] = "Hello, plain text.\nSecond line of it.\n";

struct mime_fixture {
    struct config cfg;
    struct module_chain chain;
    void *state;
    char err[512];
    char dir[64]; /* a temporary directory for the test's files */
};

/* Write len bytes to dir/name; returns 0 or -1. */
static int write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, data, len);
    close(fd);
    return w == (ssize_t)len ? 0 : -1;
}

/* Load conf (mime_types paths may use "@" for the fixture's directory) and init mod_mime.
 * Returns init's result; the error is left in fx->err with the file name made "FILE". */
static int mime_start(struct mime_fixture *fx, const char *conf)
{
    memset(fx, 0, sizeof(*fx));
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/lfhttpd-test-mime-XXXXXX");
    if (!mkdtemp(fx->dir))
        return -2;
    if (!*conf)
        conf = "# no directives\n"; /* config_load does NULL + 0 on an empty file (UBSan) */
    char text[2048], *o = text;
    for (const char *p = conf; *p && o < text + sizeof(text) - 80; p++) {
        if (*p == '@')
            o += snprintf(o, 80, "%s", fx->dir);
        else
            *o++ = *p;
    }
    *o = '\0';
    if (write_file(fx->dir, "lfhttpd.conf", text, strlen(text)) < 0)
        return -2;
    char path[128];
    snprintf(path, sizeof(path), "%s/lfhttpd.conf", fx->dir);
    config_defaults(&fx->cfg);
    if (config_load(&fx->cfg, path, module_known_directive, fx->err, sizeof(fx->err)) < 0)
        return -3;
    fx->chain.mods[0] = &mod_mime;
    fx->chain.n = 1;
    struct module_init mi = {&fx->cfg, &fx->chain, 0, fx->err, sizeof(fx->err)};
    int rc = mod_mime.init(&mi, &fx->state);
    char *p = strstr(fx->err, path);
    if (p) {
        size_t pl = strlen(path);
        memmove(p + 4, p + pl, strlen(p + pl) + 1);
        memcpy(p, "FILE", 4);
    }
    return rc;
}

static void mime_stop(struct mime_fixture *fx)
{
    if (fx->state)
        mod_mime.fini(fx->state);
    fx->state = NULL;
    config_free(&fx->cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", fx->dir);
}

/* The type of a name alone (no file). */
static const char *type_of(struct mime_fixture *fx, const char *path)
{
    return mod_mime.content_type(fx->state, NULL, path, -1, NULL);
}

/* The type of dir/name, opened and stat'ed as mod_static does. */
static const char *type_of_file(struct mime_fixture *fx, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return "(cannot open)";
    struct stat st;
    const char *t = "(cannot stat)";
    if (fstat(fd, &st) == 0)
        t = mod_mime.content_type(fx->state, NULL, path, fd, &st);
    close(fd);
    return t;
}

#define CHECK_STR(a, b)                                                                        \
    do {                                                                                       \
        const char *a_ = (a), *b_ = (b);                                                       \
        if (!a_ || strcmp(a_, b_) != 0) {                                                      \
            fprintf(stderr, "  %s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__,   \
                    #a, a_ ? a_ : "(null)", b_);                                               \
            test_failed_now = 1;                                                               \
            return;                                                                            \
        }                                                                                      \
    } while (0)

/* --- the extension table ------------------------------------------------------------- */

TEST(builtin_table_alone_knows_the_web_types)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, "mime_types off;\n"), 0);
    CHECK_STR(type_of(&fx, "/index.html"), "text/html; charset=utf-8");
    CHECK_STR(type_of(&fx, "/a/b/style.css"), "text/css; charset=utf-8");
    CHECK_STR(type_of(&fx, "/app.js"), "text/javascript; charset=utf-8");
    CHECK_STR(type_of(&fx, "/mod.mjs"), "text/javascript; charset=utf-8");
    CHECK_STR(type_of(&fx, "/data.json"), "application/json");
    CHECK_STR(type_of(&fx, "/logo.svg"), "image/svg+xml");
    CHECK_STR(type_of(&fx, "/m.wasm"), "application/wasm");
    CHECK_STR(type_of(&fx, "/f.woff2"), "font/woff2");
    CHECK_STR(type_of(&fx, "/p.png"), "image/png");
    CHECK_STR(type_of(&fx, "/notes.txt"), "text/plain; charset=utf-8");
    mime_stop(&fx);
}

TEST(extensions_match_without_case)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, "mime_types off;\n"), 0);
    CHECK_STR(type_of(&fx, "/PHOTO.JPG"), "image/jpeg");
    CHECK_STR(type_of(&fx, "/Index.HtMl"), "text/html; charset=utf-8");
    mime_stop(&fx);
}

TEST(only_the_last_segment_and_last_dot_count)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, "mime_types off;\nmime_magic off;\n"), 0);
    CHECK_STR(type_of(&fx, "/archive.tar.gz"), "application/gzip");
    CHECK_STR(type_of(&fx, "/dir.html/README"), "application/octet-stream");
    CHECK_STR(type_of(&fx, "/.html"), "application/octet-stream"); /* a hidden file */
    CHECK_STR(type_of(&fx, "/name."), "application/octet-stream");
    CHECK_STR(type_of(&fx, "/x.nosuchextension"), "application/octet-stream");
    mime_stop(&fx);
}

/* A mime.types in a directory of its own, then a server configured with it. */
static int start_with_types(struct mime_fixture *fx, const char *types, const char *extra)
{
    char dir[] = "/tmp/lfhttpd-test-types-XXXXXX";
    if (!mkdtemp(dir) || write_file(dir, "mime.types", types, strlen(types)) < 0)
        return -2;
    char conf[512];
    snprintf(conf, sizeof(conf), "mime_types %s/mime.types;\n%s", dir, extra);
    int rc = mime_start(fx, conf);
    char path[128];
    snprintf(path, sizeof(path), "%s/mime.types", dir);
    unlink(path);
    rmdir(dir);
    return rc;
}

TEST(mime_types_file_is_read_with_comments_and_case)
{
    struct mime_fixture fx;
    const char types[] = "# a comment line\n"
                         "application/x-lfhttpd-test\tLFT lft2  # a trailing comment\n"
                         "text/x-lfhttpd\tlftx\n"
                         "\n"
                         "not-a-type zzz\n"
                         "application/vnd.lfhttpd .dotted\n"
                         "application/x-no-extensions\n";
    CHECK_EQ_INT(start_with_types(&fx, types, "mime_magic off;\n"), 0);
    CHECK_STR(type_of(&fx, "/a.lft"), "application/x-lfhttpd-test");
    CHECK_STR(type_of(&fx, "/a.LFT2"), "application/x-lfhttpd-test");
    CHECK_STR(type_of(&fx, "/a.lftx"), "text/x-lfhttpd; charset=utf-8");
    CHECK_STR(type_of(&fx, "/a.dotted"), "application/vnd.lfhttpd");
    CHECK_STR(type_of(&fx, "/a.zzz"), "application/octet-stream"); /* invalid type: skipped */
    CHECK_STR(type_of(&fx, "/a.comment"), "application/octet-stream");
    /* What the file does not list, the built-in table still knows. */
    CHECK_STR(type_of(&fx, "/a.png"), "image/png");
    mime_stop(&fx);
}

TEST(later_lines_override_earlier_ones_like_apache_and_nginx)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(start_with_types(&fx, "application/x-first dup\napplication/x-second dup\n",
                                  "mime_magic off;\n"),
                 0);
    CHECK_STR(type_of(&fx, "/f.dup"), "application/x-second");
    mime_stop(&fx);
}

TEST(strict_builtins_win_over_the_file)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(start_with_types(&fx,
                                  "application/javascript js\napplication/x-evil html wasm\n"
                                  "image/x-icon ico\n",
                                  "mime_magic off;\n"),
                 0);
    CHECK_STR(type_of(&fx, "/a.js"), "text/javascript; charset=utf-8");
    CHECK_STR(type_of(&fx, "/a.html"), "text/html; charset=utf-8");
    CHECK_STR(type_of(&fx, "/a.wasm"), "application/wasm");
    CHECK_STR(type_of(&fx, "/a.ico"), "image/x-icon"); /* not strict: the file wins */
    mime_stop(&fx);
}

TEST(system_mime_types_is_used_by_default)
{
    if (access("/etc/mime.types", R_OK) != 0)
        return; /* nothing to check on this machine */
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, "mime_magic off;\n"), 0);
    /* In /etc/mime.types, not in the built-in table. */
    CHECK_STR(type_of(&fx, "/doc.odt"), "application/vnd.oasis.opendocument.text");
    CHECK_STR(type_of(&fx, "/a.js"), "text/javascript; charset=utf-8");
    mime_stop(&fx);
}

TEST(charset_only_on_text_without_parameters)
{
    struct mime_fixture fx;
    const char *types = "application/javascript legacyjs\ntext/csv csv\napplication/xml xml\n";
    const char *conf = "mime_magic off;\ndefault_type \"text/plain; charset=latin1\";\n";
    CHECK_EQ_INT(start_with_types(&fx, types, conf), 0);
    CHECK_STR(type_of(&fx, "/a.legacyjs"), "application/javascript; charset=utf-8");
    CHECK_STR(type_of(&fx, "/a.csv"), "text/csv; charset=utf-8");
    CHECK_STR(type_of(&fx, "/a.xml"), "application/xml");
    CHECK_STR(type_of(&fx, "/a.json"), "application/json");
    CHECK_STR(type_of(&fx, "/a.unknown"), "text/plain; charset=latin1");
    mime_stop(&fx);
}

TEST(returned_strings_are_interned)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, "mime_magic off;\n"), 0);
    CHECK(type_of(&fx, "/a.html") == type_of(&fx, "/b.HTM"));
    CHECK(type_of(&fx, "/a.nope") == type_of(&fx, "/README"));
    mime_stop(&fx);
}

/* --- directives ----------------------------------------------------------------------- */

TEST(default_type_is_used_for_unknown_names)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, "mime_magic off;\ndefault_type text/plain;\n"), 0);
    CHECK_STR(type_of(&fx, "/README"), "text/plain; charset=utf-8");
    mime_stop(&fx);
    CHECK_EQ_INT(mime_start(&fx, "default_type application/x-unknown;\n"), 0);
    CHECK_STR(type_of(&fx, "/README"), "application/x-unknown"); /* no file: no sniffing */
    mime_stop(&fx);
}

TEST(bad_directives_are_errors_with_their_line)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, "\nmime_magic maybe;\n"), -1);
    CHECK(strstr(fx.err, "FILE:2: mime: mime_magic: expected \"on\" or \"off\"") != NULL);
    mime_stop(&fx);
    CHECK_EQ_INT(mime_start(&fx, "default_type \"text/html\r\nX-Evil: 1\";\n"), -1);
    CHECK(strstr(fx.err, "FILE:1: mime: default_type") != NULL);
    mime_stop(&fx);
    CHECK_EQ_INT(mime_start(&fx, "default_type nonsense;\n"), -1);
    CHECK(strstr(fx.err, "FILE:1: mime: default_type: \"nonsense\" is not a media type"));
    mime_stop(&fx);
    CHECK_EQ_INT(mime_start(&fx, "mime_magic on;\n\n\nmime_magic off;\n"), -3); /* config_load */
    CHECK(strstr(fx.err, ":4: \"mime_magic\" directive is duplicate (first at ") != NULL);
    mime_stop(&fx);
    CHECK_EQ_INT(mime_start(&fx, "mime_types a b;\n"), -1);
    CHECK(strstr(fx.err, "FILE:1: mime: mime_types takes one value") != NULL);
    mime_stop(&fx);
    CHECK_EQ_INT(mime_start(&fx, "mime_types /nonexistent/mime.types;\n"), -1);
    CHECK(strstr(fx.err, "FILE:1: mime: mime_types \"/nonexistent/mime.types\": No such file"));
    mime_stop(&fx);
}

/* --- libmagic and its cache ---------------------------------------------------------- */

TEST(extensionless_png_is_sniffed_as_image_png)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, ""), 0);
    CHECK(write_file(fx.dir, "picture", png_head, sizeof(png_head)) == 0);
    CHECK_STR(type_of_file(&fx, "picture"), "image/png");
    CHECK(write_file(fx.dir, "notes", text_body, sizeof(text_body) - 1) == 0);
    CHECK_STR(type_of_file(&fx, "notes"), "text/plain; charset=utf-8");
    CHECK(write_file(fx.dir, "image.unknownext", png_head, sizeof(png_head)) == 0);
    CHECK_STR(type_of_file(&fx, "image.unknownext"), "image/png");
    CHECK(write_file(fx.dir, "empty", "", 0) == 0);
    CHECK_STR(type_of_file(&fx, "empty"), "application/octet-stream");
    mime_stop(&fx);
}

TEST(the_extension_wins_over_the_content)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, ""), 0);
    CHECK(write_file(fx.dir, "really-png.txt", png_head, sizeof(png_head)) == 0);
    CHECK_STR(type_of_file(&fx, "really-png.txt"), "text/plain; charset=utf-8");
    mime_stop(&fx);
}

TEST(sniffing_leaves_the_file_offset_alone)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, ""), 0);
    CHECK(write_file(fx.dir, "picture", png_head, sizeof(png_head)) == 0);
    char path[256];
    snprintf(path, sizeof(path), "%s/picture", fx.dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_EQ_INT(lseek(fd, 5, SEEK_SET), 5);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    CHECK_STR(mod_mime.content_type(fx.state, NULL, path, fd, &st), "image/png");
    CHECK_EQ_INT(lseek(fd, 0, SEEK_CUR), 5);
    close(fd);
    mime_stop(&fx);
}

TEST(magic_off_gives_the_default_type)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, "mime_magic off;\n"), 0);
    CHECK(write_file(fx.dir, "picture", png_head, sizeof(png_head)) == 0);
    CHECK_STR(type_of_file(&fx, "picture"), "application/octet-stream");
    mime_stop(&fx);
}

/* Overwrite dir/name in place with data, then give it the mtime it had before. */
static int rewrite_keeping_mtime(const char *dir, const char *name, const void *data,
                                 size_t len)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t w = pwrite(fd, data, len, 0);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    int rc = futimens(fd, times);
    close(fd);
    return w == (ssize_t)len && rc == 0 ? 0 : -1;
}

TEST(cache_keeps_the_type_while_mtime_and_size_match)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, ""), 0);
    char text[sizeof(png_head)];
    memset(text, 'a', sizeof(text));
    CHECK(write_file(fx.dir, "data", png_head, sizeof(png_head)) == 0);
    CHECK_STR(type_of_file(&fx, "data"), "image/png");
    /* Same inode, size and mtime: the cache answers, libmagic is not asked again. */
    CHECK(rewrite_keeping_mtime(fx.dir, "data", text, sizeof(text)) == 0);
    CHECK_STR(type_of_file(&fx, "data"), "image/png");
    /* A new mtime: sniffed again. */
    char path[256];
    snprintf(path, sizeof(path), "%s/data", fx.dir);
    struct timespec later[2] = {{0, UTIME_OMIT}, {time(NULL) + 10, 0}};
    CHECK(utimensat(AT_FDCWD, path, later, 0) == 0);
    CHECK_STR(type_of_file(&fx, "data"), "text/plain; charset=utf-8");
    /* A new size, even with the old mtime: sniffed again. */
    unsigned char bigger[sizeof(png_head) + 16] = {0};
    memcpy(bigger, png_head, sizeof(png_head));
    CHECK(write_file(fx.dir, "data", bigger, sizeof(bigger)) == 0);
    CHECK(utimensat(AT_FDCWD, path, later, 0) == 0);
    CHECK_STR(type_of_file(&fx, "data"), "image/png");
    mime_stop(&fx);
}

TEST(cache_holds_more_files_than_one_set)
{
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, ""), 0);
    char name[32];
    for (int i = 0; i < 64; i++) {
        snprintf(name, sizeof(name), "f%d", i);
        if (i % 2)
            CHECK(write_file(fx.dir, name, png_head, sizeof(png_head)) == 0);
        else
            CHECK(write_file(fx.dir, name, text_body, sizeof(text_body) - 1) == 0);
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 64; i++) {
            snprintf(name, sizeof(name), "f%d", i);
            CHECK_STR(type_of_file(&fx, name),
                      i % 2 ? "image/png" : "text/plain; charset=utf-8");
        }
    mime_stop(&fx);
}

struct hammer_arg {
    struct mime_fixture *fx;
    pthread_barrier_t *start;
    const char *seen[200];
};

static void *hammer(void *p)
{
    struct hammer_arg *a = p;
    pthread_barrier_wait(a->start);
    for (int i = 0; i < 200; i++)
        a->seen[i] = type_of_file(a->fx, (i % 4) ? "picture" : "notes");
    return NULL;
}

TEST(many_threads_sniff_the_same_file_at_once)
{
    enum { THREADS = 8 };
    struct mime_fixture fx;
    CHECK_EQ_INT(mime_start(&fx, ""), 0);
    CHECK(write_file(fx.dir, "picture", png_head, sizeof(png_head)) == 0);
    CHECK(write_file(fx.dir, "notes", text_body, sizeof(text_body) - 1) == 0);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    static struct hammer_arg args[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct hammer_arg){.fx = &fx, .start = &start};
        CHECK(pthread_create(&th[i], NULL, hammer, &args[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    const char *png = args[0].seen[1], *txt = args[0].seen[0];
    CHECK_STR(png, "image/png");
    CHECK_STR(txt, "text/plain; charset=utf-8");
    for (int i = 0; i < THREADS; i++)
        for (int j = 0; j < 200; j++)
            CHECK(args[i].seen[j] == ((j % 4) ? png : txt)); /* the same interned string */
    mime_stop(&fx);
}

TEST(init_and_fini_again_in_one_process)
{
    for (int i = 0; i < 3; i++) {
        struct mime_fixture fx;
        CHECK_EQ_INT(mime_start(&fx, ""), 0);
        CHECK(write_file(fx.dir, "picture", png_head, sizeof(png_head)) == 0);
        CHECK_STR(type_of_file(&fx, "picture"), "image/png");
        mime_stop(&fx);
    }
}
