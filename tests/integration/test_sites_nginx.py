"""Sites and locations against nginx, the oracle.

One configuration of three `server` blocks (the issue's, extended to reach every rule) is
run as written by nginx and by lfhttpd over the same document roots. Each row of REQUESTS
is one request and its own test: the row states what nginx answers (so nginx itself is
checked against the row), then lfhttpd must answer as nginx did, except where the row
names a difference we keep on purpose, and why.

What is compared: the status, Location, Cache-Control, Expires (a fixed date as such, a
relative one as its distance from Date, which must be the max-age), every X- header the
configuration adds, WWW-Authenticate, and, where a file or a configured text is served,
Content-Type and the body. Every file's body is its own path under the test's directory,
so the body tells which file was served. Error bodies nginx makes itself and the Server
header are never compared.
"""
import base64
import email.utils
import os
import re
import socket
import subprocess

import pytest

from conftest import Nginx, Server, check_clean_exit, free_port, with_ports, scaled

# Both servers read this text verbatim. ROOT is the test's directory, {portN} each daemon's
# own ports. The first server is not the default one, so that choosing the default_server
# over the first server shows; the second listens on both ports; the third only on the
# second port, where the second is the first server and no server is the default.
SITES = r"""
map $http_x_tier $tier {
    default basic;
    gold premium;
    ~*^sil(ver)$ "s-$1";
}
server {
    listen 127.0.0.1:{port0};
    server_name other.example *.other.example;
    return 301 https://example.org$request_uri;
}
server {
    listen 127.0.0.1:{port0} default_server;
    listen 127.0.0.1:{port1};
    server_name example.org www.example.org *.example.org;
    root ROOT/site;
    index index.html;
    default_type text/plain;
    expires 1h;
    add_header X-Site main;
    error_page 404 /404.html;
    error_page 500 502 503 504 /50x.html;

    location / {
        try_files $uri $uri/ /index.html;
    }
    location /exact {
        return 200 "prefix /exact\n";
    }
    location = /exact {
        return 200 "exact /exact\n";
    }
    location /assets/ {
        expires 1y;
        add_header X-Frame-Options DENY;
        add_header X-Content-Type-Options nosniff always;
    }
    location ~ ^/assets/.*\.css$ {
        add_header X-Regex assets-css;
    }
    location ~ \.css$ {
        add_header X-Regex css;
    }
    location ~* \.(png|jpe?g|svg|woff2)$ {
        expires 30d;
    }
    location ^~ /static/ {
        root ROOT/shared;
    }
    location ~ ^/cap/(?<word>[a-z]+)/(\d+)$ {
        add_header X-Cap "$1-$2-$word";
        return 200 "cap $word $2\n";
    }
    location ~ ^/capgo/(.+)$ {
        return 302 /order/$1;
    }
    location ~ ^/captry/(?<leaf>[a-z]+\.txt)$ {
        add_header X-Leaf $leaf;
        try_files /order/$1 =404;
    }
    location ~ (?i)^/inline-case/ {
        return 200 "inline case\n";
    }
    location ~ /\.(?!well-known) {
        return 403;
    }
    location ~ \.php$ {
        return 200 "php\n";
    }
    location = /old {
        return 301 /new;
    }
    location = /moved {
        return 302 http://example.com/elsewhere;
    }
    location = /gone {
        return 403 "gone for good\n";
    }
    location = /hello {
        return 200 "hello $host\n";
    }
    location = /broken {
        return 502;
    }
    location = /unavailable {
        return 503;
    }
    location /strict/ {
        try_files $uri =404;
    }
    location /app/ {
        try_files $uri @fallback;
    }
    location @fallback {
        return 200 "fallback for $uri\n";
    }
    location /downloads/ {
        alias ROOT/files/;
        autoindex on;
    }
    location /nest/ {
        add_header X-Nest outer;
        expires 2h;
        location /nest/inner/ {
            add_header X-Nest inner;
        }
        location ~ \.txt$ {
            add_header X-Nest txt;
        }
        location /nest/hidden/ {
            internal;
        }
    }
    location /hidden/ {
        internal;
        add_header X-Hidden yes;
    }
    location /to-hidden/ {
        try_files $uri /hidden/f.txt;
    }
    location = /hidden-error {
        error_page 404 /hidden/f.txt;
        return 404;
    }
    location = /favicon.png {
        alias ROOT/files/fav.png;
    }
    location /one-file.txt {
        alias ROOT/files/a.txt;
    }
    location /no-root/ {
        root ROOT/no-such-directory;
    }
    location /no-alias/ {
        alias ROOT/no-such-directory/;
    }
    location /dl {
        alias ROOT/files/;
    }
    location /cache/epoch/ {
        expires epoch;
    }
    location /cache/max/ {
        expires max;
    }
    location /cache/off/ {
        expires off;
    }
    location /own-headers/ {
        add_header X-Own yes;
    }
    location /inherits/ {
        expires 2h;
    }
    location /private/ {
        auth_basic "Staff only";
        auth_basic_user_file ROOT/htpasswd;
        allow 10.0.0.0/8;
        allow 127.0.0.1;
        deny all;
    }
    location /office/ {
        allow 10.0.0.0/8;
        allow 192.168.0.0/16;
        deny all;
    }
    location /members/ {
        try_files $uri /private/f.txt;
    }
    location /branch/ {
        try_files $uri /office/f.txt;
    }
    location /lost/ {
        error_page 404 /private/f.txt;
    }
    location /lost-office/ {
        error_page 404 /office/f.txt;
    }
    location /order/ {
        try_files $uri /order/b.txt =404;
    }
    location /pick/ {
        try_files $uri/ $uri.html =404;
    }
    location /rw/ {
        rewrite ^/rw/page$ /exact last;
        rewrite ^/rw/perm/(.*)$ /$1 permanent;
        rewrite ^/rw/temp/(.*)$ /$1 redirect;
        rewrite ^/rw/ext/(.*)$ https://example.com/$1?;
        rewrite ^/rw/tag/(.*)$ https://example.com/$1?tag=x;
        rewrite ^/rw/stay/(.*)$ /$1 break;
        rewrite ^/rw/loop$ /rw/loop last;
        return 403;
    }
    location /if/ {
        if ($arg_on) {
            return 200 "on\n";
        }
        if ($arg_k != open) {
            return 403;
        }
        if ($arg_p ~ ^(\w+)-(\w+)$) {
            return 200 "pair $2 $1\n";
        }
        return 200 "open\n";
    }
    location /setvar/ {
        set $a "x$arg_q";
        if ($arg_q = 1) {
            set $a one;
        }
        set $b "$a-$host";
        add_header X-Set $b;
        return 200 "a=$a b=$b\n";
    }
    location = /tier {
        return 200 "tier $tier\n";
    }
    location /loopback/ {
        deny 127.0.0.2;
        allow 127.0.0.0/8;
        allow ::1;
        deny all;
    }
}
server {
    listen 127.0.0.1:{port0};
    server_name certbot.test www.certbot.test;
    if ($host = www.certbot.test) {
        return 301 https://$host$request_uri;
    }
    return 404;
}
server {
    listen 127.0.0.1:{port0};
    server_name ~^(?<sub>[a-z]+)\.regex\.test$ ~^(\d+)\.num\.test$;
    default_type text/plain;
    location / {
        return 200 "sub $sub num $1\n";
    }
    location ~ ^/own/(\w+)$ {
        return 200 "sub $sub own $1\n";
    }
}
server {
    listen 127.0.0.1:{port1};
    server_name third.test;
    root ROOT/third;
    add_header X-Site third;

    location /always/ {
        add_header X-Always yes always;
        add_header X-Only-Ok yes;
    }
}
"""

