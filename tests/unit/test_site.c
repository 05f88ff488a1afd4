/* Unit tests of sites: server selection by address and Host, location selection, and the
 * load-time checks of server and location blocks. A location or server is recognised by
 * its first statement (`A;`, `tag one;`), which the set keeps for its owners. */
#define TEST_MAIN
#include "test.h"

#include <unistd.h>

#include "config.h"
#include "site.h"

static char err[2048];

static struct site_set *build(const char *text)
{
    return site_set_from_text("site.conf", text, strlen(text), err, sizeof(err));
}

/* The name of a location's first statement, "" for none. */
static const char *loc_tag(const struct site_location *l)
{
    return l && l->first ? l->first->name : "";
}

static const struct site_location *loc_at(const struct site_set *set, const char *path)
{
    return site_location_for(&set->servers[0], path, strlen(path));
}

static bool loc_is(const struct site_set *set, const char *path, const char *tag)
{
    return strcmp(loc_tag(loc_at(set, path)), tag) == 0;
}

/* A server's `tag NAME;` argument, "" when it has none. */
static const char *server_tag(const struct site_server *s)
{
    for (const struct conf_node *n = s ? s->first : NULL; n; n = n->next)
        if (strcmp(n->name, "tag") == 0 && n->n_args == 1)
            return n->args[0];
    return "";
}

/* The server for a connection to addr ("127.0.0.1:8080") with this Host. */
static const char *server_for(const struct site_set *set, const char *addr, const char *host)
{
    struct config_listen l;
    if (config_parse_listen(addr, &l) < 0)
        return "(bad address)";
    struct http_slice h = {host, strlen(host)};
    return server_tag(site_server_for(set, (const struct sockaddr *)&l.addr, h));
}

#define CHECK_HOST(set, addr, host, tag) CHECK(strcmp(server_for(set, addr, host), tag) == 0)

/* Does building text fail with exactly this message? */
static bool refused_with(const char *text, const char *message)
{
    struct site_set *set = build(text);
    site_set_free(set);
    if (!set && strstr(err, message))
        return true;
    fprintf(stderr, "  expected \"%s\", got \"%s\"\n", message, set ? "(accepted)" : err);
    return false;
}

/* --- locations: the example of nginx's `location` documentation ------------------------- */

static const char nginx_example[] = "server {\n"
                                    "  location = / { A; }\n"
                                    "  location / { B; }\n"
                                    "  location /documents/ { C; }\n"
                                    "  location ^~ /images/ { D; }\n"
                                    "  location ~* \\.(gif|jpg|jpeg)$ { E; }\n"
                                    "}\n";

TEST(nginx_example_slash_is_the_exact_location_A)
{
    struct site_set *set = build(nginx_example);
    CHECK(set);
    CHECK(loc_is(set, "/", "A"));
    site_set_free(set);
}

TEST(nginx_example_index_html_is_the_root_prefix_B)
{
    struct site_set *set = build(nginx_example);
    CHECK(set);
    CHECK(loc_is(set, "/index.html", "B"));
    site_set_free(set);
}

TEST(nginx_example_document_html_is_the_longer_prefix_C)
{
    struct site_set *set = build(nginx_example);
    CHECK(set);
    CHECK(loc_is(set, "/documents/document.html", "C"));
    site_set_free(set);
}

TEST(nginx_example_images_gif_is_the_caret_tilde_prefix_D_not_the_regex)
{
    struct site_set *set = build(nginx_example);
    CHECK(set);
    CHECK(loc_is(set, "/images/1.gif", "D"));
    site_set_free(set);
}

TEST(nginx_example_documents_jpg_is_the_regex_E_over_prefix_C)
{
    struct site_set *set = build(nginx_example);
    CHECK(set);
    CHECK(loc_is(set, "/documents/1.jpg", "E"));
    site_set_free(set);
}

/* --- locations: each rule ---------------------------------------------------------------- */

