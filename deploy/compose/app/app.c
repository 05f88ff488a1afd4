/* app.c — the application of the Docker Compose example: a tiny HTTP/1.1 server that
 * answers JSON, standing for the Node, Python or Go application lfhttpd sits in front of.
 *
 * Written in C because the example must build offline from debian:bookworm-slim alone:
 * gcc and libc6-dev come from the same apt step as lfhttpd's build stage, where Python,
 * Node or Go would need a runtime image or packages the slim image does not have.
 *
 *   GET /health        200 "ok" (the container's health check)
 *   GET /api/...       200, a JSON object: what the application received (method, path,
 *                      and the headers a proxy sets: Host, X-Forwarded-For, X-Real-IP,
 *                      X-Forwarded-Proto), so the example shows what the proxy forwards
 *   anything else      404
 *
 * One connection at a time, one request per connection (Connection: close): lfhttpd
 * speaks to it as nginx would to an upstream without `keepalive`. A client that sends
 * nothing is dropped after IO_TIMEOUT_S, so it cannot hold the loop. SIGTERM (what
 * `docker stop` sends to PID 1, which has no default action for it) ends it at once.
 *
 * Listens on 0.0.0.0, port $PORT (8000 when unset).
 * Build: cc -O2 -Wall -Wextra -Werror -o app app.c
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HEAD_MAX 8192  /* a longer request head is answered 431 */
#define IO_TIMEOUT_S 5 /* per read or write on a connection */
#define BODY_MAX 4096  /* the JSON answer */
#define FIELD_MAX 512  /* one echoed value, after escaping */

static volatile sig_atomic_t stopping;

static void on_sigterm(int sig)
{
    (void)sig;
    stopping = 1;
}

/* The value of header `name` in the head (NUL-terminated), copied into out; "" if absent. */
static void header_value(const char *head, const char *name, char *out, size_t out_size)
{
    size_t len = strlen(name);
    out[0] = '\0';
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        const char *p = line + 2;
        if (strncasecmp(p, name, len) != 0 || p[len] != ':') continue;
        p += len + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, "\r\n");
        if (n >= out_size) n = out_size - 1;
        memcpy(out, p, n);
        out[n] = '\0';
        return;
    }
}

/* s as the inside of a JSON string: quotes, backslashes and control bytes escaped. */
static void json_escape(const char *s, char *out, size_t out_size)
{
    size_t o = 0;
    for (; *s && o + 7 < out_size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, out_size - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
}

static void send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; /* the client left or stalled: nothing more to do for it */
        buf += n;
        len -= (size_t)n;
    }
}

static void respond(int fd, int status, const char *reason, const char *type, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, reason, type, strlen(body));
    send_all(fd, head, (size_t)n);
    send_all(fd, body, strlen(body));
}

/* The JSON answer to GET /api/...: what arrived, as the application saw it. */
static void answer_api(int fd, const char *head, const char *method, const char *path)
{
    static const char *const fields[][2] = {
        {"host", "Host"},
        {"x_forwarded_for", "X-Forwarded-For"},
        {"x_real_ip", "X-Real-IP"},
        {"x_forwarded_proto", "X-Forwarded-Proto"},
    };
    char body[BODY_MAX], raw[FIELD_MAX], esc[FIELD_MAX], esc_method[FIELD_MAX];
    size_t o = 0;
    json_escape(method, esc_method, sizeof(esc_method));
    json_escape(path, esc, sizeof(esc));
    o += (size_t)snprintf(body + o, sizeof(body) - o,
                          "{\"app\": \"compose-example\", \"method\": \"%s\", \"path\": \"%s\"",
                          esc_method, esc);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        header_value(head, fields[i][1], raw, sizeof(raw));
        json_escape(raw, esc, sizeof(esc));
        o += (size_t)snprintf(body + o, sizeof(body) - o, ", \"%s\": \"%s\"", fields[i][0], esc);
    }
    snprintf(body + o, sizeof(body) - o, "}\n");
    respond(fd, 200, "OK", "application/json", body);
}

/* Reads one request head (until the blank line) into buf: its length, -1 if the client
 * left or stalled, -2 if the head does not fit. */
static ssize_t read_head(int fd, char *buf, size_t size)
{
    size_t have = 0;
    while (have + 1 < size) {
        ssize_t n = read(fd, buf + have, size - 1 - have);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        have += (size_t)n;
        buf[have] = '\0';
        if (strstr(buf, "\r\n\r\n")) return (ssize_t)have;
    }
    return -2;
}

static void serve(int fd)
{
    char head[HEAD_MAX], method[16], path[FIELD_MAX];
    ssize_t len = read_head(fd, head, sizeof(head));
    if (len == -2) respond(fd, 431, "Request Header Fields Too Large", "text/plain", "too large\n");
    if (len < 0) return;
    if (sscanf(head, "%15s %511s HTTP/1.", method, path) != 2) {
        respond(fd, 400, "Bad Request", "text/plain", "bad request\n");
        return;
    }
    printf("%s %s\n", method, path);
    fflush(stdout);
    if (strcmp(path, "/health") == 0)
        respond(fd, 200, "OK", "text/plain", "ok\n");
    else if (strncmp(path, "/api/", 5) == 0)
        answer_api(fd, head, method, path);
    else
        respond(fd, 404, "Not Found", "text/plain", "not found\n");
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(fd, 128) != 0) {
        perror("app: listen");
        exit(1);
    }
    return fd;
}

int main(void)
{
    const char *env = getenv("PORT");
    int port = env && *env ? atoi(env) : 8000;
    /* No SA_RESTART: a SIGTERM interrupts accept(), and the loop sees `stopping`. */
    struct sigaction sa = {.sa_handler = on_sigterm};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int lfd = listen_on(port);
    printf("app: listening on 0.0.0.0:%d\n", port);
    fflush(stdout);
    struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
    while (!stopping) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue; /* EINTR (SIGTERM: the loop ends), or a connection gone already */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        serve(fd);
        close(fd);
    }
    printf("app: SIGTERM, exiting\n");
    return 0;
}