# What nginx alone needs around SITES (lfhttpd has these built in): the media types of the
# files served, and the charset lfhttpd adds to every text type.
NGINX_HTTP = """\
    types {
        text/html html;
        text/plain txt;
        text/css css;
        text/javascript js;
        image/png png;
        image/jpeg jpg jpeg;
        image/svg+xml svg;
    }
    charset utf-8;
    charset_types text/html text/plain text/css text/javascript;
"""

# What lfhttpd alone needs around SITES: its top-level settings.
LFHTTPD_TOP = """\
threads 2;
error_log stderr debug;
access_log "{access}";
shutdown_timeout 5s;
"""

FILES = [
    "site/index.html", "site/404.html", "site/50x.html", "site/page.html",
    "site/dir/index.html", "site/noindex/file.txt", "site/style.css", "site/STYLE.CSS",
    "site/assets/app.js", "site/assets/app.css", "site/assets/logo.png",
    "site/assets/PHOTO.JPG", "site/static/logo.png", "site/exactly",
    "site/strict/file.txt", "site/app/real.txt", "site/cache/epoch/f.txt",
    "site/cache/max/f.txt", "site/cache/off/f.txt", "site/own-headers/f.txt",
    "site/inherits/f.txt", "site/private/f.txt", "site/office/f.txt", "site/loopback/f.txt",
    "site/new", "site/noext", "site/hidden/f.txt", "site/nest/f.html", "site/nest/inner/f.html",
    "site/nest/inner/f.txt", "site/nest/hidden/f.html", "site/nest/f.css", "site/order/a.txt", "site/order/b.txt",
    "site/pick/page/index.html", "site/pick/page.html",
    "shared/static/logo.png", "shared/static/style.css",
    "files/a.txt", "files/fav.png", "files/sub/index.html", "files/list/one.txt", "files/list/two.txt",
    "third/index.html", "third/always/f.txt",
]

