/* module_index.c — the index file of a directory, as the module API offers it: one lookup
 * for mod_static (which serves it), its open-file cache (which checks it is still the
 * one) and mod_dirlist (which lists only directories that have none); and the names, for
 * mod_gzip (which finds the index file a directory's answer was). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "module_level.h"

const char *module_index_name(const struct request *req, unsigned i)
{
    const char(*index)[256] = req->level ? req->level->index : req->cfg->index;
    unsigned n_index = req->level ? req->level->n_index : req->cfg->n_index;
    return i < n_index ? index[i] : NULL;
}

int module_index_open(const struct request *req, int dirfd, const char *prefix, int flags,
                      unsigned *which, struct stat *st)
{
    size_t pl = strlen(prefix);
    char rel[REQUEST_PATH_MAX + 256];
    const char *name;
    for (unsigned i = 0; (name = module_index_name(req, i)); i++) {
        size_t il = strlen(name);
        if (pl + il >= sizeof(rel))
            return -ENAMETOOLONG;
        memcpy(rel, prefix, pl);
        memcpy(rel + pl, name, il + 1);
        int fd = open_beneath(dirfd, rel, flags, req->root_real);
        if (fd == -ENOENT)
            continue;
        if (fd < 0)
            return fd;
        if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
            close(fd);
            continue;
        }
        *which = i;
        return fd;
    }
    return -ENOENT;
}
