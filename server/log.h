/* log.h — the error log (levels, one line per message) and the access log (Combined Log
 * Format, buffered per thread so a request does not cost a write()).
 *
 * The error log is process-wide: every part of the server may need to report, and it is
 * set once at start. The access log is an object passed to whoever writes it.
 */
#ifndef LFHTTPD_LOG_H
#define LFHTTPD_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include "config.h"

/* Open the error log ("stderr", "stdout" or a path). Returns 0 or -1 (errno set). */
int log_open_error(const char *dest, enum log_level level);
void log_close_error(void);
/* Could dest ("stderr", "stdout", "off" or a path) be opened for appending, as the logs
 * are at start? Checked without creating the file. Returns 0 or -1 (errno set). */
int log_check_dest(const char *dest);
/* While on, error-level messages to an error log file are written to stderr too. */
void log_echo_errors(bool on);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The error log of a server or location (nginx's error_log in a block), for the messages
 * about the requests it answers. */
struct log_dest {
    int fd;
    enum log_level level; /* the lowest written */
    bool quiet; /* nginx's crit, alert or emerg: above every message about a request */
};
/* A message about a request: to d, at d's level; d NULL: the error log above. */
void log_msg_to(const struct log_dest *d, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

/* One thread's pending access-log lines. */
struct access_log_buf {
    pthread_mutex_t lock; /* the owner appends, the timer flushes: almost never contended */
    struct access_log_buf *next;
    size_t len;
    char data[32768];
};

struct access_log {
    int fd; /* -1 when the access log is off */
    bool own_fd;
    bool json; /* JSON lines, one object a request, instead of Combined Log Format */
    char path[CONFIG_PATH_MAX]; /* the file, for reopening; "" for stdout/stderr/off */
    pthread_mutex_t lock; /* guards bufs (the list, not their contents) */
    struct access_log_buf *bufs;
};

/* What one access-log line says. Strings are (pointer, length); NULL or 0 length → "-". */
struct access_entry {
    const struct sockaddr *peer;
    const char *request_line;
    size_t request_line_len;
    int status;
    uint64_t bytes; /* body bytes */
    const char *referer;
    size_t referer_len;
    const char *user_agent;
    size_t user_agent_len;
    int64_t time_s;
    const char *request_id; /* 32 hex digits (access_log_request_id), or NULL */
};

/* dest: path, "stdout", "stderr" or "off"; json: JSON lines instead of Combined Log
 * Format. Returns 0 or -1 (errno set). */
int access_log_open(struct access_log *log, const char *dest, bool json);
void access_log_write(struct access_log *log, const struct access_entry *e);
/* Write every thread's pending lines (the timer calls this about once a second). */
void access_log_flush(struct access_log *log);
void access_log_close(struct access_log *log);

/* After logrotate renamed the files (SIGUSR1): open them again by name and put the new
 * file in place of the old one (dup2), so threads writing meanwhile never see a closed
 * descriptor. Returns 0, or -1 (errno set; the old files stay in use). */
int access_log_reopen(struct access_log *log);
int log_reopen_error(void);

#endif
