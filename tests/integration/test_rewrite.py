"""The rewrite module, as nginx runs it: `rewrite` in a server (before the location is
searched) and in a location (after), its flags, its captures and the request's arguments,
`break`, and `return` in the order written."""
import http.client

import pytest

SITE = r"""
threads 2;
error_log stderr debug;
access_log "{access}";
shutdown_timeout 5s;
server {{
    listen 127.0.0.1:0;
    root "{root}";
    default_type text/plain;
    if ($host = www.example.org) {{
        return 301 https://example.org$request_uri;
    }}
    set $who server;
    rewrite ^/old/(.*)$ /new/$1;
    rewrite ^/moved/(.*)$ /new/$1 permanent;
    rewrite ^/temp/(.*)$ /new/$1 redirect;
    rewrite ^/away/(.*)$ https://example.com/$1;
    rewrite ^/plain/(.*)$ https://example.com/$1?;
    rewrite ^/tagged/(.*)$ https://example.com/$1?tag=x;
    rewrite ^/twice/(.*)$ /twice/x$1;
    location /new/ {{
        return 200 "new $uri args=$args\n";
    }}
    location /last/ {{
        rewrite ^/last/(\w+)$ /new/$1 last;
        return 403;
    }}
    location /stay/ {{
        rewrite ^/stay/y(.*)$ /stay/x$1 break;
        return 403;
    }}
    location /chain/ {{
        rewrite ^/chain/a$ /chain/b;
        rewrite ^/chain/b$ /new/from-chain;
    }}
    location /first/ {{
        return 410;
        rewrite ^ /new/never last;
    }}
    location /stop/ {{
        break;
        return 403;
    }}
    location /loop/ {{
        rewrite ^ /loop/again last;
    }}
    location /drop/ {{
        rewrite ^/drop/(.*)$ /new/$1? last;
    }}
    location /if/ {{
        if ($arg_on) {{
            return 200 "on is true\n";
        }}
        if ($http_x_agent ~* ^(bot)-(\w+)$) {{
            return 200 "agent $2\n";
        }}
        if ($arg_k != open) {{
            return 403;
        }}
        if (-f "{root}/stay/x.txt") {{
            rewrite ^ /stay/x.txt break;
        }}
        return 404;
    }}
    location /notfile/ {{
        if (!-f "{root}/missing") {{
            rewrite ^ /new/no-file last;
        }}
    }}
    location /set/ {{
        set $a "x$arg_q";
        if ($arg_q = 1) {{
            set $a one;
        }}
        set $b "$a-$who";
        add_header X-B $b;
        return 200 "a=$a b=$b unset=$unset\n";
    }}
    location /unset/ {{
        set $unset yes;
    }}
    location /own/ {{
        rewrite ^/own/(.*)$ /new/$1?k=v last;
    }}
}}
"""


@pytest.fixture
def site(start_server, docroot, tmp_path):
    (docroot / "stay").mkdir()
    (docroot / "stay" / "x.txt").write_text("stay x\n")
    (docroot / "twice").mkdir()
    (docroot / "twice" / "xp.txt").write_text("twice xp\n")
    (docroot / "twice" / "xxp.txt").write_text("twice xxp\n")
    (docroot / "stop").mkdir()
    (docroot / "stop" / "f.txt").write_text("stop f\n")
    conf = SITE.format(root=docroot, access=tmp_path / "access.log")
    return start_server(docroot, conf=conf)


def get(server, target, **headers):
    c = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        c.request("GET", target, headers=headers)
        r = c.getresponse()
        return r.status, r.getheader("Location"), r.read().decode()
    finally:
        c.close()


def test_server_rewrite_runs_before_the_location_search(site):
    assert get(site, "/old/page")[::2] == (200, "new /new/page args=\n")


def test_server_rewrites_run_once_when_no_location_matches(site):
    assert get(site, "/twice/p.txt")[::2] == (200, "twice xp\n")