USERS = {"alice": "secret", "bob": "hunter2"}

# A fixed Expires: nginx's `epoch` and `max`.
EPOCH = "Thu, 01 Jan 1970 00:00:01 GMT"
MAX = "Thu, 31 Dec 2037 23:55:55 GMT"
MAX_AGE = {"1h": "max-age=3600", "2h": "max-age=7200", "30d": "max-age=2592000",
           "1y": "max-age=31536000", "max": "max-age=315360000", "epoch": "no-cache"}


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def row(name, target, status, body=None, *, method="GET", host="example.org", port=0,
        auth=None, version="1.1", expect=None, differs=None, headers=None):
    """One request: method, target, Host (None: no Host line), port (0 or 1: which of the
    daemon's two), Authorization (user, password). status and body (the file served, the
    text returned, "" for HEAD, or None when the body is an error page the server makes
    itself: then neither body nor Content-Type is compared) are nginx's answer, `expect`
    more of it ({observed key: value}); `differs` is (why, {key: lfhttpd's own value})
    where lfhttpd answers otherwise on purpose."""
    return pytest.param(dict(target=target, status=status, body=body, method=method,
                             host=host, port=port, auth=auth, version=version,
                             headers=headers or {},
                             expect=expect or {}, differs=differs), id=name)


NGINX_CHALLENGE = 'Basic realm="Staff only"'
# RFC 7617 section 2.1 asks for the charset parameter; nginx does not send it.
CHALLENGE = ("our challenge names the charset (RFC 7617)",
             {"www-authenticate": 'Basic realm="Staff only", charset="UTF-8"'})
# nginx's alias in a prefix location without a trailing slash lets the rest of the path
# continue the alias's last name: /dl../x is ROOT/files/../x, /dla.txt is ROOT/files/a.txt.
ALIAS_REST = "an alias is continued only by a rest that starts with '/'"
# PCRE2_DOLLAR_ENDONLY: `\.php$` does not take a path that a decoded %0A ends.
DOLLAR = "our `$` matches at the very end of the path only, never before a final newline"
LISTING = "our listing page is our own HTML, sent with X-Content-Type-Options: nosniff"

MAIN = {"x-site": ["main"], "cache-control": MAX_AGE["1h"], "expires": "date+max-age"}
NONE = {"x-site": None, "cache-control": None, "expires": None}

