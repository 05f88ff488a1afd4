/* open_beneath.h — opening a path beneath a directory without ever leaving it.
 *
 * The document root, a CGI directory: every file a client names is opened through this,
 * relative to a directory descriptor. With openat2(RESOLVE_BENEATH) the kernel refuses
 * any "..", absolute path or symlink that would leave the directory. Two cases take a
 * slower path, admitted only if the opened file's real path lies under root_real:
 * a symlink with an absolute target (RESOLVE_BENEATH refuses it even when it points
 * inside), and kernels older than 5.6, which have no openat2 at all.
 */
#ifndef LFHTTPD_OPEN_BENEATH_H
#define LFHTTPD_OPEN_BENEATH_H

/* Open rel (relative, already normalized) beneath dirfd with flags (O_CLOEXEC is added).
 * root_real: the real path of the tree the file must stay in (NULL: refuse the slow
 * path). Returns a descriptor, or -errno (-EXDEV for a path that would leave the tree). */
int open_beneath(int dirfd, const char *rel, int flags, const char *root_real);

#endif
