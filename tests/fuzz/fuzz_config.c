/* fuzz_config.c — libFuzzer target for the configuration parser (config_load).
 *
 * Input: the text of a configuration file. It is written to a file in a directory of its
 * own and loaded from there, exactly as the server loads a file (fopen, fread, tokenizer,
 * statement tree, directive table, service classes), over the built-in defaults. Seeds:
 * tests/fuzz/corpus/fuzz_config/ (conf/lfhttpd.conf, conf/docker.conf, classes, quotes,
 * comments, nested blocks, every directive).
 *
 * What it checks, beyond "no crash, no sanitizer report, no leak" (config_free is always
 * called, whatever config_load returned, as main.c does):
 *   - config_load returns 0 or -1; on -1 the message is non-empty, NUL-terminated within
 *     its buffer and names the file ("PATH:" or "PATH:LINE:");
 *   - a configuration that loads respects every documented bound: 1..16 listeners (or 0
 *     when only classes listen), 256 <= max_header_size <= 16k, max_headers <= 64,
 *     threads <= 1024, index names without '/' unless absolute ("/URI"), at most 8
 *     classes with at most 16 rules of each kind, NUL-terminated strings everywhere;
 *   - loading is deterministic: the same text loads to the same result twice.
 * Module directives (gzip, cgi, handler, ...) are accepted by name, as module_known_directive
 * does; their values are the modules' business and are not parsed here.
 * Links: server/config.c, server/directive.c (and server/http_parse.c, which every target
 * gets). Build and run by hand:
 *   clang -O1 -g -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iserver \
 *     -o build/fuzz/fuzz_config tests/fuzz/fuzz_config.c server/config.c server/directive.c \
 *     server/http_parse.c
 *   build/fuzz/fuzz_config -max_total_time=60 build/fuzz/corpus-fuzz_config tests/fuzz/corpus/fuzz_config
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#define REQUIRE(x)                                                                             \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* The module directives of the modules (the `directives` table of each modules/ file):
 * where they stand and whether they repeat is what config_load checks of them. */
#define ONCE(n) {.name = (n), .contexts = CONF_TOP}
#define REPEATS(n) {.name = (n), .contexts = CONF_TOP, .repeat = CONF_REPEATS}
static const struct conf_directive module_directives[] = {
    ONCE("mime_types"),      ONCE("mime_magic"),        ONCE("default_type"),
    ONCE("autoindex"),       ONCE("autoindex_hidden"),  REPEATS("handler"),
    REPEATS("cgi"),          ONCE("cgi_timeout"),       ONCE("cgi_max_processes"),
    ONCE("cgi_stderr"),      ONCE("gzip"),              ONCE("gzip_types"),
    ONCE("gzip_min_length"), ONCE("gzip_max_length"),   ONCE("gzip_static"),
    ONCE("gzip_comp_level"), ONCE("gzip_cache_size"),   {.name = NULL},
};

static const struct conf_directive *known(const char *name, unsigned context)
{
    return conf_table_find(module_directives, name, context);
}

