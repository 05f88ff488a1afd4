/* Unit tests of the configuration file parser. */
#define TEST_MAIN
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "config.h"
#include "module_chain.h"

/* Write text to a temporary file and load it over the defaults, with known for the
 * directives of other parts. Returns config_load's result; the error message is left in
 * err. */
static int load_text_known(const char *text, config_known_fn known, struct config *cfg,
                           char *err, size_t err_len)
{
    char path[] = "/tmp/lfhttpd-test-conf-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -2;
    ssize_t w = write(fd, text, strlen(text));
    close(fd);
    if (w < 0)
        return -2;
    config_defaults(cfg);
    err[0] = '\0';
    int rc = config_load(cfg, path, known, err, err_len);
    /* Messages name the file (some twice); make them comparable. */
    for (char *p; (p = strstr(err, path));) {
        size_t pl = strlen(path);
        memmove(p + 4, p + pl, strlen(p + pl) + 1);
        memcpy(p, "FILE", 4);
    }
    unlink(path);
    return rc;
}

static int load_text(const char *text, struct config *cfg, char *err, size_t err_len)
{
    return load_text_known(text, module_known_directive, cfg, err, err_len);
}

TEST(defaults_listen_on_8080_and_serve_www)
{
    struct config cfg;
    config_defaults(&cfg);
    CHECK_EQ_INT(cfg.n_listen, 1);
    CHECK_EQ_INT(ntohs(((struct sockaddr_in *)&cfg.listen[0].addr)->sin_port), 8080);
    CHECK(strcmp(cfg.root, "www") == 0);
    CHECK_EQ_INT(cfg.max_header_size, 8192);
}

TEST(directives_set_their_fields)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("root /srv/www;\nthreads 3;\nmax_body_size 2m;\n"
                           "header_timeout 250ms;\nkeepalive_timeout 2m;\n"
                           "index a.html b.html;\nserver_tokens off;\n",
                           &cfg, err, sizeof(err)),
                 0);
    CHECK(strcmp(cfg.root, "/srv/www") == 0);
    CHECK_EQ_INT(cfg.threads, 3);
    CHECK_EQ_INT(cfg.max_body_size, 2 * 1024 * 1024);
    CHECK_EQ_INT(cfg.header_timeout_ms, 250);
    CHECK_EQ_INT(cfg.keepalive_timeout_ms, 120000);
    CHECK_EQ_INT(cfg.n_index, 2);
    CHECK(strcmp(cfg.index[1], "b.html") == 0);
    CHECK(!cfg.server_tokens);
    config_free(&cfg);
}

TEST(limits_and_sending_default_as_documented)
{
    struct config cfg;
    config_defaults(&cfg);
    CHECK_EQ_INT(cfg.groups, CONFIG_GROUPS_UNSET);
    CHECK_EQ_INT(cfg.reactivation, LF_REACTIVATE_EDGE);
    CHECK(cfg.sendfile);
    CHECK_EQ_INT(cfg.max_body_memory, (uint64_t)64 << 20);
    CHECK_EQ_INT(cfg.client_body_timeout_ms, 10000);
    CHECK_EQ_INT(cfg.client_body_min_rate, 500);
    CHECK_EQ_INT(cfg.send_min_rate, 1024);
    CHECK_EQ_INT(cfg.max_parked_size, (uint64_t)256 << 20);
}

TEST(limits_and_sending_directives_set_their_fields)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("groups 2;\nreactivation oneshot;\nsendfile off;\n"
                           "max_body_memory off;\nclient_body_timeout 3s;\n"
                           "client_body_min_rate 2k;\nsend_min_rate 0;\n"
                           "max_parked_size 1m;\n",
                           &cfg, err, sizeof(err)),
                 0);
    CHECK_EQ_INT(cfg.groups, 2);
    CHECK_EQ_INT(cfg.reactivation, LF_REACTIVATE_ONESHOT);
    CHECK(!cfg.sendfile);
    CHECK_EQ_INT(cfg.max_body_memory, 0);
    CHECK_EQ_INT(cfg.client_body_timeout_ms, 3000);
    CHECK_EQ_INT(cfg.client_body_min_rate, 2048);
    CHECK_EQ_INT(cfg.send_min_rate, 0);
    CHECK_EQ_INT(cfg.max_parked_size, 1 << 20);
    config_free(&cfg);
}