TEST(exact_location_wins_over_prefix_and_regex)
{
    struct site_set *set = build("server { location ~ ^/a { R; } location ^~ /a { P; }\n"
                                 "location = /a { X; } }");
    CHECK(set);
    CHECK(loc_is(set, "/a", "X"));
    site_set_free(set);
}

TEST(exact_location_does_not_match_a_longer_path)
{
    struct site_set *set = build("server { location = /a { X; } location / { P; } }");
    CHECK(set);
    CHECK(loc_is(set, "/ab", "P"));
    CHECK(loc_is(set, "/a/", "P"));
    site_set_free(set);
}

TEST(longest_prefix_wins_whatever_the_file_order)
{
    struct site_set *set = build("server { location / { ROOT; } location /a/ { SHORT; }\n"
                                 "location /a/b/ { LONG; } }");
    CHECK(set);
    CHECK(loc_is(set, "/a/b/c", "LONG"));
    CHECK(loc_is(set, "/a/x", "SHORT"));
    CHECK(loc_is(set, "/b", "ROOT"));
    site_set_free(set);
}

TEST(prefix_matches_bytes_not_path_segments)
{
    struct site_set *set = build("server { location /api { API; } location / { ROOT; } }");
    CHECK(set);
    CHECK(loc_is(set, "/apis", "API"));
    site_set_free(set);
}

TEST(matching_regex_wins_over_the_longest_plain_prefix)
{
    struct site_set *set = build("server { location /img/ { P; } location ~ \\.png$ { R; } }");
    CHECK(set);
    CHECK(loc_is(set, "/img/a.png", "R"));
    site_set_free(set);
}

TEST(longest_prefix_is_used_when_no_regex_matches)
{
    struct site_set *set = build("server { location /img/ { P; } location ~ \\.png$ { R; } }");
    CHECK(set);
    CHECK(loc_is(set, "/img/a.gif", "P"));
    site_set_free(set);
}

TEST(caret_tilde_longest_prefix_stops_the_regexes)
{
    struct site_set *set = build("server { location ~ \\.png$ { R; } location ^~ /s/ { S; } }");
    CHECK(set);
    CHECK(loc_is(set, "/s/a.png", "S"));
    site_set_free(set);
}

TEST(caret_tilde_stops_nothing_when_a_longer_plain_prefix_matches)
{
    struct site_set *set = build("server { location ^~ /s/ { S; } location /s/deep/ { D; }\n"
                                 "location ~ \\.png$ { R; } }");
    CHECK(set);
    CHECK(loc_is(set, "/s/deep/a.png", "R"));
    CHECK(loc_is(set, "/s/deep/a.txt", "D"));
    site_set_free(set);
}

TEST(regexes_are_tried_in_file_order)
{
    struct site_set *set = build("server { location ~ /a { FIRST; } location ~ /a/b { SECOND; } }");
    CHECK(set);
    CHECK(loc_is(set, "/a/b", "FIRST"));
    site_set_free(set);
}

TEST(tilde_regex_is_case_sensitive)
{
    struct site_set *set = build("server { location ~ \\.png$ { R; } }");
    CHECK(set);
    CHECK(loc_is(set, "/a.png", "R"));
    CHECK(loc_at(set, "/a.PNG") == NULL);
    site_set_free(set);
}

TEST(tilde_star_regex_ignores_case)
{
    struct site_set *set = build("server { location ~* \\.png$ { R; } }");
    CHECK(set);
    CHECK(loc_is(set, "/A.PnG", "R"));
    site_set_free(set);
}

TEST(prefixes_are_case_sensitive)
{
    struct site_set *set = build("server { location /Admin/ { A; } }");
    CHECK(set);
    CHECK(loc_at(set, "/admin/x") == NULL);
    site_set_free(set);
}

