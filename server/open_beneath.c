/* open_beneath.c — see open_beneath.h. */
#include "open_beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WALK_DEPTH_MAX 64 /* directories deep below the starting one */
#define WALK_LINKS_MAX 40 /* symlinks followed in one lookup, as the kernel's limit */

/* Process-wide: set once if the kernel has no openat2 (ENOSYS), so that it is not asked
 * again on every request. */
static atomic_bool openat2_missing;

/* Is the real path `real` root_real or below it? */
static bool path_inside(const char *real, const char *root_real)
{
    size_t rl = strlen(root_real);
    if (strncmp(real, root_real, rl) != 0)
        return false;
    return real[rl] == '/' || real[rl] == '\0' || (rl == 1 && root_real[0] == '/');
}

/* The walk's state: the directories it stands in, each held open (O_PATH) so that no
 * name is ever looked up twice, and the path still to resolve. dirs[0] is the root. */
struct walk {
    int dirs[WALK_DEPTH_MAX + 1];
    int depth;
    int links;
    char todo[PATH_MAX];
    const char *root_real;
};

static void walk_pop(struct walk *w)
{
    close(w->dirs[w->depth--]);
}

/* Put `target` (a symlink's) in front of rest, what is left to resolve. An absolute
 * target is admitted only inside root_real, and resolves from the root again. */
static int walk_prepend(struct walk *w, const char *target, const char *rest)
{
    if (target[0] == '/') {
        size_t rl = strlen(w->root_real);
        if (!path_inside(target, w->root_real))
            return -EXDEV;
        target += rl == 1 ? 0 : rl;
        while (w->depth > 0)
            walk_pop(w);
    }
    char joined[PATH_MAX];
    int n = snprintf(joined, sizeof(joined), "%s/%s", target, rest);
    if (n < 0 || (size_t)n >= sizeof(joined))
        return -ENAMETOOLONG;
    memcpy(w->todo, joined, (size_t)n + 1);
    return 0;
}

/* One name from the directory the walk stands in: step into a directory, resolve a
 * symlink, or (the last name) leave its O_PATH descriptor in *last. */
static int walk_step(struct walk *w, const char *name, const char *rest, int *last)
{
    if (strcmp(name, "..") == 0) {
        if (w->depth == 0)
            return -EXDEV; /* above the root */
        walk_pop(w);
        memmove(w->todo, rest, strlen(rest) + 1);
        return 0;
    }
    int fd = openat(w->dirs[w->depth], name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    if (S_ISLNK(sb.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlinkat(fd, "", target, sizeof(target) - 1);
        close(fd);
        if (n <= 0)
            return n < 0 ? -errno : -ENOENT;
        target[n] = '\0';
        if (++w->links > WALK_LINKS_MAX)
            return -ELOOP;
        return walk_prepend(w, target, rest);
    }
    if (!*rest) { /* the last name: whatever it is, the caller opens it */
        *last = fd;
        return 1;
    }
    if (!S_ISDIR(sb.st_mode) || w->depth == WALK_DEPTH_MAX) {
        close(fd);
        return S_ISDIR(sb.st_mode) ? -ENAMETOOLONG : -ENOTDIR;
    }
    w->dirs[++w->depth] = fd;
    memmove(w->todo, rest, strlen(rest) + 1);
    return 0;
}

/* Resolve w->todo to an O_PATH descriptor (returned), or -errno. */
static int walk_resolve(struct walk *w)
{
    for (;;) {
        char *p = w->todo;
        while (*p == '/')
            p++;
        if (*p == '\0') { /* nothing left: the directory the walk stands in */
            int fd = openat(w->dirs[w->depth], ".", O_PATH | O_CLOEXEC);
            return fd < 0 ? -errno : fd;
        }
        char *end = strchrnul(p, '/');
        size_t len = (size_t)(end - p);
        if (len > NAME_MAX)
            return -ENAMETOOLONG;
        char name[NAME_MAX + 1], rest[PATH_MAX];
        memcpy(name, p, len);
        name[len] = '\0';
        while (*end == '/')
            end++;
        memcpy(rest, end, strlen(end) + 1); /* it may move to the front of todo */
        if (strcmp(name, ".") == 0) {
            memcpy(w->todo, rest, strlen(rest) + 1);
            continue;
        }
        int last = -1;
        int rc = walk_step(w, name, rest, &last);
        if (rc < 0)
            return rc;
        if (rc == 1)
            return last;
    }
}

/* The real path of an open descriptor, into out[PATH_MAX]. */
static bool fd_path(int fd, char *out)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n < 0)
        return false;
    out[n] = '\0';
    return true;
}

/* Set the walk up to start at the root: at dirfd if it is the root, else at the root
 * opened anew with dirfd's place below it in front of rel (a symlink's ".." or absolute
 * target may lead anywhere in the root, not only below dirfd). Returns the root's
 * descriptor if one was opened (the caller closes it), -1 if not, or -errno. */
static int walk_start(struct walk *w, int dirfd, const char *rel)
{
    char base[PATH_MAX];
    if (!fd_path(dirfd, base) || !path_inside(base, w->root_real))
        return -EXDEV;
    size_t rl = strlen(w->root_real);
    const char *below = base + (rl == 1 ? 0 : rl);
    int n = snprintf(w->todo, sizeof(w->todo), "%s/%s", below, rel);
    if (n < 0 || (size_t)n >= sizeof(w->todo))
        return -ENAMETOOLONG;
    if (*below == '\0') {
        w->dirs[0] = dirfd;
        return -1;
    }
    int root = open(w->root_real, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return -errno;
    w->dirs[0] = root;
    return root;
}

int open_beneath_walk(int dirfd, const char *rel, int flags, const char *root_real)
{
    if (!root_real || rel[0] == '/')
        return -EXDEV;
    struct walk w = {.root_real = root_real};
    int root = walk_start(&w, dirfd, rel);
    if (root < -1)
        return root;
    int fd = walk_resolve(&w);
    while (w.depth > 0)
        walk_pop(&w);
    if (root >= 0)
        close(root);
    if (fd < 0)
        return fd;
    /* Every name was looked up beneath a directory already inside; a directory renamed
     * out of the tree meanwhile is caught here, before anything is opened for real. */
    char real[PATH_MAX];
    if (!fd_path(fd, real) || !path_inside(real, root_real)) {
        close(fd);
        return -EXDEV;
    }
    if (flags & O_PATH) {
        struct stat sb;
        if ((flags & O_DIRECTORY) && (fstat(fd, &sb) < 0 || !S_ISDIR(sb.st_mode))) {
            close(fd);
            return -ENOTDIR;
        }
        return fd;
    }
    /* Reopen the very inode checked (the magic link), never a name that may have changed:
     * opening is already acting on the target (a FIFO's writer sees a reader, a driver
     * runs its open). */
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    int file = open(link, (flags & ~O_NOFOLLOW) | O_CLOEXEC);
    int err = errno;
    close(fd);
    return file < 0 ? -err : file;
}

int open_beneath(int dirfd, const char *rel, int flags, const char *root_real)
{
    flags |= O_CLOEXEC;
    if (!atomic_load_explicit(&openat2_missing, memory_order_relaxed)) {
        struct open_how how = {
            .flags = (unsigned long long)flags,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        int fd = (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
        if (fd >= 0)
            return fd;
        if (errno == ENOSYS)
            atomic_store_explicit(&openat2_missing, true, memory_order_relaxed);
        else if (errno != EXDEV)
            return -errno;
    }
    return open_beneath_walk(dirfd, rel, flags, root_real);
}