TEST(first_listen_replaces_the_default_and_more_add_to_it)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("listen 127.0.0.1:9000;\nlisten [::1]:9001;\n", &cfg, err,
                           sizeof(err)),
                 0);
    CHECK_EQ_INT(cfg.n_listen, 2);
    CHECK_EQ_INT(cfg.listen[0].addr.ss_family, AF_INET);
    CHECK_EQ_INT(cfg.listen[1].addr.ss_family, AF_INET6);
    CHECK_EQ_INT(ntohs(((struct sockaddr_in6 *)&cfg.listen[1].addr)->sin6_port), 9001);
    config_free(&cfg);
}

TEST(listen_reuseport_is_a_flag_of_its_address_in_any_order)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("listen 127.0.0.1:9000 reuseport;\nlisten 9001 ssl reuseport;\n"
                           "listen 9002;\n",
                           &cfg, err, sizeof(err)),
                 0);
    CHECK_EQ_INT(cfg.n_listen, 3);
    CHECK(cfg.listen[0].reuseport && !cfg.listen[0].ssl);
    CHECK(cfg.listen[1].reuseport && cfg.listen[1].ssl);
    CHECK(!cfg.listen[2].reuseport);
    config_free(&cfg);
}

TEST(listen_reuseport_in_a_server_shares_the_address)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("server { listen 127.0.0.1:9000 default_server reuseport; }\n"
                           "server { listen 127.0.0.1:9001; }\n",
                           &cfg, err, sizeof(err)),
                 0);
    CHECK_EQ_INT(cfg.n_listen, 2);
    CHECK(cfg.listen[0].reuseport);
    CHECK(!cfg.listen[1].reuseport);
    config_free(&cfg);
}

TEST(listen_parameter_none_of_nginx_linux_ones_is_refused)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("listen 9000 http2;\n", &cfg, err, sizeof(err)), -1);
    CHECK(strstr(err, "unsupported parameter \"http2\" (only ssl, reuseport, proxy_protocol, "
                      "bind, deferred, backlog=") != NULL);
    config_free(&cfg);
    CHECK_EQ_INT(load_text("server { listen 9000 bogus; }\n", &cfg, err, sizeof(err)), -1);
    CHECK(strstr(err, "unsupported parameter \"bogus\" (only default_server, http2, ssl, ")
          != NULL);
    config_free(&cfg);
}

TEST(listen_so_keepalive_fields_are_nginx_seconds_and_a_count)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("listen 9000 so_keepalive=1h30m:75:9;\n", &cfg, err, sizeof(err)), 0);
    CHECK_EQ_INT(cfg.listen[0].so_keepalive, 1);
    CHECK_EQ_INT(cfg.listen[0].keepidle_s, 5400);
    CHECK_EQ_INT(cfg.listen[0].keepintvl_s, 75);
    CHECK_EQ_INT(cfg.listen[0].keepcnt, 9);
    config_free(&cfg);
}

TEST(listen_buffer_sizes_take_k_and_m)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("listen 9000 rcvbuf=8k sndbuf=1m backlog=511;\n", &cfg, err,
                           sizeof(err)), 0);
    CHECK_EQ_INT(cfg.listen[0].rcvbuf_bytes, 8192);
    CHECK_EQ_INT(cfg.listen[0].sndbuf_bytes, 1048576);
    CHECK_EQ_INT(cfg.listen[0].backlog, 511);
    config_free(&cfg);
}

