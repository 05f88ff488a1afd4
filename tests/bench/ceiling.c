/* ceiling.c — the fastest this machine answers 1 KiB keep-alive requests, for `make bench`.
 *
 *     ceiling [ADDRESS [PORT [THREADS]]]      default 127.0.0.1 0 2
 *
 * Not a server: it reads requests and answers every one with the same canned response
 * (HTTP/1.1 200, a 1 KiB body, Content-Length, keep-alive). The only parsing is finding
 * the end of each request's head ("\r\n\r\n"), so pipelined requests each get their answer
 * in one write. Nothing is shared between threads: each has its own SO_REUSEPORT listener
 * on the same port and its own level-triggered epoll set, and a connection lives and dies
 * on the thread that accepted it. Whatever a real server does beyond this (parsing,
 * routing, files, Date, logging, scheduling threads) is what it costs above the ceiling.
 *
 * Prints "listening on ADDRESS:PORT" on stdout once every listener is bound; exits 0 on
 * SIGTERM or SIGINT.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4, memmem */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
    BODY_BYTES = 1024,
    MAX_THREADS = 64,
    IN_BYTES = 16384, /* a connection's unanswered request bytes */
    BATCH = 64,       /* responses written with one write() at most */
    EVENTS = 256,
};

static const char HEAD[] = "HTTP/1.1 200 OK\r\n"
                           "Server: ceiling\r\n"
                           "Content-Type: text/html\r\n"
                           "Content-Length: 1024\r\n"
                           "Connection: keep-alive\r\n"
                           "\r\n";

/* BATCH copies of the response back to back: n answers are its first n * resp_len bytes,
 * so a batch costs one write() and no copying. */
static char *responses;
static size_t resp_len;

struct conn {
    int fd;
    size_t in_len;  /* bytes in `in` not yet answered */
    size_t out_off; /* unsent part of the batch: responses[out_off .. out_end) */
    size_t out_end;
    int want_write; /* registered for EPOLLOUT (a batch did not fit) */
    char in[IN_BYTES];
};

struct worker {
    pthread_t thread;
    int listen_fd;
    int epoll_fd;
};

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void make_responses(void)
{
    size_t head = sizeof HEAD - 1;
    resp_len = head + BODY_BYTES;
    responses = malloc(resp_len * BATCH);
    if (!responses) die("malloc");
    for (size_t i = 0; i < BATCH; i++) {
        char *r = responses + i * resp_len;
        memcpy(r, HEAD, head);
        memset(r + head, 'x', BODY_BYTES);
    }
}

static int open_listener(const char *addr, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "ceiling: bad IPv4 address %s\n", addr);
        exit(2);
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        die("setsockopt");
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) die("bind");
    if (listen(fd, 4096) < 0) die("listen");
    return fd;
}

static int bound_port(int fd)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0) die("getsockname");
    return ntohs(sa.sin_port);
}

static void watch(int epoll_fd, int op, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev = {.events = events, .data.ptr = ptr};
    if (epoll_ctl(epoll_fd, op, fd, &ev) < 0) die("epoll_ctl");
}

static void close_conn(struct conn *c)
{
    close(c->fd); /* also leaves the epoll set: the descriptor was never duplicated */
    free(c);
}

static void accept_all(struct worker *w)
{
    for (;;) {
        int fd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN, or a connection reset before it was taken */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        watch(w->epoll_fd, EPOLL_CTL_ADD, fd, EPOLLIN, c);
    }
}

/* Sends what is left of the current batch. Returns 1 when it is all sent, 0 when the
 * socket is full (the rest waits for EPOLLOUT), -1 when the connection is gone. */
static int flush_out(struct conn *c)
{
    while (c->out_off < c->out_end) {
        ssize_t n = write(c->fd, responses + c->out_off, c->out_end - c->out_off);
        if (n < 0) return errno == EAGAIN ? 0 : -1;
        c->out_off += (size_t)n;
    }
    return 1;
}

/* Counts the complete request heads at the start of `in` (at most BATCH), drops them
 * and queues as many responses. */
static void answer_heads(struct conn *c)
{
    size_t done = 0, answers = 0;
    while (answers < BATCH) {
        char *end = memmem(c->in + done, c->in_len - done, "\r\n\r\n", 4);
        if (!end) break;
        done = (size_t)(end - c->in) + 4;
        answers++;
    }
    memmove(c->in, c->in + done, c->in_len - done);
    c->in_len -= done;
    c->out_off = 0;
    c->out_end = answers * resp_len;
}

/* Answers every complete head in the buffer; 0 to go on, -1 to close. */
static int serve(struct worker *w, struct conn *c)
{
    for (;;) {
        int sent = flush_out(c);
        if (sent < 0) return -1;
        if (!sent) {
            if (!c->want_write) watch(w->epoll_fd, EPOLL_CTL_MOD, c->fd, EPOLLOUT, c);
            c->want_write = 1;
            return 0;
        }
        answer_heads(c);
        if (c->out_end == 0) break;
    }
    if (c->want_write) watch(w->epoll_fd, EPOLL_CTL_MOD, c->fd, EPOLLIN, c);
    c->want_write = 0;
    return 0;
}

static int on_readable(struct worker *w, struct conn *c)
{
    if (c->in_len == IN_BYTES)
        return -1; /* a head larger than the buffer: not a benchmark request */
    ssize_t n = read(c->fd, c->in + c->in_len, IN_BYTES - c->in_len);
    if (n == 0 || (n < 0 && errno != EAGAIN)) return -1;
    if (n > 0) c->in_len += (size_t)n;
    return serve(w, c);
}

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    struct epoll_event events[EVENTS];
    for (;;) {
        int n = epoll_wait(w->epoll_fd, events, EVENTS, -1);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                accept_all(w);
                continue;
            }
            int r = events[i].events & EPOLLOUT ? serve(w, c) : on_readable(w, c);
            if (r < 0) close_conn(c);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *addr = argc > 1 ? argv[1] : "127.0.0.1";
    int port = argc > 2 ? atoi(argv[2]) : 0;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (threads < 1 || threads > MAX_THREADS) {
        fprintf(stderr, "ceiling: threads must be 1..%d\n", MAX_THREADS);
        return 2;
    }
    make_responses();

    /* Only this thread takes SIGTERM and SIGINT; the workers inherit the mask. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    static struct worker workers[MAX_THREADS];
    for (int i = 0; i < threads; i++) {
        struct worker *w = &workers[i];
        w->listen_fd = open_listener(addr, port);
        port = bound_port(w->listen_fd); /* port 0: the others join the first's */
        w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (w->epoll_fd < 0) die("epoll_create1");
        watch(w->epoll_fd, EPOLL_CTL_ADD, w->listen_fd, EPOLLIN, NULL);
    }
    for (int i = 0; i < threads; i++)
        if (pthread_create(&workers[i].thread, NULL, run_worker, &workers[i]) != 0)
            die("pthread_create");
    printf("listening on %s:%d\n", addr, port);
    fflush(stdout);

    int sig;
    sigwait(&stop, &sig);
    return 0; /* the workers end with the process */
}