def test_server_rewrite_keeps_the_request_arguments(site):
    assert get(site, "/old/page?a=1")[::2] == (200, "new /new/page args=a=1\n")


def test_permanent_is_301_with_the_arguments(site):
    status, location, _ = get(site, "/moved/p?a=1")
    assert (status, location.split("/", 3)[3]) == (301, "new/p?a=1")


def test_redirect_is_302(site):
    status, location, _ = get(site, "/temp/p")
    assert (status, location.split("/", 3)[3]) == (302, "new/p")


def test_replacement_with_a_scheme_is_a_302(site):
    assert get(site, "/away/p?a=1")[:2] == (302, "https://example.com/p?a=1")


def test_replacement_ending_with_a_question_mark_drops_the_arguments(site):
    assert get(site, "/plain/p?a=1")[:2] == (302, "https://example.com/p")


def test_replacement_arguments_come_before_the_request_ones(site):
    assert get(site, "/tagged/p?a=1")[:2] == (302, "https://example.com/p?tag=x&a=1")


def test_last_searches_the_location_again(site):
    assert get(site, "/last/word")[::2] == (200, "new /new/word args=\n")


def test_rewrite_that_does_not_match_goes_on_to_the_next_directive(site):
    assert get(site, "/last/two/words")[0] == 403


def test_break_flag_serves_the_new_path_in_the_same_location(site):
    assert get(site, "/stay/y.txt")[::2] == (200, "stay x\n")


def test_rewrites_without_flag_chain_then_search_again(site):
    assert get(site, "/chain/a")[::2] == (200, "new /new/from-chain args=\n")


def test_return_before_a_rewrite_answers_first(site):
    assert get(site, "/first/x")[0] == 410


def test_break_directive_stops_before_return(site):
    assert get(site, "/stop/f.txt")[::2] == (200, "stop f\n")


def test_last_loop_ends_in_500_after_ten_searches(site):
    assert get(site, "/loop/x")[0] == 500


def test_internal_rewrite_ending_with_a_question_mark_drops_the_arguments(site):
    assert get(site, "/drop/p?a=1")[::2] == (200, "new /new/p args=\n")


def test_internal_rewrite_arguments_come_before_the_request_ones(site):
    assert get(site, "/own/p?a=1")[::2] == (200, "new /new/p args=k=v&a=1\n")