TEST(listen_address_beside_its_ports_wildcard_goes_through_it_without_bind)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("server { listen 9000; }\nserver { listen 127.0.0.1:9000; }\n"
                           "server { listen 127.0.0.1:9001; }\n", &cfg, err, sizeof(err)), 0);
    CHECK_EQ_INT(cfg.n_listen, 3);
    CHECK(!cfg.listen[0].via_wildcard);
    CHECK(cfg.listen[1].via_wildcard);
    CHECK(!cfg.listen[2].via_wildcard); /* no wildcard on its port */
    config_free(&cfg);
}

TEST(comments_and_quoted_values_are_understood)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("# a comment\nroot \"/srv/my site\"; # trailing comment\n"
                           "access_log '/var/log/a#b.log';\n",
                           &cfg, err, sizeof(err)),
                 0);
    CHECK(strcmp(cfg.root, "/srv/my site") == 0);
    CHECK(strcmp(cfg.access_log, "/var/log/a#b.log") == 0);
    config_free(&cfg);
}

TEST(a_variable_in_braces_stays_inside_its_word)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("add_header X-Site ${host}.example;\nroot /srv/a;\n", &cfg, err,
                           sizeof(err)),
                 0);
    const struct conf_node *n = config_next(&cfg, "add_header", NULL);
    CHECK(n != NULL && n->n_args == 2 && !n->is_block);
    CHECK(n && strcmp(n->args[1], "${host}.example") == 0);
    CHECK(strcmp(cfg.root, "/srv/a") == 0);
    config_free(&cfg);
}

TEST(a_brace_after_a_word_still_opens_a_block)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("class k{ threads 1; }\n", &cfg, err, sizeof(err)), 0);
    CHECK_EQ_INT(cfg.n_classes, 1);
    config_free(&cfg);
}

TEST(unknown_directive_names_file_and_line)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("root www;\n\nfrobnicate yes;\n", &cfg, err, sizeof(err)), -1);
    CHECK(strstr(err, "FILE:3:") != NULL);
    CHECK(strstr(err, "frobnicate") != NULL);
    config_free(&cfg);
}

TEST(missing_semicolon_is_an_error_with_line)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("root www;\nthreads 2\n", &cfg, err, sizeof(err)), -1);
    CHECK(strstr(err, "FILE:") != NULL);
    CHECK(strstr(err, "not terminated") != NULL);
    config_free(&cfg);
}

TEST(unbalanced_braces_are_errors)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("root www;\n}\n", &cfg, err, sizeof(err)), -1);
    CHECK(strstr(err, "FILE:2:") != NULL);
    config_free(&cfg);
    CHECK_EQ_INT(load_text("class a {\n threads 2;\n", &cfg, err, sizeof(err)), -1);
    CHECK(strstr(err, "end of file") != NULL);
    config_free(&cfg);
}

TEST(bad_values_are_errors_naming_the_directive)
{
    const char *bad[] = {
        "threads abc;",         "threads -1;",           "max_body_size 12q;",
        "header_timeout 5x;",   "listen 1.2.3.4:99999;", "listen nowhere:80;",
        "max_header_size 64k;", "error_log stderr loud;", "server_tokens maybe;",
        "root;",                "root a b;",              "index ../x;",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct config cfg;
        char err[512];
        int rc = load_text(bad[i], &cfg, err, sizeof(err));
        config_free(&cfg);
        if (rc != -1 || strstr(err, "FILE:1:") == NULL) {
            fprintf(stderr, "  accepted or unlocated: %s -> %s\n", bad[i], err);
            CHECK(0);
        }
    }
}

TEST(sizes_and_durations_take_suffixes)
{
    uint64_t v;
    unsigned ms;
    CHECK(config_parse_size("16k", &v) == 0 && v == 16384);
    CHECK(config_parse_size("1g", &v) == 0 && v == 1073741824ull);
    CHECK(config_parse_size("k", &v) < 0);
    CHECK(config_parse_duration_ms("10", &ms) == 0 && ms == 10000);
    CHECK(config_parse_duration_ms("1h", &ms) == 0 && ms == 3600000);
    CHECK(config_parse_duration_ms("10 s", &ms) < 0);
}