static bool terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static void check_loaded(const struct config *c)
{
    REQUIRE(c->n_listen <= CONFIG_MAX_LISTEN);
    REQUIRE(c->n_listen >= 1 || c->n_classes > 0);
    for (unsigned i = 0; i < c->n_listen; i++) {
        REQUIRE(terminated(c->listen[i].text, sizeof c->listen[i].text));
        REQUIRE(c->listen[i].addr_len > 0 && c->listen[i].addr_len <= sizeof c->listen[i].addr);
    }
    REQUIRE(terminated(c->root, sizeof c->root));
    REQUIRE(c->n_index >= 1 && c->n_index <= CONFIG_MAX_INDEX);
    for (unsigned i = 0; i < c->n_index; i++) {
        REQUIRE(terminated(c->index[i], sizeof c->index[i]));
        REQUIRE(c->index[i][0] && (c->index[i][0] == '/' || !strchr(c->index[i], '/')));
    }
    REQUIRE(c->threads <= 1024);
    REQUIRE(c->max_header_size >= 256 && c->max_header_size <= CONFIG_MAX_HEADER_SIZE);
    REQUIRE(c->max_headers <= 64);
    REQUIRE(terminated(c->access_log, sizeof c->access_log));
    REQUIRE(terminated(c->error_log, sizeof c->error_log));
    REQUIRE(c->error_level <= LOG_LEVEL_DEBUG);
    REQUIRE(c->n_classes <= CONFIG_MAX_CLASSES);
    for (unsigned i = 0; i < c->n_classes; i++) {
        const struct config_class *k = &c->classes[i];
        REQUIRE(terminated(k->name, sizeof k->name) && k->name[0]);
        REQUIRE(strcmp(k->name, "default") != 0);
        REQUIRE(k->threads <= 1024 && k->nice >= -20 && k->nice <= 19);
        REQUIRE(k->n_listen <= CONFIG_MAX_LISTEN && k->n_paths <= CONFIG_CLASS_RULES &&
                k->n_hosts <= CONFIG_CLASS_RULES && k->n_addrs <= CONFIG_CLASS_RULES);
        for (unsigned j = 0; j < k->n_paths; j++)
            REQUIRE(terminated(k->paths[j], sizeof k->paths[j]) && k->paths[j][0] == '/');
        for (unsigned j = 0; j < k->n_hosts; j++)
            REQUIRE(terminated(k->hosts[j], sizeof k->hosts[j]));
        for (unsigned j = 0; j < k->n_addrs; j++)
            REQUIRE(k->addrs[j].prefix_bits <= (k->addrs[j].family == AF_INET ? 32u : 128u));
        for (unsigned j = 0; j < i; j++)
            REQUIRE(strcmp(k->name, c->classes[j].name) != 0);
    }
    /* the statement tree: every node named, args bounded */
    for (const struct conf_node *n = c->tree; n; n = n->next) {
        REQUIRE(n->name && n->n_args <= CONFIG_MAX_ARGS);
        for (unsigned i = 0; i < n->n_args; i++)
            REQUIRE(n->args[i]);
    }
}

static int load(int fd, const char *path, struct config *cfg, char *err, size_t err_len)
{
    (void)fd;
    config_defaults(cfg);
    memset(err, 0x55, err_len); /* no NUL: a message must end itself */
    return config_load(cfg, path, known, err, err_len);
}

static char *made_dir;

static void remove_dir(void)
{
    char file[96];
    if (!made_dir)
        return;
    snprintf(file, sizeof file, "%s/fuzz.conf", made_dir);
    unlink(file);
    rmdir(made_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    static char dir[] = "/tmp/fuzz_config.XXXXXX";
    static struct config a, b;
    static char err_a[600], err_b[600];
    if (size > 65536)
        return 0;
    if (fd < 0) {
        /* a directory of its own: an `include` relative to the file finds nothing but the
         * file (in /proc/self/fd, `include 1` was the process's stdout) */
        REQUIRE(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/fuzz.conf", dir);
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        REQUIRE(fd >= 0);
        made_dir = dir;
        atexit(remove_dir);
    }
    REQUIRE(ftruncate(fd, 0) == 0);
    REQUIRE(pwrite(fd, data, size, 0) == (ssize_t)size);

    int ra = load(fd, path, &a, err_a, sizeof err_a);
    REQUIRE(ra == 0 || ra == -1);
    if (ra < 0) {
        REQUIRE(terminated(err_a, sizeof err_a) && err_a[0]);
        REQUIRE(strncmp(err_a, path, strlen(path)) == 0 && err_a[strlen(path)] == ':');
    } else {
        check_loaded(&a);
    }
    int rb = load(fd, path, &b, err_b, sizeof err_b);
    REQUIRE(rb == ra);
    if (ra < 0) {
        REQUIRE(strcmp(err_a, err_b) == 0);
    } else {
        REQUIRE(a.n_listen == b.n_listen && a.n_classes == b.n_classes &&
                a.max_body_size == b.max_body_size && strcmp(a.root, b.root) == 0);
    }
    config_free(&a);
    config_free(&b);
    return 0;
}