TEST(no_matching_location_is_null)
{
    struct site_set *set = build("server { location /a/ { A; } location = /b { B; } }");
    CHECK(set);
    CHECK(loc_at(set, "/c") == NULL);
    site_set_free(set);
}

TEST(regex_sees_the_path_up_to_its_length_only)
{
    struct site_set *set = build("server { location ~ ^/a$ { R; } }");
    CHECK(set);
    CHECK(strcmp(loc_tag(site_location_for(&set->servers[0], "/ab", 2)), "R") == 0);
    site_set_free(set);
}

TEST(named_location_is_found_by_name_and_never_by_path)
{
    struct site_set *set = build("server { location @app { APP; } }");
    CHECK(set);
    CHECK(strcmp(loc_tag(site_named_location(&set->servers[0], "@app")), "APP") == 0);
    CHECK(site_named_location(&set->servers[0], "@other") == NULL);
    CHECK(loc_at(set, "@app") == NULL);
    site_set_free(set);
}

TEST(modifier_attached_to_the_pattern_is_read_as_nginx_does)
{
    struct site_set *set = build("server { location =/x { X; } location ~*\\.gif$ { G; }\n"
                                 "location ^~/s/ { S; } }");
    CHECK(set);
    CHECK(loc_is(set, "/x", "X"));
    CHECK(loc_is(set, "/a.GIF", "G"));
    CHECK(loc_is(set, "/s/a.gif", "S"));
    site_set_free(set);
}

TEST(location_keeps_its_block_statements_and_line_for_owners)
{
    struct site_set *set = build("server {\n  location /a/ {\n    root /srv;\n    index i; } }");
    CHECK(set);
    const struct site_location *l = loc_at(set, "/a/b");
    CHECK(l && l->node->line == 2 && l->first && strcmp(l->first->name, "root") == 0);
    CHECK(l->first->next && strcmp(l->first->next->name, "index") == 0);
    CHECK(l->server == &set->servers[0]);
    site_set_free(set);
}

TEST(configuration_without_servers_has_no_sites)
{
    struct site_set *set = build("root www;\nlisten 8080;\nclass api { match path /api/; }\n");
    CHECK(set);
    CHECK_EQ_INT(set->n_servers, 0);
    CHECK_HOST(set, "127.0.0.1:8080", "example.org", "");
    site_set_free(set);
}

/* --- servers ------------------------------------------------------------------------------- */

static const char two_sites[] = "server { tag one; listen 8080; server_name example.org; }\n"
                                "server { tag two; listen 8080; server_name other.example; }\n";

TEST(exact_name_selects_its_server)
{
    struct site_set *set = build(two_sites);
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "other.example", "two");
    CHECK_HOST(set, "127.0.0.1:8080", "example.org", "one");
    site_set_free(set);
}

TEST(host_is_compared_without_case)
{
    struct site_set *set = build("server { tag one; listen 8080; }\n"
                                 "server { tag two; listen 8080; server_name Other.Example; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "OTHER.example", "two");
    site_set_free(set);
}

TEST(host_port_and_one_trailing_dot_are_removed)
{
    struct site_set *set = build(two_sites);
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "other.example:8080", "two");
    CHECK_HOST(set, "127.0.0.1:8080", "other.example.", "two");
    CHECK_HOST(set, "127.0.0.1:8080", "other.example.:8080", "two");
    CHECK_HOST(set, "127.0.0.1:8080", "other.example..", "one");
    site_set_free(set);
}