REQUESTS = [
    # --- location precedence
    row("prefix_root_serves_the_index", "/", 200, "site/index.html", expect=MAIN),
    row("prefix_root_serves_a_file", "/page.html", 200, "site/page.html", expect=MAIN),
    row("query_string_does_not_change_the_location", "/page.html?a=1&b", 200,
        "site/page.html"),
    row("exact_location_beats_prefix", "/exact", 200, "exact /exact"),
    row("exact_location_matches_the_decoded_path", "/ex%61ct", 200, "exact /exact"),
    row("exact_location_matches_after_dot_segments", "/dir/../exact?x=1", 200,
        "exact /exact"),
    row("longest_prefix_when_exact_does_not_match", "/exactly", 200, "prefix /exact"),
    row("longest_prefix_under_a_shorter_one", "/exact/more", 200, "prefix /exact"),
    row("prefix_when_no_regex_matches", "/assets/app.js", 200, "site/assets/app.js",
        expect={"cache-control": MAX_AGE["1y"], "x-site": None,
                "x-frame-options": ["DENY"], "x-content-type-options": ["nosniff"]}),
    row("regex_beats_a_longer_prefix", "/assets/logo.png", 200, "site/assets/logo.png",
        expect={"cache-control": MAX_AGE["30d"], "x-frame-options": None,
                "x-site": ["main"]}),
    row("case_insensitive_regex_matches_any_case", "/assets/PHOTO.JPG", 200,
        "site/assets/PHOTO.JPG", expect={"cache-control": MAX_AGE["30d"]}),
    row("first_regex_in_file_order_wins", "/assets/app.css", 200, "site/assets/app.css",
        expect={"x-regex": ["assets-css"], "x-site": None, "cache-control": MAX_AGE["1h"]}),
    row("later_regex_when_the_first_does_not_match", "/style.css", 200, "site/style.css",
        expect={"x-regex": ["css"]}),
    row("case_sensitive_regex_ignores_other_case", "/STYLE.CSS", 200, "site/STYLE.CSS",
        expect={"x-regex": None, "x-site": ["main"]}),
    row("caret_tilde_prefix_stops_the_regexes", "/static/logo.png", 200,
        "shared/static/logo.png", expect={"cache-control": MAX_AGE["1h"]}),
    row("caret_tilde_prefix_stops_a_css_regex", "/static/style.css", 200,
        "shared/static/style.css", expect={"x-regex": None}),
    row("exact_location_does_not_match_a_longer_path", "/old/page", 200, "site/index.html"),
    # --- PCRE2: captures, lookahead, inline options, `$`
    row("regex_numbered_and_named_captures_in_return_and_add_header", "/cap/abc/42", 200,
        "cap abc 42", expect={"x-cap": ["abc-42-abc"], "x-site": None}),
    row("regex_capture_in_a_return_redirect", "/capgo/a.txt", 302, None,
        expect={"location": "http://example.org:PORT/order/a.txt"}),
    row("regex_captures_in_try_files_and_add_header_after_it", "/captry/b.txt", 200,
        "site/order/b.txt", expect={"x-leaf": ["b.txt"], "x-site": None}),
    row("regex_inline_caseless_option", "/INLINE-CASE/x", 200, "inline case"),
    row("regex_negative_lookahead_refuses_a_dot_directory", "/.git/config", 403, None),
    row("regex_negative_lookahead_spares_well_known", "/.well-known/x", 200,
        "site/index.html"),
    row("regex_dollar_at_the_end", "/x.php", 200, "php"),
    row("regex_dollar_before_a_decoded_final_newline", "/x.php%0A", 200, "php",
        differs=(DOLLAR, {"body": "site/index.html",
                          "content-type": "text/html; charset=utf-8", **MAIN})),
    # --- try_files
    row("try_files_uri_serves_the_file", "/strict/file.txt", 200, "site/strict/file.txt"),
    row("try_files_equals_404_serves_the_error_page", "/strict/missing.txt", 404,
        "site/404.html", expect=NONE),
    row("try_files_uri_does_not_match_a_directory", "/strict/", 404, "site/404.html"),
    row("try_files_falls_back_to_a_uri", "/settings/profile", 200, "site/index.html",
        expect=MAIN),
    row("try_files_dir_of_a_path_without_slash_redirects", "/dir", 301, None,
        expect={"location": "http://example.org:PORT/dir/", **MAIN}),
    row("try_files_dir_without_an_index_is_forbidden", "/noindex/", 403, None,
        expect=NONE),
    row("try_files_first_of_two_existing_files_wins", "/order/a.txt", 200,
        "site/order/a.txt"),
    row("try_files_directory_first_wins_over_an_existing_file", "/pick/page", 301, None,
        expect={"location": "http://example.org:PORT/pick/page/"}),
    row("try_files_named_location_as_fallback", "/app/missing", 200,
        "fallback for /app/missing"),
    row("try_files_named_location_not_needed", "/app/real.txt", 200, "site/app/real.txt"),
    row("index_in_a_directory", "/dir/", 200, "site/dir/index.html"),
    row("file_without_extension_has_the_default_type", "/noext", 200, "site/noext",
        expect={"content-type": "text/plain; charset=utf-8"}),
    # --- return
    # --- the rewrite module
    row("rewrite_last_searches_the_location_again", "/rw/page?a=1", 200, "exact /exact"),
    row("rewrite_permanent_is_301_with_the_arguments", "/rw/perm/page.html?a=1", 301, None,
        expect={"location": "http://example.org:PORT/page.html?a=1"}),
    row("rewrite_redirect_is_302", "/rw/temp/page.html", 302, None,
        expect={"location": "http://example.org:PORT/page.html"}),
    row("rewrite_to_a_url_ending_with_a_question_mark_drops_the_arguments",
        "/rw/ext/p?a=1", 302, None, expect={"location": "https://example.com/p"}),
    row("rewrite_to_a_url_with_arguments_appends_the_request_ones", "/rw/tag/p?a=1", 302,
        None, expect={"location": "https://example.com/p?tag=x&a=1"}),
    row("rewrite_break_serves_the_new_path_in_the_location", "/rw/stay/exactly", 200,
        "site/exactly"),
    row("rewrite_no_match_goes_on_to_return", "/rw/other", 403, None),
    row("rewrite_last_loop_is_500", "/rw/loop", 500, None),
    row("if_host_equals_redirects_as_certbot_writes_it", "/a?b=1", 301, None,
        host="www.certbot.test",
        expect={"location": "https://www.certbot.test/a?b=1"}),
    row("if_host_equals_is_false_for_another_host", "/a", 404, None, host="certbot.test"),
    row("if_variable_is_true", "/if/?on=1&k=open", 200, "on"),
    row("if_variable_zero_is_false", "/if/?on=0", 403, None),
    row("if_not_equal_holds_for_another_value", "/if/?k=shut", 403, None),
    row("if_regex_groups_are_the_request_ones", "/if/?k=open&p=left-right", 200,
        "pair right left"),
    row("if_falls_through_to_return", "/if/?k=open", 200, "open"),
    row("set_gives_a_value_with_variables", "/setvar/?q=2", 200, "a=x2 b=x2-example.org",
        expect={"x-set": ["x2-example.org"]}),
    row("set_inside_if_replaces_the_value", "/setvar/?q=1", 200,
        "a=one b=one-example.org"),
    row("map_default_without_a_match", "/tier", 200, "tier basic"),
    row("map_key_matches_without_case", "/tier", 200, "tier premium",
        headers={"X-Tier": "GOLD"}),
    row("map_caseless_regex_value_takes_its_groups", "/tier", 200, "tier s-VER",
        headers={"X-Tier": "SilVER"}),
    row("return_301_to_a_path_is_made_absolute", "/old", 301, None,
        expect={"location": "http://example.org:PORT/new", "x-site": ["main"]}),
    row("return_302_to_a_url", "/moved", 302, None,
        expect={"location": "http://example.com/elsewhere", "cache-control": MAX_AGE["1h"]}),
    row("return_403_with_text", "/gone", 403, "gone for good", expect={"x-site": None}),
    row("return_200_text_with_a_variable", "/hello", 200, "hello example.org"),
    row("return_text_variable_host_is_lowercased", "/hello", 200, "hello www.example.org",
        host="WWW.Example.ORG."),
    row("server_level_return_before_any_location", "/private/f.txt", 301, None,
        host="other.example",
        expect={"location": "https://example.org/private/f.txt", "x-site": None}),
    row("server_level_return_keeps_the_query", "/page.html?a=1", 301, None,
        host="other.example", expect={"location": "https://example.org/page.html?a=1"}),
    # --- alias
    row("alias_serves_a_file", "/downloads/a.txt", 200, "files/a.txt"),
    row("alias_serves_a_directory_index", "/downloads/sub/", 200, "files/sub/index.html"),
    row("alias_autoindex_lists_the_directory", "/downloads/list/", 200,
        "listing: one.txt two.txt",
        differs=(LISTING, {"x-content-type-options": ["nosniff"]})),
    row("alias_directory_without_slash_redirects", "/downloads/sub", 301, None,
        expect={"location": "http://example.org:PORT/downloads/sub/"}),
    row("alias_missing_file_serves_the_error_page", "/downloads/nope.txt", 404,
        "site/404.html"),
    row("alias_without_trailing_slash_on_the_location", "/dl/a.txt", 200, "files/a.txt"),
    row("nested_location_inherits_its_parents_expires", "/nest/inner/f.html", 200,
        "site/nest/inner/f.html", expect={"x-nest": ["inner"], "cache-control": MAX_AGE["2h"]}),
    row("outer_location_when_no_nested_one_matches", "/nest/f.html", 200, "site/nest/f.html",
        expect={"x-nest": ["outer"]}),
    row("nested_regex_wins_over_a_nested_prefix", "/nest/inner/f.txt", 200,
        "site/nest/inner/f.txt", expect={"x-nest": ["txt"], "cache-control": MAX_AGE["2h"]}),
    row("outer_regex_when_no_nested_regex_matches", "/nest/f.css", 200, "site/nest/f.css",
        expect={"x-regex": ["css"], "x-nest": None}),
    row("nested_internal_location_named_by_the_request_is_404", "/nest/hidden/f.html", 404,
        "site/404.html"),
    row("internal_location_named_by_the_request_is_404", "/hidden/f.txt", 404,
        "site/404.html"),
    row("try_files_reaches_an_internal_location", "/to-hidden/none", 200, "site/hidden/f.txt",
        expect={"x-hidden": ["yes"]}),
    row("error_page_reaches_an_internal_location", "/hidden-error", 404, "site/hidden/f.txt",
        expect={"x-hidden": None}),
    row("alias_to_a_file_in_an_exact_location", "/favicon.png", 200, "files/fav.png"),
    row("alias_to_a_file_in_a_prefix_location", "/one-file.txt", 200, "files/a.txt"),
    row("alias_to_a_file_has_nothing_beneath_it", "/one-file.txt/x", 404, "site/404.html"),
    row("missing_root_serves_the_error_page", "/no-root/a.txt", 404, "site/404.html"),
    row("missing_alias_serves_the_error_page", "/no-alias/a.txt", 404, "site/404.html"),
    row("alias_rest_continuing_a_name_is_refused", "/dla.txt", 200, "files/a.txt",
        differs=(ALIAS_REST, {"status": 404, "body": "site/404.html",
                              "content-type": "text/html; charset=utf-8",
                              "cache-control": None, "expires": None, "x-site": None})),
    row("alias_rest_with_dot_dot_is_refused", "/dl../site/page.html", 200, "site/page.html",
        differs=(ALIAS_REST, {"status": 404, "body": "site/404.html",
                              "content-type": "text/html; charset=utf-8",
                              "cache-control": None, "expires": None, "x-site": None})),
    # --- error_page
    row("error_page_serves_50x_for_502", "/broken", 502, "site/50x.html"),
    row("error_page_serves_50x_for_503", "/unavailable", 503, "site/50x.html"),
    row("error_page_on_a_caret_tilde_location", "/static/missing.png", 404, "site/404.html"),
    row("error_page_drops_the_always_header_of_the_first_location", "/assets/missing.js",
        404, "site/404.html", expect={"x-content-type-options": None, **NONE}),
    row("no_error_page_in_the_server_gives_a_plain_404", "/missing.txt", 404, None,
        host="third.test", port=1),
    # --- expires
    row("expires_1y", "/assets/app.js", 200, "site/assets/app.js",
        expect={"cache-control": MAX_AGE["1y"], "expires": "date+max-age"}),
    row("expires_30d", "/assets/logo.png", 200, "site/assets/logo.png",
        expect={"cache-control": MAX_AGE["30d"], "expires": "date+max-age"}),
    row("expires_epoch", "/cache/epoch/f.txt", 200, "site/cache/epoch/f.txt",
        expect={"cache-control": "no-cache", "expires": EPOCH}),
    row("expires_max", "/cache/max/f.txt", 200, "site/cache/max/f.txt",
        expect={"cache-control": MAX_AGE["max"], "expires": MAX}),
    row("expires_off_cancels_the_servers", "/cache/off/f.txt", 200, "site/cache/off/f.txt",
        expect={"cache-control": None, "expires": None}),
    row("expires_in_a_location_replaces_the_servers", "/inherits/f.txt", 200,
        "site/inherits/f.txt", expect={"cache-control": MAX_AGE["2h"]}),
    # --- add_header inheritance
    row("add_header_in_a_location_drops_the_servers", "/own-headers/f.txt", 200,
        "site/own-headers/f.txt", expect={"x-own": ["yes"], "x-site": None}),
    row("location_without_add_header_inherits_the_servers", "/inherits/f.txt", 200,
        "site/inherits/f.txt", expect={"x-site": ["main"]}),
    row("add_header_always_on_a_404", "/always/missing.txt", 404, None, host="third.test",
        port=1, expect={"x-always": ["yes"], "x-only-ok": None, "x-site": None}),
    row("add_header_always_and_plain_on_a_200", "/always/f.txt", 200, "third/always/f.txt",
        host="third.test", port=1,
        expect={"x-always": ["yes"], "x-only-ok": ["yes"], "x-site": None}),
    # --- allow / deny
    row("deny_all_after_other_networks", "/office/f.txt", 403, None),
    row("allow_loopback_network", "/loopback/f.txt", 200, "site/loopback/f.txt"),
    # --- auth_basic
    row("auth_basic_without_credentials", "/private/f.txt", 401, None,
        expect={"www-authenticate": NGINX_CHALLENGE}, differs=CHALLENGE),
    row("auth_basic_with_the_right_password", "/private/f.txt", 200, "site/private/f.txt",
        auth=("alice", "secret"), expect={"www-authenticate": None}),
    row("auth_basic_second_user", "/private/f.txt", 200, "site/private/f.txt",
        auth=("bob", "hunter2")),
    row("auth_basic_with_a_wrong_password", "/private/f.txt", 401, None,
        auth=("alice", "wrong"), expect={"www-authenticate": NGINX_CHALLENGE},
        differs=CHALLENGE),
    row("auth_basic_with_an_unknown_user", "/private/f.txt", 401, None,
        auth=("mallory", "secret"), differs=CHALLENGE),
    # --- access rules of the location an internal redirect leads to
    row("try_files_redirect_into_auth_basic_asks_for_credentials", "/members/none", 401,
        None, expect={"www-authenticate": NGINX_CHALLENGE}, differs=CHALLENGE),
    row("try_files_redirect_into_auth_basic_with_the_password", "/members/none", 200,
        "site/private/f.txt", auth=("alice", "secret")),
    row("try_files_redirect_into_deny_all_is_forbidden", "/branch/none", 403, None),
    row("error_page_into_auth_basic_asks_for_credentials", "/lost/none", 401, None,
        expect={"www-authenticate": NGINX_CHALLENGE}, differs=CHALLENGE),
    row("error_page_into_deny_all_is_forbidden", "/lost-office/none", 403, None),
    # --- server selection
    row("host_exact_name", "/page.html", 200, "site/page.html", host="www.example.org"),
    row("host_leading_wildcard", "/page.html", 301, None, host="www.other.example",
        expect={"location": "https://example.org/page.html"}),
    row("host_leading_wildcard_deeper_name", "/page.html", 301, None,
        host="a.b.other.example"),
    row("host_trailing_dot_and_case", "/page.html", 301, None, host="OTHER.Example."),
    row("host_with_a_port", "/page.html", 301, None, host="other.example:8080"),
    row("host_unknown_goes_to_the_default_server", "/page.html", 200, "site/page.html",
        host="nobody.test"),
    row("host_absent_in_http_1_0_goes_to_the_default_server", "/page.html", 200,
        "site/page.html", host=None, version="1.0"),
    row("absolute_form_authority_wins_over_host", "http://other.example/page.html", 301,
        None, host="example.org", expect={"location": "https://example.org/page.html"}),
    row("absolute_form_authority_of_the_default_site", "http://Example.ORG/page.html", 200,
        "site/page.html", host="other.example"),
    row("address_first_then_host", "/page.html", 200, "site/page.html",
        host="other.example", port=1),
    row("first_server_of_an_address_without_default", "/page.html", 200, "site/page.html",
        host="nobody.test", port=1),
    row("host_selects_a_server_on_the_second_address", "/index.html", 200,
        "third/index.html", host="third.test", port=1, expect={"x-site": ["third"]}),
    row("host_regex_name_with_a_named_capture", "/", 200, "sub shop num shop",
        host="shop.regex.test"),
    row("host_regex_name_with_a_numbered_capture", "/", 200, "sub  num 42",
        host="42.num.test"),
    row("host_regex_name_capture_and_location_capture", "/own/x", 200, "sub shop own x",
        host="shop.regex.test"),
    row("name_of_a_server_on_another_address_does_not_match", "/page.html", 200,
        "site/page.html", host="third.test"),
    # --- HEAD
    row("head_of_a_file", "/page.html", 200, "", method="HEAD", expect=MAIN),
    row("head_of_a_fallback", "/settings/profile", 200, "", method="HEAD"),
    row("head_of_a_return", "/old", 301, None, method="HEAD",
        expect={"location": "http://example.org:PORT/new"}),
    row("head_of_an_error_page", "/strict/missing.txt", 404, "", method="HEAD"),
    row("head_of_a_protected_file", "/private/f.txt", 401, None, method="HEAD",
        differs=CHALLENGE),
]


