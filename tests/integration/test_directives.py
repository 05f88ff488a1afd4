"""The directive table as `lfhttpd -t` shows it: in every module, a directive that sets one
value is refused when set twice, naming both lines; a count is a number, not a size; a
directive stands only where it belongs; and a file with several errors gets every one
reported, each on its own line.
"""
import subprocess

from conftest import BIN


def check(tmp_path, text):
    """Run `lfhttpd -t` on a file of `text` after a listen and a root of its own (lines 1
    and 2): (exit status, stderr, the file's path)."""
    conf = tmp_path / "t.conf"
    conf.write_text(f'listen 127.0.0.1:0;\nroot "{tmp_path}";\n' + text)
    r = subprocess.run([BIN, "-t", "-c", str(conf)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=30)
    return r.returncode, r.stderr, str(conf)


def assert_each_refused_when_set_twice(tmp_path, directives):
    """Each directive, set on line 3 and again on line 5, is refused naming both lines."""
    for name, first, second in directives:
        code, err, conf = check(tmp_path, f"{name} {first};\n\n{name} {second};\n")
        assert code == 1, (name, err)
        assert f'{conf}:5: "{name}" directive is duplicate (first at {conf}:3)' in err, err


# ---------------------------------------------------------------- set twice, in every module


def test_every_gzip_directive_set_twice_is_refused_with_both_lines(tmp_path):
    assert_each_refused_when_set_twice(tmp_path, [
        ("gzip", "on", "on"),
        ("gzip_types", "text/css", "application/pdf"),
        ("gzip_min_length", "1k", "2k"),
        ("gzip_max_length", "1m", "2m"),
        ("gzip_static", "off", "on"),
        ("gzip_comp_level", "1", "2"),
        ("gzip_cache_size", "0", "1m"),
    ])


def test_every_cgi_setting_set_twice_is_refused_with_both_lines(tmp_path):
    assert_each_refused_when_set_twice(tmp_path, [
        ("cgi_timeout", "5s", "6s"),
        ("cgi_max_processes", "8", "9"),
        ("cgi_stderr", "off", "1k"),
    ])


def test_every_static_directive_set_twice_is_refused_with_both_lines(tmp_path):
    assert_each_refused_when_set_twice(tmp_path, [
        ("open_file_cache", "on", "off"),
        ("open_file_cache_max", "10", "20"),
        ("open_file_cache_valid", "1s", "2s"),
        ("open_file_cache_inactive", "1m", "2m"),
        ("open_file_cache_mem_max", "1k", "2k"),
    ])


def test_every_mime_directive_set_twice_is_refused_with_both_lines(tmp_path):
    assert_each_refused_when_set_twice(tmp_path, [
        ("mime_types", "off", "off"),
        ("mime_magic", "off", "on"),
        ("default_type", "text/plain", "text/html"),
    ])


def test_every_dirlist_directive_set_twice_is_refused_with_both_lines(tmp_path):
    assert_each_refused_when_set_twice(tmp_path, [
        ("autoindex", "on", "off"),
        ("autoindex_hidden", "off", "on"),
    ])


def test_handlers_mount_a_prefix_once_naming_both_lines(tmp_path):
    """`handler` repeats (one mount a line); what it sets once is each prefix."""
    code, err, conf = check(tmp_path, "handler /x echo;\nhandler /y echo;\n"
                                      "handler /x hello;\n")
    assert code == 1, err
    assert f'{conf}:5: handlers: "/x" is already mounted (first at {conf}:3)' in err, err


def test_cgi_mounts_a_prefix_once_naming_both_lines(tmp_path):
    code, err, conf = check(tmp_path, f'cgi /x "{tmp_path}";\n\ncgi /x "{tmp_path}";\n')
    assert code == 1, err
    assert f'{conf}:5: cgi: "/x" is already mounted (first at {conf}:3)' in err, err


# ---------------------------------------------------------------- kinds


def test_cgi_max_processes_is_a_count_not_a_size(tmp_path):
    code, err, conf = check(tmp_path, "cgi_max_processes 1k;\n")
    assert code == 1, err
    assert f'{conf}:3: cgi: cgi_max_processes: invalid number "1k" (1 to 100000)' in err, err
    code, err, _ = check(tmp_path, "cgi_max_processes 1024;\n")
    assert code == 0, err


def test_a_flag_is_read_alike_in_the_core_and_in_a_module(tmp_path):
    code, err, conf = check(tmp_path, "server_tokens yes;\ngzip yes;\n")
    assert code == 1, err
    assert f'{conf}:3: server_tokens: expected "on" or "off", not "yes"' in err, err
    assert f'{conf}:4: gzip: gzip: expected "on" or "off", not "yes"' in err, err


# ---------------------------------------------------------------- where a directive stands


def test_a_module_directive_in_a_class_is_refused(tmp_path):
    code, err, conf = check(tmp_path, "class api {\n  match path /api/;\n  gzip off;\n}\n")
    assert code == 1, err
    assert f'{conf}:5: class api: "gzip" directive is not allowed in a class' in err, err


def test_a_class_directive_at_the_top_level_is_refused(tmp_path):
    code, err, conf = check(tmp_path, "priority high;\n")
    assert code == 1, err
    assert f'{conf}:3: "priority" directive is not allowed at the top level' in err, err


# ---------------------------------------------------------------- every error


def test_check_reports_every_error_each_on_its_own_line(tmp_path):
    """Three errors: one of the core's, one in a class, one of a module's. All three are
    reported, and nothing says the file is valid."""
    code, err, conf = check(tmp_path, "threads many;\n"
                                      "class api { match path /api/; threads x; }\n"
                                      "cgi_max_processes 1k;\n")
    assert code == 1, err
    lines = err.splitlines()
    assert f'lfhttpd: {conf}:3: threads: invalid number "many" (0 to 1024)' in lines, err
    assert f'lfhttpd: {conf}:4: class api: threads: invalid number "x" (0 to 1024)' in lines, err
    assert (f'lfhttpd: {conf}:5: cgi: cgi_max_processes: invalid number "1k" (1 to 100000)'
            in lines), err
    assert len(lines) == 3, err


def test_check_reports_every_module_error(tmp_path):
    code, err, conf = check(tmp_path, "gzip maybe;\nautoindex maybe;\nmime_magic maybe;\n")
    assert code == 1, err
    for line, name in [(3, "gzip: gzip"), (4, "dirlist: autoindex"), (5, "mime: mime_magic")]:
        assert f'{conf}:{line}: {name}: expected "on" or "off", not "maybe"' in err, err