TEST(ipv6_literal_host_keeps_its_brackets_and_loses_its_port)
{
    struct site_set *set = build("server { tag one; listen 8080; }\n"
                                 "server { tag two; listen 8080; server_name [::1]; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "[::1]:8080", "two");
    site_set_free(set);
}

TEST(leading_wildcard_matches_names_of_any_depth)
{
    struct site_set *set = build("server { tag one; listen 8080; }\n"
                                 "server { tag two; listen 8080; server_name *.example.org; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "www.example.org", "two");
    CHECK_HOST(set, "127.0.0.1:8080", "a.b.example.org", "two");
    site_set_free(set);
}

TEST(leading_wildcard_does_not_match_the_bare_name)
{
    struct site_set *set = build("server { tag one; listen 8080; }\n"
                                 "server { tag two; listen 8080; server_name *.example.org; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "example.org", "one");
    CHECK_HOST(set, "127.0.0.1:8080", "badexample.org", "one");
    site_set_free(set);
}

TEST(dot_name_matches_the_bare_name_and_its_subdomains)
{
    struct site_set *set = build("server { tag one; listen 8080; }\n"
                                 "server { tag two; listen 8080; server_name .example.org; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "example.org", "two");
    CHECK_HOST(set, "127.0.0.1:8080", "www.example.org", "two");
    CHECK_HOST(set, "127.0.0.1:8080", "xexample.org", "one");
    site_set_free(set);
}

TEST(longest_leading_wildcard_wins)
{
    struct site_set *set = build("server { tag short; listen 8080; server_name *.org; }\n"
                                 "server { tag long; listen 8080; server_name *.example.org; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "www.example.org", "long");
    CHECK_HOST(set, "127.0.0.1:8080", "www.other.org", "short");
    site_set_free(set);
}

TEST(exact_name_wins_over_wildcards)
{
    struct site_set *set = build("server { tag wild; listen 8080; server_name *.example.org; }\n"
                                 "server { tag exact; listen 8080; server_name www.example.org; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "www.example.org", "exact");
    site_set_free(set);
}

TEST(trailing_wildcard_matches_when_no_leading_one_does)
{
    struct site_set *set = build("server { tag one; listen 8080; }\n"
                                 "server { tag mail; listen 8080; server_name mail.*; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "mail.example.org", "mail");
    CHECK_HOST(set, "127.0.0.1:8080", "mail", "one");
    site_set_free(set);
}

TEST(leading_wildcard_wins_over_trailing_wildcard)
{
    struct site_set *set = build("server { tag trail; listen 8080; server_name mail.*; }\n"
                                 "server { tag lead; listen 8080; server_name *.example.org; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "mail.example.org", "lead");
    site_set_free(set);
}

TEST(unknown_host_goes_to_the_default_server)
{
    struct site_set *set = build("server { tag one; listen 8080; server_name a.example; }\n"
                                 "server { tag two; listen 8080 default_server; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "b.example", "two");
    CHECK_HOST(set, "127.0.0.1:8080", "", "two");
    site_set_free(set);
}

TEST(unknown_host_goes_to_the_first_server_without_a_default)
{
    struct site_set *set = build(two_sites);
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "unknown.example", "one");
    site_set_free(set);
}

TEST(underscore_is_a_name_that_never_matches)
{
    struct site_set *set = build("server { tag one; listen 8080; server_name a.example; }\n"
                                 "server { tag two; listen 8080; server_name _; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "b.example", "one");
    site_set_free(set);
}

TEST(empty_name_matches_a_request_without_host)
{
    struct site_set *set = build("server { tag one; listen 8080; server_name a.example; }\n"
                                 "server { tag two; listen 8080; server_name \"\"; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "", "two");
    site_set_free(set);
}

TEST(servers_are_chosen_among_those_of_the_connection_address)
{
    struct site_set *set = build("server { tag a; listen 8080; server_name x.example; }\n"
                                 "server { tag b; listen 9090; server_name x.example; }\n"
                                 "server { tag c; listen 9090; server_name y.example; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:9090", "x.example", "b");
    CHECK_HOST(set, "127.0.0.1:8080", "y.example", "a");
    site_set_free(set);
}

TEST(default_server_is_per_address)
{
    struct site_set *set = build("server { tag a; listen 8080 default_server; listen 9090; }\n"
                                 "server { tag b; listen 8080; listen 9090 default_server; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "z", "a");
    CHECK_HOST(set, "127.0.0.1:9090", "z", "b");
    site_set_free(set);
}

TEST(exact_listen_address_hides_the_wildcard_one)
{
    struct site_set *set = build("server { tag any; listen 8080; server_name x.example; }\n"
                                 "server { tag lo; listen 127.0.0.1:8080; server_name y; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "x.example", "lo");
    CHECK_HOST(set, "127.0.0.2:8080", "x.example", "any");
    site_set_free(set);
}

TEST(ipv4_mapped_local_address_is_its_ipv4_one)
{
    struct site_set *set = build("server { tag lo; listen 127.0.0.1:8080; }\n");
    CHECK(set);
    CHECK_HOST(set, "[::ffff:127.0.0.1]:8080", "", "lo");
    site_set_free(set);
}

TEST(unix_socket_servers_are_chosen_by_path)
{
    struct site_set *set = build("server { tag a; listen unix:/run/a.sock; }\n"
                                 "server { tag b; listen unix:/run/b.sock; }\n"
                                 "server { tag any; listen 8080; }\n");
    CHECK(set);
    CHECK_HOST(set, "unix:/run/a.sock", "", "a");
    CHECK_HOST(set, "unix:/run/b.sock", "", "b");
    CHECK_HOST(set, "unix:/run/c.sock", "", ""); /* no wildcard reaches a Unix socket */
    CHECK_HOST(set, "127.0.0.1:8080", "", "any");
    site_set_free(set);
}

TEST(unix_listen_path_must_fit_a_socket_address)
{
    struct config_listen l;
    CHECK(config_parse_listen("unix:/run/x.sock", &l) == 0);
    CHECK(l.addr.ss_family == AF_UNIX);
    CHECK(config_parse_listen("unix:", &l) < 0);
    char path[5 + 109];
    memcpy(path, "unix:", 5);
    memset(path + 5, 'x', 108); /* 108 bytes: no room for the NUL in sun_path */
    path[113] = '\0';
    CHECK(config_parse_listen(path, &l) < 0);
}

TEST(no_server_on_the_connection_address_is_null)
{
    struct site_set *set = build(two_sites);
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:9999", "example.org", "");
    site_set_free(set);
}

TEST(server_without_listen_takes_the_top_level_listens)
{
    struct site_set *set = build("listen 127.0.0.1:7070;\nserver { tag a; }\n");
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:7070", "", "a");
    CHECK_HOST(set, "127.0.0.1:8080", "", "");
    site_set_free(set);
}

TEST(server_without_any_listen_listens_on_8080)
{
    struct site_set *set = build("server { tag a; }\n");
    CHECK(set);
    CHECK_HOST(set, "10.1.2.3:8080", "", "a");
    site_set_free(set);
}

/* --- checks at load ------------------------------------------------------------------------- */

TEST(duplicate_location_names_both_lines)
{
    CHECK(refused_with("server {\n location /a { }\n location /a { }\n}\n",
                       "site.conf:3: duplicate location \"/a\" (first at site.conf:2)"));
}

TEST(plain_and_caret_tilde_prefix_of_one_uri_are_duplicates)
{
    CHECK(refused_with("server {\n location /a { }\n location ^~ /a { }\n}\n",
                       "site.conf:3: duplicate location \"/a\" (first at site.conf:2)"));
}

TEST(duplicate_regex_location_is_an_error)
{
    CHECK(refused_with("server {\n location ~* \\.x$ { }\n location ~* \\.x$ { }\n}\n",
                       "site.conf:3: duplicate location \"\\.x$\" (first at site.conf:2)"));
}

TEST(exact_and_prefix_location_of_one_uri_may_coexist)
{
    struct site_set *set = build("server { location = /a { E; } location /a { P; } }");
    CHECK(set);
    CHECK(loc_is(set, "/a", "E"));
    CHECK(loc_is(set, "/ab", "P"));
    site_set_free(set);
}

TEST(invalid_regex_is_reported_with_what_and_where)
{
    CHECK(refused_with("server {\n location ~ a( { }\n}\n",
                       "site.conf:2: location: invalid regular expression \"a(\": missing "
                       "closing parenthesis at offset 2"));
}

TEST(inline_option_regex_location_matches)
{
    struct site_set *set = build("server { location ~ (?i)\\.png$ { R; } }");
    CHECK(set);
    CHECK(loc_is(set, "/A.PNG", "R"));
    site_set_free(set);
}

TEST(pcre_shorthand_regex_location_matches)
{
    struct site_set *set = build("server { location ~ ^/users/\\d+$ { R; } }");
    CHECK(set);
    CHECK(loc_is(set, "/users/42", "R"));
    CHECK(loc_at(set, "/users/x") == NULL);
    site_set_free(set);
}

TEST(two_default_servers_on_one_address_are_an_error)
{
    CHECK(refused_with("server {\n listen 8080 default_server;\n}\n"
                       "server {\n listen 8080 default_server;\n}\n",
                       "site.conf:5: a second default_server for 8080 (the first at "
                       "site.conf:2)"));
}

TEST(default_servers_on_different_addresses_are_fine)
{
    struct site_set *set = build("server { listen 8080 default_server; }\n"
                                 "server { listen 8081 default_server; }\n");
    CHECK(set);
    site_set_free(set);
}

TEST(location_at_the_top_level_is_an_error)
{
    CHECK(refused_with("root www;\nlocation / { }\n",
                       "site.conf:2: \"location\" is only allowed in a server block"));
}

TEST(location_in_a_class_is_an_error)
{
    CHECK(refused_with("class api {\n location / { }\n}\n",
                       "site.conf:2: \"location\" is only allowed in a server block"));
}

TEST(server_inside_a_server_is_an_error)
{
    CHECK(refused_with("server {\n server { }\n}\n",
                       "site.conf:2: \"server\" is only allowed at the top level"));
}

TEST(server_inside_a_location_is_an_error)
{
    CHECK(refused_with("server {\n location / {\n  server { }\n }\n}\n",
                       "site.conf:3: \"server\" is only allowed at the top level"));
}

TEST(nested_prefix_location_outside_its_parent_is_refused)
{
    CHECK(refused_with("server {\n location /a/ {\n  location /b/ { }\n }\n}\n",
                       "site.conf:3: location \"/b/\" is outside location \"/a/\""));
}

TEST(location_inside_an_exact_location_is_refused)
{
    CHECK(refused_with("server {\n location = /a {\n  location /a { }\n }\n}\n",
                       "site.conf:3: location \"/a\" cannot be inside the exact location"));
}

TEST(nested_named_location_is_refused)
{
    CHECK(refused_with("server {\n location / {\n  location @x { }\n }\n}\n",
                       "site.conf:3: named location \"@x\" can be on the server level only"));
}

static const char nested[] = "server {\n"
                             " location /a/ { A; location /a/b/ { AB; } location ~ \\.png$ { APNG; } }\n"
                             " location ~ \\.(png|gif)$ { IMG; location ~ big { IMGBIG; } }\n"
                             " location ^~ /s/ { S; location ~ \\.gif$ { SGIF; } }\n"
                             "}\n";

TEST(nested_prefix_location_is_chosen_under_its_parent)
{
    struct site_set *set = build(nested);
    CHECK(set);
    CHECK(loc_is(set, "/a/b/x.txt", "AB"));
    CHECK(loc_is(set, "/a/x.txt", "A"));
    site_set_free(set);
}

TEST(regex_nested_in_the_longest_prefix_wins_over_the_outer_regexes)
{
    struct site_set *set = build(nested);
    CHECK(set);
    CHECK(loc_is(set, "/a/x.png", "APNG"));
    CHECK(loc_is(set, "/a/b/x.png", "APNG"));
    site_set_free(set);
}

TEST(outer_regex_wins_over_a_nested_prefix_when_no_nested_regex_matches)
{
    struct site_set *set = build(nested);
    CHECK(set);
    CHECK(loc_is(set, "/a/b/x.gif", "IMG"));
    site_set_free(set);
}

TEST(regex_nested_in_a_matching_regex_location_is_searched)
{
    struct site_set *set = build(nested);
    CHECK(set);
    CHECK(loc_is(set, "/x/big.gif", "IMGBIG"));
    CHECK(loc_is(set, "/x/small.gif", "IMG"));
    site_set_free(set);
}

TEST(caret_tilde_parent_tries_its_nested_regexes_but_not_the_outer_ones)
{
    struct site_set *set = build(nested);
    CHECK(set);
    CHECK(loc_is(set, "/s/x.gif", "SGIF"));
    CHECK(loc_is(set, "/s/x.png", "S"));
    site_set_free(set);
}

TEST(listen_parameter_none_of_nginx_linux_ones_is_refused_by_the_sites)
{
    CHECK(refused_with("server {\n listen 8080 bogus;\n}\n",
                       "site.conf:2: listen: unsupported parameter \"bogus\" (only "
                       "default_server, http2, ssl, reuseport, proxy_protocol, bind"));
}

TEST(listen_reuseport_marks_only_its_address_shared)
{
    struct site_set *set = build("server {\n listen 8443 ssl reuseport default_server;\n}\n"
                                 "server {\n listen 8080;\n}\n");
    CHECK(set && set->n_addrs == 2);
    CHECK(set && set->addrs[0].listen.reuseport && set->addrs[0].listen.ssl);
    CHECK(set && set->addrs[0].default_server);
    CHECK(set && !set->addrs[1].listen.reuseport);
    site_set_free(set);
}

TEST(listen_ssl_makes_the_address_a_tls_one)
{
    struct site_set *set = build("server {\n listen 8443 ssl;\n}\nserver {\n listen 8443;\n}\n"
                                 "server {\n listen 8080;\n}\n");
    CHECK(set && set->n_addrs == 2 && set->addrs[0].listen.ssl && !set->addrs[1].listen.ssl);
    site_set_free(set);
}

TEST(invalid_listen_address_in_a_server_is_refused)
{
    CHECK(refused_with("server {\n listen nowhere:x;\n}\n",
                       "site.conf:2: listen: invalid address \"nowhere:x\""));
}

TEST(same_listen_twice_in_one_server_is_refused)
{
    CHECK(refused_with("server {\n listen 8080;\n listen 8080;\n}\n",
                       "site.conf:3: listen: 8080 twice in one server"));
}

TEST(invalid_regex_server_name_is_refused_with_pcre2_message)
{
    CHECK(refused_with("server {\n server_name ~^www(\\d+$;\n}\n",
                       "site.conf:2: server_name: invalid regular expression \"^www(\\d+$\": "
                       "missing closing parenthesis at offset 9"));
}

static const char regex_names[] =
    "server { tag dflt; listen 8080; }\n"
    "server { tag first; listen 8080; server_name ~^(?<sub>[a-z]+)\\.example\\.org$; }\n"
    "server { tag second; listen 8080; server_name ~\\.example\\.org$; }\n"
    "server { tag lead; listen 8080; server_name *.lead.example.org; }\n"
    "server { tag trail; listen 8080; server_name trail.*; }\n"
    "server { tag exact; listen 8080; server_name x.y.example.org; }\n";

TEST(regex_server_names_come_after_exact_and_wildcard_names)
{
    struct site_set *set = build(regex_names);
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "x.y.example.org", "exact");
    CHECK_HOST(set, "127.0.0.1:8080", "a.lead.example.org", "lead");
    CHECK_HOST(set, "127.0.0.1:8080", "trail.example.org", "trail");
    site_set_free(set);
}

TEST(first_matching_regex_server_name_in_file_order_wins)
{
    struct site_set *set = build(regex_names);
    CHECK(set);
    CHECK_HOST(set, "127.0.0.1:8080", "www.example.org", "first");
    CHECK_HOST(set, "127.0.0.1:8080", "WWW.Example.ORG", "first"); /* without case */
    CHECK_HOST(set, "127.0.0.1:8080", "a.b.example.org", "second");
    CHECK_HOST(set, "127.0.0.1:8080", "example.com", "dflt");
    site_set_free(set);
}

TEST(regex_server_name_captures_are_slices_of_the_host)
{
    struct site_set *set = build(regex_names);
    CHECK(set);
    struct config_listen l;
    CHECK(config_parse_listen("127.0.0.1:8080", &l) == 0);
    const char *host = "shop.example.org:8080";
    struct regex_captures caps;
    const struct site_server *s = site_server_find(set, (const struct sockaddr *)&l.addr,
                                                   (struct http_slice){host, strlen(host)},
                                                   &caps);
    CHECK(strcmp(server_tag(s), "first") == 0);
    size_t len;
    const char *sub = regex_group_named(&caps, "sub", 3, &len);
    CHECK(sub == host && len == 4);
    site_set_free(set);
}

TEST(wildcard_in_the_middle_of_a_name_is_refused)
{
    CHECK(refused_with("server {\n server_name www.*.example.org;\n}\n",
                       "site.conf:2: server_name: invalid wildcard \"www.*.example.org\""));
}

TEST(unknown_location_modifier_is_refused)
{
    CHECK(refused_with("server {\n location !~ /a { }\n}\n",
                       "site.conf:2: location: unknown modifier \"!~\""));
}

TEST(location_without_a_block_is_refused)
{
    CHECK(refused_with("server {\n location /a;\n}\n", "site.conf:2: location: usage:"));
}

TEST(server_with_values_is_refused)
{
    CHECK(refused_with("server www {\n}\n", "site.conf:1: server: usage: server { ... }"));
}

TEST(every_error_is_reported_not_only_the_first)
{
    CHECK(!build("server {\n location ~ ( { }\n listen 8080 spdy;\n}\nlocation / { }\n"));
    CHECK(strstr(err, "site.conf:2:") && strstr(err, "site.conf:3:") &&
          strstr(err, "site.conf:5:"));
}

/* --- until requests use sites, config_load refuses them ---------------------------------- */

static int config_load_text(const char *text)
{
    char path[] = "/tmp/lfhttpd-test-site-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -2;
    ssize_t w = write(fd, text, strlen(text));
    close(fd);
    struct config cfg;
    config_defaults(&cfg);
    int rc = w < 0 ? -2 : config_load(&cfg, path, NULL, err, sizeof(err));
    config_free(&cfg);
    unlink(path);
    return rc;
}

TEST(config_load_accepts_server_and_location_blocks)
{
    CHECK_EQ_INT(config_load_text("server {\n listen 8080;\n location / { root www; }\n}\n"),
                 0);
}

TEST(config_load_refuses_a_location_at_the_top_level)
{
    CHECK_EQ_INT(config_load_text("root www;\nlocation / { }\n"), -1);
    CHECK(strstr(err, ":2: \"location\" directive is not allowed at the top level"));
}

TEST(config_load_refuses_a_server_directive_in_a_location)
{
    CHECK_EQ_INT(config_load_text("server {\n location / {\n  server_name a;\n }\n}\n"), -1);
    CHECK(strstr(err, ":3: \"server_name\" directive is not allowed in a location block"));
}

TEST(config_load_refuses_alias_in_a_server)
{
    CHECK_EQ_INT(config_load_text("server {\n alias /tmp/;\n}\n"), -1);
    CHECK(strstr(err, ":2: \"alias\" directive is not allowed in a server block"));
}