# ------------------------------------------------------------------- the two daemons


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The roots, each file's body its own path; an htpasswd of bcrypt hashes."""
    root = tmp_path_factory.mktemp("sites")
    for rel in FILES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel + "\n")
    htpasswd = root / "htpasswd"
    for i, (user, password) in enumerate(USERS.items()):
        subprocess.run(["htpasswd", "-B", "-b"] + (["-c"] if i == 0 else []) +
                       [str(htpasswd), user, password], check=True, capture_output=True,
                       timeout=scaled(30))
    return root


def sites(tree):
    return SITES.replace("ROOT", str(tree))


def start_lfhttpd(dirpath, tree):
    """lfhttpd on SITES with ports of its own: (server, ports)."""
    for attempt in range(3):  # a port picked may be taken before lfhttpd binds it
        ports = [free_port(), free_port()]
        top = LFHTTPD_TOP.format(access=os.path.join(str(dirpath), "access.log"))
        try:
            return Server(dirpath / f"try{attempt}", None,
                          conf=top + with_ports(sites(tree), ports)), ports
        except RuntimeError as e:
            if "in use" not in str(e) or attempt == 2:
                raise


@pytest.fixture(scope="module")
def daemons(tree, tmp_path_factory):
    """nginx, and lfhttpd or the reason it did not start (each row then fails with it, after
    checking nginx's answer)."""
    theirs = Nginx(tmp_path_factory.mktemp("nginx"), None, NGINX_HTTP + sites(tree), http=True)
    try:
        ours = start_lfhttpd(tmp_path_factory.mktemp("lfhttpd"), tree)
    except RuntimeError as e:
        ours = e
    yield theirs, ours
    theirs.stop()
    if not isinstance(ours, Exception):
        check_clean_exit(ours[0])