TEST(the_shipped_configuration_is_valid)
{
    struct config cfg;
    char err[512];
    config_defaults(&cfg);
    int rc = config_load(&cfg, "conf/lfhttpd.conf", module_known_directive, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "  %s\n", err);
    CHECK_EQ_INT(rc, 0);
    config_free(&cfg);
}

TEST(empty_file_is_valid_and_keeps_the_defaults)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("", &cfg, err, sizeof(err)), 0);
    CHECK(strcmp(cfg.root, "www") == 0);
    config_free(&cfg);
}

TEST(concurrency_defaults_to_leader_followers_with_lifo_promotion)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("threads 2;\n", &cfg, err, sizeof(err)), 0);
    CHECK_EQ_INT(cfg.concurrency, LF_STRATEGY_LEADER_FOLLOWERS);
    CHECK_EQ_INT(cfg.promotion, LF_PROMOTE_LIFO);
    config_free(&cfg);
}

TEST(concurrency_directive_selects_each_strategy)
{
    static const struct {
        const char *text;
        enum lf_strategy want;
    } cases[] = {
        {"concurrency leader_followers;\n", LF_STRATEGY_LEADER_FOLLOWERS},
        {"concurrency half_sync_half_async;\n", LF_STRATEGY_HALF_SYNC_HALF_ASYNC},
        {"concurrency thread_per_connection;\n", LF_STRATEGY_THREAD_PER_CONNECTION},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct config cfg;
        char err[512];
        CHECK_EQ_INT(load_text(cases[i].text, &cfg, err, sizeof(err)), 0);
        CHECK_EQ_INT(cfg.concurrency, cases[i].want);
        config_free(&cfg);
    }
}

TEST(promotion_directive_selects_lifo_or_condvar)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("promotion condvar;\n", &cfg, err, sizeof(err)), 0);
    CHECK_EQ_INT(cfg.promotion, LF_PROMOTE_CONDVAR);
    config_free(&cfg);
    CHECK_EQ_INT(load_text("promotion lifo;\n", &cfg, err, sizeof(err)), 0);
    CHECK_EQ_INT(cfg.promotion, LF_PROMOTE_LIFO);
    config_free(&cfg);
}

TEST(bad_concurrency_and_promotion_values_are_errors_with_their_line)
{
    const char *bad[] = {
        "threads 2;\nconcurrency fast;\n",
        "threads 2;\nconcurrency leader-followers;\n",
        "threads 2;\nconcurrency leader_followers half_sync_half_async;\n",
        "threads 2;\nconcurrency;\n",
        "threads 2;\npromotion fifo;\n",
        "threads 2;\npromotion LIFO;\n",
        "threads 2;\npromotion { lifo; }\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct config cfg;
        char err[512];
        int rc = load_text(bad[i], &cfg, err, sizeof(err));
        config_free(&cfg);
        if (rc != -1 || strstr(err, "FILE:2:") == NULL) {
            fprintf(stderr, "  accepted or unlocated: %s -> %s\n", bad[i], err);
            CHECK(0);
        }
    }
}

TEST(concurrency_and_promotion_set_twice_are_errors_naming_both_lines)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("concurrency leader_followers;\nthreads 2;\n"
                           "concurrency thread_per_connection;\n",
                           &cfg, err, sizeof(err)),
                 -1);
    CHECK(strstr(err, "FILE:3: \"concurrency\" directive is duplicate (first at FILE:1)"));
    config_free(&cfg);
    CHECK_EQ_INT(load_text("promotion lifo;\npromotion lifo;\n", &cfg, err, sizeof(err)), -1);
    CHECK(strstr(err, "FILE:2: \"promotion\" directive is duplicate (first at FILE:1)"));
    config_free(&cfg);
}

