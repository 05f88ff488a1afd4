"""Several copies on one port, as docs/guide/containers-and-kubernetes.md ("Running many
copies") describes: with
`listen ADDR reuseport;` a second lfhttpd process listens on the same address and the
kernel spreads new connections over both; without it the second one fails with "address
already in use", even though each process's thread groups share their own address with
SO_REUSEPORT; and stopping one copy leaves the other serving."""
import subprocess

from conftest import BIN, check_clean_exit, scaled, wait_until

CONNECTIONS = 200


def get_status(server):
    """One request on a new connection; its status code."""
    c = server.connect()
    try:
        c.send(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        data = c.recv_all()
    finally:
        c.close()
    return int(data.split(b" ", 2)[1])


def copy_conf(port, reuseport):
    """Listening on port with two thread groups (each with its own socket on the address);
    the access log (a relative path: in the server's directory) where access_log() reads."""
    return (f"listen 127.0.0.1:{port}{' reuseport' if reuseport else ''};\n"
            "threads 2;\ngroups 2;\naccess_log access.log;\n"
            "error_log stderr info;\nshutdown_timeout 5s;\n")


def start_copy(start_server, docroot, port, reuseport=True):
    return start_server(docroot, conf=copy_conf(port, reuseport) + f'root "{docroot}";\n')


def answered_lines(server):
    return server.access_log().count('"GET / HTTP/1.1" 200')


def test_two_processes_with_reuseport_share_one_port_and_both_answer(start_server, docroot):
    (docroot / "index.html").write_text("hello\n")
    first = start_copy(start_server, docroot, 0)
    second = start_copy(start_server, docroot, first.port)
    assert second.port == first.port
    statuses = [get_status(first) for _ in range(CONNECTIONS)]
    assert statuses == [200] * CONNECTIONS
    # Each access log line is written when its request ends: all are there soon.
    assert wait_until(lambda: answered_lines(first) + answered_lines(second) == CONNECTIONS,
                      scaled(10))
    assert answered_lines(first) > 0, "the first copy answered nothing"
    assert answered_lines(second) > 0, "the second copy answered nothing"
    check_clean_exit(second)
    check_clean_exit(first)


def refused_second(tmp_path, docroot, port, reuseport):
    """Run a second copy on port; it must exit at once. Returns (exit code, error log)."""
    conf = tmp_path / "second.conf"
    conf.write_text(copy_conf(port, reuseport) + f'root "{docroot}";\n')
    # A copy that does start keeps running: the timeout kills it and fails the test.
    done = subprocess.run([BIN, "-c", str(conf)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=scaled(10))
    return done.returncode, done.stderr


def test_second_process_without_reuseport_exits_with_address_in_use(start_server, docroot,
                                                                     tmp_path):
    first = start_copy(start_server, docroot, 0, reuseport=False)
    code, log = refused_second(tmp_path, docroot, first.port, reuseport=False)
    assert code != 0
    assert f"listen on 127.0.0.1:{first.port}: Address already in use" in log
    (docroot / "index.html").write_text("hello\n")
    assert get_status(first) == 200  # the first one is untouched
    check_clean_exit(first)


def test_plain_listen_refuses_a_port_copies_share_with_reuseport(start_server, docroot,
                                                                 tmp_path):
    first = start_copy(start_server, docroot, 0, reuseport=True)
    code, log = refused_second(tmp_path, docroot, first.port, reuseport=False)
    assert code != 0
    assert "Address already in use" in log
    check_clean_exit(first)


def test_sigterm_to_one_copy_leaves_the_other_serving(start_server, docroot):
    (docroot / "index.html").write_text("hello\n")
    first = start_copy(start_server, docroot, 0)
    second = start_copy(start_server, docroot, first.port)
    check_clean_exit(first)
    before = answered_lines(second)
    statuses = [get_status(second) for _ in range(50)]
    assert statuses == [200] * 50
    assert wait_until(lambda: answered_lines(second) - before == 50, scaled(10))
    check_clean_exit(second)