def test_both_servers_start_with_the_configuration(tree, tmp_path, nginx):
    theirs = nginx(None, NGINX_HTTP + sites(tree), http=True)
    assert len(theirs.ports) == 2 and theirs.answers()
    ours, ports = start_lfhttpd(tmp_path, tree)
    try:
        log = ours.error_log()
        for port in ports:
            assert f"listening on 127.0.0.1:{port}" in log
    finally:
        check_clean_exit(ours)


# ------------------------------------------------------------------- one request


def exchange(port, r):
    """Send the row's request on a new connection; (status, [(name, value)], body)."""
    head = [f"{r['method']} {r['target']} HTTP/{r['version']}"]
    if r["host"] is not None:
        head.append(f"Host: {r['host']}")
    if r["auth"]:
        head.append("Authorization: " + basic(*r["auth"]))
    head += [f"{k}: {v}" for k, v in r.get("headers", {}).items()]
    head.append("Connection: close")
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    headers = [(k.strip().lower(), v.strip())
               for k, _, v in (line.partition(":") for line in lines[1:])]
    if ("transfer-encoding", "chunked") in headers and r["method"] != "HEAD":
        body = dechunk(body)
    return int(lines[0].split(" ")[1]), headers, body


def dechunk(data):
    out = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out, data = out + data[:size], data[size + 2:]