TEST(a_repeated_core_directive_is_an_error_naming_both_lines)
{
    static const char *const cases[][2] = {
        {"root a;\nthreads 2;\nroot b;\n",
         "FILE:3: \"root\" directive is duplicate (first at FILE:1)"},
        {"threads 2;\nthreads 3;\n",
         "FILE:2: \"threads\" directive is duplicate (first at FILE:1)"},
        {"index a.html;\nindex b.html;\n", "FILE:2: \"index\" directive is duplicate"},
        {"error_log stderr;\nerror_log stdout;\n", "FILE:2: \"error_log\" directive is duplicate"},
        /* access_log repeats, as nginx's; but `off` stands alone */
        {"access_log off;\n\naccess_log off;\n", "FILE:3: access_log: access_log off with another"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct config cfg;
        char err[512];
        CHECK_EQ_INT(load_text(cases[i][0], &cfg, err, sizeof(err)), -1);
        CHECK(strstr(err, cases[i][1]) != NULL);
        config_free(&cfg);
    }
}

TEST(a_repeated_module_directive_is_an_error_naming_both_lines)
{
    static const char *const cases[][2] = {
        {"gzip on;\ngzip off;\n", "FILE:2: \"gzip\" directive is duplicate (first at FILE:1)"},
        {"gzip_types a/b;\ngzip_types c/d;\n", "FILE:2: \"gzip_types\" directive is duplicate"},
        {"mime_magic on;\nmime_magic on;\n", "FILE:2: \"mime_magic\" directive is duplicate"},
        {"autoindex on;\nautoindex off;\n", "FILE:2: \"autoindex\" directive is duplicate"},
        {"open_file_cache_valid 1s;\nopen_file_cache_valid 2s;\n",
         "FILE:2: \"open_file_cache_valid\" directive is duplicate"},
        {"cgi_timeout 5s;\ncgi_timeout 6s;\n", "FILE:2: \"cgi_timeout\" directive is duplicate"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct config cfg;
        char err[512];
        CHECK_EQ_INT(load_text(cases[i][0], &cfg, err, sizeof(err)), -1);
        CHECK(strstr(err, cases[i][1]) != NULL);
        config_free(&cfg);
    }
}

TEST(a_repeated_directive_in_a_class_is_an_error_naming_both_lines)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("class api {\n  threads 1;\n  priority low;\n  threads 2;\n}\n",
                           &cfg, err, sizeof(err)),
                 -1);
    CHECK(strstr(err, "FILE:4: class api: \"threads\" directive is duplicate (first at FILE:2)"));
    config_free(&cfg);
}

TEST(listeners_mounts_classes_and_match_rules_may_repeat)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("listen 127.0.0.1:0;\nlisten [::1]:0;\n"
                           "handler /a hello;\nhandler /b echo;\n"
                           "class a { match path /x; match path /y; listen 127.0.0.1:0; "
                           "listen 127.0.0.1:0; }\nclass b { match host b; }\n",
                           &cfg, err, sizeof(err)),
                 0);
    CHECK_EQ_INT(cfg.n_listen, 2);
    CHECK_EQ_INT(cfg.n_classes, 2);
    CHECK_EQ_INT(cfg.classes[0].n_paths, 2);
    config_free(&cfg);
}

TEST(promotion_with_another_strategy_than_leader_followers_is_an_error)
{
    struct config cfg;
    char err[512];
    CHECK_EQ_INT(load_text("promotion condvar;\nconcurrency half_sync_half_async;\n", &cfg, err,
                           sizeof(err)),
                 -1);
    CHECK(strstr(err, "FILE:1: promotion: ") != NULL);
    CHECK(strstr(err, "half_sync_half_async (FILE:2)") != NULL);
    config_free(&cfg);
    CHECK_EQ_INT(load_text("concurrency thread_per_connection;\npromotion lifo;\n", &cfg, err,
                           sizeof(err)),
                 -1);
    CHECK(strstr(err, "FILE:2: promotion: ") != NULL);
    config_free(&cfg);
    CHECK_EQ_INT(load_text("concurrency leader_followers;\npromotion condvar;\n", &cfg, err,
                           sizeof(err)),
                 0);
    config_free(&cfg);
}