def test_invalid_flag_is_refused_at_load(tmp_path, docroot):
    import subprocess
    from conftest import BIN
    conf = tmp_path / "bad.conf"
    conf.write_text(f'server {{ listen 127.0.0.1:0; root "{docroot}"; '
                    "rewrite ^ /x forever; }\n")
    r = subprocess.run([BIN, "-c", str(conf), "-t"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and 'invalid flag "forever"' in r.stderr + r.stdout


def test_if_host_equals_redirects_as_certbot_writes_it(site):
    assert get(site, "/a?b=1", Host="www.example.org")[:2] == (
        301, "https://example.org/a?b=1")


def test_if_host_equals_is_false_for_another_host(site):
    assert get(site, "/old/p", Host="example.org")[0] == 200


def test_if_variable_is_true_when_neither_empty_nor_zero(site):
    assert get(site, "/if/?on=yes&k=open")[::2] == (200, "on is true\n")


def test_if_variable_zero_is_false(site):
    assert get(site, "/if/?on=0")[0] == 403


def test_if_caseless_regex_captures_are_the_request_groups(site):
    assert get(site, "/if/", **{"X-Agent": "BOT-crawler"})[::2] == (200, "agent crawler\n")


def test_if_not_equal_holds_for_another_value(site):
    assert get(site, "/if/?k=shut")[0] == 403


def test_if_file_exists_runs_its_rewrite(site):
    assert get(site, "/if/?k=open")[::2] == (200, "stay x\n")


def test_if_not_file_holds_for_a_missing_file(site):
    assert get(site, "/notfile/p")[::2] == (200, "new /new/no-file args=\n")


def test_directive_nginx_refuses_inside_if_is_refused_at_load(tmp_path, docroot):
    import subprocess
    from conftest import BIN
    conf = tmp_path / "bad.conf"
    conf.write_text(f'server {{ listen 127.0.0.1:0; root "{docroot}"; '
                    "location / { if ($arg_a) { index x.html; } } }\n")
    r = subprocess.run([BIN, "-c", str(conf), "-t"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and \
        '"index" directive is not allowed inside if' in r.stderr + r.stdout


@pytest.mark.parametrize("statement,message", [
    ("root;", "root takes one value"),
    ("root { }", "root takes one value"),
    ("error_page 404;", "error_page takes 2 or more values"),
])
def test_core_setting_inside_if_with_wrong_form_is_refused_at_load(tmp_path, docroot,
                                                                  statement, message):
    import subprocess
    from conftest import BIN
    conf = tmp_path / "bad.conf"
    conf.write_text(f'server {{ listen 127.0.0.1:0; root "{docroot}"; '
                    f"location / {{ if ($arg_a) {{ {statement} }} }} }}\n")
    r = subprocess.run([BIN, "-c", str(conf), "-t"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and message in r.stderr + r.stdout, r.stderr


def test_set_gives_a_value_with_variables(site):
    assert get(site, "/set/?q=2")[::2] == (200, "a=x2 b=x2-server unset=\n")


def test_set_inside_if_replaces_the_value(site):
    assert get(site, "/set/?q=1")[::2] == (200, "a=one b=one-server unset=\n")


def test_set_value_reaches_add_header(site):
    c = http.client.HTTPConnection(site.host, site.port, timeout=10)
    try:
        c.request("GET", "/set/?q=3")
        assert c.getresponse().getheader("X-B") == "x3-server"
    finally:
        c.close()


def test_set_of_a_builtin_variable_is_refused_at_load(tmp_path, docroot):
    import subprocess
    from conftest import BIN
    conf = tmp_path / "bad.conf"
    conf.write_text(f'server {{ listen 127.0.0.1:0; root "{docroot}"; set $uri /x; }}\n')
    r = subprocess.run([BIN, "-c", str(conf), "-t"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and 'set: invalid variable "$uri"' in r.stderr + r.stdout


MAPS = r"""
threads 2;
error_log stderr debug;
access_log "{access}";
shutdown_timeout 5s;
map $http_host $name {{
    hostnames;
    default 0;
    example.com 1;
    *.example.com 2;
    .example.net 3;
    wap.* 4;
}}
map $http_user_agent $agent {{
    default "none";
    "~*^opera (mini|mobi)" "opera-$1";
    Curl/8 exact;
    include "{include}";
}}
map $uri $chained {{
    default "$agent+$name";
    volatile;
}}
server {{
    listen 127.0.0.1:0;
    root "{root}";
    default_type text/plain;
    location / {{
        return 200 "name=$name agent=$agent\n";
    }}
    location /chained {{
        return 200 "$chained\n";
    }}
}}
"""


@pytest.fixture
def maps(start_server, docroot, tmp_path):
    include = tmp_path / "agents.map"
    include.write_text("Included/1 from-file;\n")
    conf = MAPS.format(root=docroot, access=tmp_path / "access.log", include=include)
    return start_server(docroot, conf=conf)


@pytest.mark.parametrize("host,value", [("example.com", "1"), ("a.example.com", "2"),
                                        ("example.net", "3"), ("b.example.net", "3"),
                                        ("wap.example.org", "4"), ("wap.example.com", "2"),
                                        ("other.test", "0")])
def test_map_hostnames_choose_exact_then_wildcards_then_default(maps, host, value):
    assert get(maps, "/", Host=host)[2] == f"name={value} agent=none\n"


def test_map_exact_key_is_matched_without_case(maps):
    assert get(maps, "/", **{"User-Agent": "curl/8"})[2] == "name=0 agent=exact\n"


def test_map_caseless_regex_value_takes_its_groups(maps):
    assert get(maps, "/", **{"User-Agent": "Opera Mini"})[2] == "name=0 agent=opera-Mini\n"


def test_map_include_reads_entries_from_a_file(maps):
    assert get(maps, "/", **{"User-Agent": "Included/1"})[2] == "name=0 agent=from-file\n"


def test_map_value_may_read_other_maps(maps):
    assert get(maps, "/chained", Host="example.com",
               **{"User-Agent": "curl/8"})[2] == "exact+1\n"


MEMO = r"""
threads 1;
error_log stderr debug;
access_log off;
shutdown_timeout 5s;
map $arg_k $kind {{
    default other;
    ~^a a-key;
    ~^b b-key;
}}
map $arg_k $who {{
    default nobody;
    ~^u-(\w+)$ "user-$1";
}}
server {{
    listen 127.0.0.1:0;
    root "{root}";
    default_type text/plain;
    location / {{
        return 200 "$kind $who\n";
    }}
}}
"""


@pytest.fixture
def memo(start_server, docroot):
    """One thread: every request of a test's connection reads the same thread's remembered
    map answers (rewrite.c's map memo)."""
    return start_server(docroot, conf=MEMO.format(root=docroot))


def answers(server, keys):
    c = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        out = []
        for k in keys:
            c.request("GET", f"/?k={k}")
            out.append(c.getresponse().read().decode())
        return out
    finally:
        c.close()


def test_map_answers_the_same_for_a_key_read_again(memo):
    assert answers(memo, ["a1", "b1", "a1", "b1", "zz", "a1", "zz"]) == [
        "a-key nobody\n", "b-key nobody\n", "a-key nobody\n", "b-key nobody\n",
        "other nobody\n", "a-key nobody\n", "other nobody\n"]


def test_map_regex_value_with_groups_is_made_from_each_read_key(memo):
    assert answers(memo, ["u-ann", "u-bob", "u-ann", "u-ann"]) == [
        "other user-ann\n", "other user-bob\n", "other user-ann\n", "other user-ann\n"]


def test_map_keys_of_one_memo_slot_keep_their_own_answers(memo):
    """"a1" and "b8" fall in the same slot of the thread's 64 (their FNV-1a hashes agree
    in the low six bits, whatever the map's address): the second replaces the first."""
    assert answers(memo, ["a1", "b8", "a1", "b8"]) == [
        "a-key nobody\n", "b-key nobody\n", "a-key nobody\n", "b-key nobody\n"]


DOTS = r"""
threads 1;
error_log stderr debug;
access_log off;
shutdown_timeout 5s;
server {{
    listen 127.0.0.1:0;
    root "{root}";
    default_type text/plain;
    location = /go {{
        rewrite ^ /pub/$arg_p last;
    }}
    location = /try {{
        try_files /pub/$arg_p /pub/fallback.txt;
    }}
    location /pub/ {{
    }}
}}
"""


@pytest.fixture
def dots(start_server, docroot):
    (docroot / "pub").mkdir()
    (docroot / "pub" / "a.txt").write_text("pub a\n")
    (docroot / "pub" / "fallback.txt").write_text("fallback\n")
    (docroot / "secret.txt").write_text("secret\n")
    return start_server(docroot, conf=DOTS.format(root=docroot))


def test_rewrite_to_a_path_an_argument_gave_a_dot_segment_is_500(dots):
    """A value expands to a path without dot segments or it is refused (rewrite.h: "not
    clean"), where nginx would hand "/pub/../secret.txt" to the file system as it is."""
    assert get(dots, "/go?p=a.txt")[2] == "pub a\n"
    assert get(dots, "/go?p=../secret.txt")[0] == 500
    assert get(dots, "/go?p=x/..")[0] == 500


def test_try_files_candidate_an_argument_gave_a_dot_segment_is_passed_over(dots):
    assert get(dots, "/try?p=a.txt")[2] == "pub a\n"
    assert get(dots, "/try?p=../secret.txt")[2] == "fallback\n"
    assert get(dots, "/try?p=x/..")[2] == "fallback\n"