def http_time(value):
    return email.utils.parsedate_to_datetime(value).timestamp()


def observe(port, r):
    """What the row compares, with the daemon's own port written PORT."""
    status, headers, body = exchange(port, r)
    values = {}
    for name, value in headers:
        values.setdefault(name, []).append(value.replace(f":{port}", ":PORT"))
    first = {name: v[0] for name, v in values.items()}
    seen = {"status": status, "location": first.get("location"),
            "cache-control": first.get("cache-control"),
            "www-authenticate": first.get("www-authenticate"),
            "expires": expires(first)}
    for name, v in values.items():
        if name.startswith("x-"):
            seen[name] = v
    if r["body"] is not None:
        seen["content-type"] = first.get("content-type")
        seen["body"] = served(body)
    return seen


def expires(first):
    """A fixed Expires as it is; else "date+max-age" when it is Date plus Cache-Control's
    max-age (a second apart at most), else its distance from Date."""
    value = first.get("expires")
    if value is None or value in (EPOCH, MAX):
        return value
    delta = http_time(value) - http_time(first["date"])
    m = re.fullmatch(r"max-age=(\d+)", first.get("cache-control", ""))
    if m and abs(delta - int(m.group(1))) <= 1:
        return "date+max-age"
    return f"date+{delta:.0f}"