/* --- the directive table's reader ------------------------------------------------------ */

/* An owner's settings, with a field of every width the reader stores into. */
struct sample {
    bool flag;
    uint8_t small;
    unsigned count;
    size_t bytes;
    uint64_t big;
    unsigned ms;
    int choice;
    char word[8];
};

static const struct conf_name sample_names[] = {{"one", 1}, {"two", 2}, {NULL, 0}};

static const struct conf_directive sample_table[] = {
    {"flag", CONF_FLAG, CONF_TOP, CONF_AT(struct sample, flag)},
    {"small", CONF_COUNT, CONF_TOP, CONF_AT(struct sample, small)},
    {"count", CONF_COUNT, CONF_TOP | CONF_CLASS, .min = 1, .max = 9,
     CONF_AT(struct sample, count)},
    {"bytes", CONF_SIZE, CONF_TOP, .off = true, .max = 1 << 20, CONF_AT(struct sample, bytes)},
    {"big", CONF_SIZE, CONF_TOP, CONF_AT(struct sample, big)},
    {"ms", CONF_DURATION, CONF_TOP, .min = 1, CONF_AT(struct sample, ms)},
    {"choice", CONF_ENUM, CONF_TOP, .names = sample_names, CONF_AT(struct sample, choice)},
    {"word", CONF_STRING, CONF_TOP, CONF_AT(struct sample, word)},
    {.name = NULL},
};

static const struct conf_directive *sample_known(const char *name, unsigned context)
{
    return conf_table_find(sample_table, name, context);
}

/* Load text (the sample table's directives are known to config_load, as a module's are),
 * then read them into s as their owner, "sample", does. */
static int sample_read(const char *text, struct sample *s, char *err, size_t err_len)
{
    struct config cfg;
    memset(s, 0, sizeof(*s));
    int rc = load_text_known(text, sample_known, &cfg, err, err_len);
    if (rc == 0) {
        struct conf_reader r = {.file = "FILE", .owner = "sample", .context = CONF_TOP,
                                .err = err, .err_len = err_len};
        rc = conf_read_owned(&r, sample_table, cfg.tree, s);
    }
    config_free(&cfg);
    return rc;
}

TEST(each_kind_is_stored_in_its_field_whatever_its_width)
{
    struct sample s;
    char err[1024];
    CHECK_EQ_INT(sample_read("flag on;\nsmall 255;\ncount 9;\nbytes 1m;\nbig 5g;\nms 2m;\n"
                             "choice two;\nword seven;\n",
                             &s, err, sizeof(err)),
                 0);
    CHECK(s.flag);
    CHECK_EQ_INT(s.small, 255);
    CHECK_EQ_INT(s.count, 9);
    CHECK_EQ_INT(s.bytes, 1 << 20);
    CHECK(s.big == 5ull << 30);
    CHECK_EQ_INT(s.ms, 120000);
    CHECK_EQ_INT(s.choice, 2);
    CHECK(strcmp(s.word, "seven") == 0);
}

TEST(off_stands_for_zero_where_the_table_says_so)
{
    struct sample s;
    char err[1024];
    CHECK_EQ_INT(sample_read("bytes off;\n", &s, err, sizeof(err)), 0);
    CHECK_EQ_INT(s.bytes, 0);
    CHECK_EQ_INT(sample_read("big off;\n", &s, err, sizeof(err)), -1);
    CHECK(strstr(err, "FILE:1: sample: big: invalid size \"off\"") != NULL);
}

