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

/* Does the open file's real path lie under root_real? */
static bool fd_inside(int fd, const char *root_real)
{
    char link[64], real[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof(real) - 1);
    if (n < 0)
        return false;
    real[n] = '\0';
    return path_inside(real, root_real);
}

/* A normalized relative path never holds a ".." segment; refuse one all the same. */
static bool has_dotdot(const char *rel)
{
    for (const char *p = rel; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == rel || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return true;
    return false;
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
    if (!root_real || rel[0] == '/' || has_dotdot(rel))
        return -EXDEV;
    /* Resolve first, open after: opening is already acting on the target (a FIFO's writer
     * sees a reader, a driver runs its open), so a target outside the tree is never
     * opened. A path that does not resolve (a dangling link) is refused like one leading
     * out, so that the answer says nothing about what exists outside. */
    char dir[PATH_MAX], joined[2 * PATH_MAX + 2], real[PATH_MAX];
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, dir, sizeof(dir) - 1);
    if (n < 0)
        return -EXDEV;
    dir[n] = '\0';
    snprintf(joined, sizeof(joined), "%s/%s", dir, rel);
    if (!realpath(joined, real)) {
        struct stat sb; /* no such name at all is a plain "not found" */
        int err = errno;
        return (err == ENOENT || err == ENOTDIR) && lstat(joined, &sb) < 0 ? -err : -EXDEV;
    }
    if (!path_inside(real, root_real))
        return -EXDEV;
    int fd = open(real, flags | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    if (!fd_inside(fd, root_real)) { /* the tree changed between the two steps */
        close(fd);
        return -EXDEV;
    }
    return fd;
}