def served(body):
    """Which file (its path), which text, or which entries a directory listing links to
    (each page is its server's own: the links to "./", "../", "../../"... and the layout
    are not compared)."""
    text = body.decode("utf-8", "replace")
    if "<html" in text.lower() and "href=" in text:
        names = {n for n in re.findall(r'href="([^"]+)"', text)
                 if not re.fullmatch(r"(\./|(\.\./)+)", n)}
        return "listing: " + " ".join(sorted(names))
    return text.strip()


@pytest.mark.parametrize("r", REQUESTS)
def test_answers_as_nginx_does(daemons, r):
    theirs, ours = daemons
    nginx_seen = observe(theirs.ports[r["port"]], r)
    expected = {"status": r["status"], **r["expect"]}
    if r["body"] is not None:
        expected["body"] = r["body"]
    assert {k: nginx_seen.get(k) for k in expected} == expected, \
        f"nginx does not answer as the row says: {nginx_seen}"
    if isinstance(ours, Exception):
        pytest.fail(f"lfhttpd did not start on the configuration: {ours}")
    server, ports = ours
    wanted = dict(nginx_seen)
    if r["differs"]:
        wanted.update(r["differs"][1])
    wanted = {k: v for k, v in wanted.items() if v is not None}
    ours_seen = {k: v for k, v in observe(ports[r["port"]], r).items() if v is not None}
    assert ours_seen == wanted
