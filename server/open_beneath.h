/* open_beneath.h — opening a path beneath a directory without ever leaving it.
 *
 * The document root, a CGI directory: every file a client names is opened through this,
 * relative to a directory descriptor. With openat2(RESOLVE_BENEATH) the kernel refuses
 * any "..", absolute path or symlink that would leave the directory. Two cases take a
 * slower path, open_beneath_walk: a symlink with an absolute target (RESOLVE_BENEATH
 * refuses it even when it points inside), and kernels older than 5.6, which have no
 * openat2 at all.
 */
#ifndef LFHTTPD_OPEN_BENEATH_H
#define LFHTTPD_OPEN_BENEATH_H

/* Open rel (relative, already normalized) beneath dirfd with flags (O_CLOEXEC is added).
 * root_real: the real path of the tree the file must stay in (NULL: refuse the slow
 * path). Returns a descriptor, or -errno (-EXDEV for a path that would leave the tree). */
int open_beneath(int dirfd, const char *rel, int flags, const char *root_real);

/* The slow path, resolving as the kernel would but one name at a time: each name is
 * looked up O_PATH and O_NOFOLLOW beneath a directory already held, symlinks are read
 * and resolved here (an absolute target only inside root_real, ".." never above it), and
 * only the final inode, once its real path is checked, is opened with flags (through
 * /proc/self/fd). So nothing outside the tree is ever opened, whatever changes meanwhile.
 * Same arguments and results as open_beneath; root_real NULL refuses (-EXDEV). */
int open_beneath_walk(int dirfd, const char *rel, int flags, const char *root_real);

#endif