TEST(a_value_out_of_its_kind_or_bounds_is_refused_with_the_bounds)
{
    static const char *const cases[][2] = {
        {"count 1k;\n", "FILE:1: sample: count: invalid number \"1k\" (1 to 9)"},
        {"count 0;\n", "FILE:1: sample: count: invalid number \"0\" (1 to 9)"},
        {"small 256;\n", "FILE:1: sample: small: invalid number \"256\" (0 to 255)"},
        {"bytes 2m;\n", "FILE:1: sample: bytes: invalid size \"2m\" (off, or 0 to 1m)"},
        {"ms 0;\n", "FILE:1: sample: ms: invalid duration \"0\" (at least 1ms)"},
        {"flag yes;\n", "FILE:1: sample: flag: expected \"on\" or \"off\", not \"yes\""},
        {"choice three;\n", "FILE:1: sample: choice: expected \"one\" or \"two\", not \"three\""},
        {"word eightchr;\n", "FILE:1: sample: word: longer than 7 bytes"},
        {"count 1 2;\n", "FILE:1: sample: count takes one value; usage: count NUMBER;"},
        {"flag { }\n", "FILE:1: sample: flag takes one value; usage: flag on|off;"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sample s;
        char err[1024];
        int rc = sample_read(cases[i][0], &s, err, sizeof(err));
        if (rc != -1 || !strstr(err, cases[i][1])) {
            fprintf(stderr, "  %s -> %d \"%s\"\n", cases[i][0], rc, err);
            CHECK(0);
        }
    }
}

TEST(a_directive_stands_only_in_the_blocks_its_line_names)
{
    struct config cfg;
    char err[1024];
    CHECK_EQ_INT(load_text_known("class a {\n  count 2;\n  flag on;\n}\n", sample_known, &cfg,
                                 err, sizeof(err)),
                 -1);
    CHECK(strstr(err, "FILE:3: class a: \"flag\" directive is not allowed in a class"));
    CHECK(!strstr(err, "FILE:2:")); /* count may stand in a class */
    config_free(&cfg);
}

TEST(every_error_of_the_file_is_reported_one_a_line)
{
    struct config cfg;
    char err[1024];
    CHECK_EQ_INT(load_text("threads x;\nroot a;\nfrob;\nroot b;\nclass k { threads y; }\n",
                           &cfg, err, sizeof(err)),
                 -1);
    CHECK(strcmp(err, "FILE:1: threads: invalid number \"x\" (0 to 1024)\n"
                      "FILE:3: unknown directive \"frob\"\n"
                      "FILE:4: \"root\" directive is duplicate (first at FILE:2)\n"
                      "FILE:5: class k: threads: invalid number \"y\" (0 to 1024)") == 0);
    config_free(&cfg);
}

TEST(every_module_directive_is_in_some_module_table)
{
    static const char *const names[] = {
        "mime_types", "mime_magic", "default_type", "autoindex", "autoindex_hidden",
        "open_file_cache", "open_file_cache_max", "open_file_cache_valid",
        "open_file_cache_inactive", "open_file_cache_mem_max", "handler", "cgi",
        "cgi_timeout", "cgi_max_processes", "cgi_stderr", "gzip", "gzip_types",
        "gzip_min_length", "gzip_max_length", "gzip_static", "gzip_comp_level",
        "gzip_cache_size", "gzip_max_compressions", "gzip_cpu_per_second", "brotli",
        "brotli_comp_level", "zstd", "zstd_comp_level", "autoindex_cache_size",
        "autoindex_cache_valid",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const struct conf_directive *d = module_known_directive(names[i], CONF_TOP);
        CHECK(d && (d->contexts & CONF_TOP));
        bool repeats = strcmp(names[i], "handler") == 0 || strcmp(names[i], "cgi") == 0;
        CHECK_EQ_INT(d->repeat, repeats ? CONF_REPEATS : CONF_ONCE);
    }
}
