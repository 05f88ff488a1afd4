/* Unit tests of open_beneath: nothing outside the tree, symlinks inside it followed. */
#define TEST_MAIN
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "open_beneath.h"

/* A tree:  TMP/outside.txt  TMP/root/{a.txt, sub/b.txt, rel -> a.txt,
 * abs_in -> TMP/root/a.txt, abs_out -> TMP/outside.txt, up -> ../outside.txt,
 * subdir_link -> sub, escape_dir -> ..} */
static char tmp[PATH_MAX], root[PATH_MAX + 8];
static int root_fd = -1;

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void make_tree(void)
{
    if (root_fd >= 0)
        return;
    char tmpl[] = "/tmp/lfhttpd-beneath-XXXXXX";
    char path[PATH_MAX + 64];
    if (!mkdtemp(tmpl) || !realpath(tmpl, tmp))
        abort();
    snprintf(root, sizeof(root), "%s/root", tmp);
    mkdir(root, 0755);
    snprintf(path, sizeof(path), "%s/sub", root);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/outside.txt", tmp);
    put(path, "outside");
    snprintf(path, sizeof(path), "%s/a.txt", root);
    put(path, "a");
    snprintf(path, sizeof(path), "%s/sub/b.txt", root);
    put(path, "b");
    char target[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/rel", root);
    if (symlink("a.txt", path) < 0)
        abort();
    snprintf(path, sizeof(path), "%s/abs_in", root);
    snprintf(target, sizeof(target), "%s/a.txt", root);
    if (symlink(target, path) < 0)
        abort();
    snprintf(path, sizeof(path), "%s/abs_out", root);
    snprintf(target, sizeof(target), "%s/outside.txt", tmp);
    if (symlink(target, path) < 0)
        abort();
    snprintf(path, sizeof(path), "%s/up", root);
    if (symlink("../outside.txt", path) < 0)
        abort();
    snprintf(path, sizeof(path), "%s/subdir_link", root);
    if (symlink("sub", path) < 0)
        abort();
    snprintf(path, sizeof(path), "%s/escape_dir", root);
    if (symlink("..", path) < 0)
        abort();
    root_fd = open(root, O_PATH | O_DIRECTORY);
}

/* The first byte of what rel opens to, or -errno. */
static int first_byte(const char *rel)
{
    make_tree();
    int fd = open_beneath(root_fd, rel, O_RDONLY, root);
    if (fd < 0)
        return fd;
    char c = 0;
    ssize_t n = read(fd, &c, 1);
    close(fd);
    return n == 1 ? c : -EIO;
}

TEST(plain_file_in_the_root_opens)
{
    CHECK_EQ_INT(first_byte("a.txt"), 'a');
    CHECK_EQ_INT(first_byte("sub/b.txt"), 'b');
}

TEST(relative_symlink_inside_the_root_is_followed)
{
    CHECK_EQ_INT(first_byte("rel"), 'a');
    CHECK_EQ_INT(first_byte("subdir_link/b.txt"), 'b');
}

TEST(absolute_symlink_pointing_inside_the_root_is_followed)
{
    CHECK_EQ_INT(first_byte("abs_in"), 'a');
}

TEST(symlinks_leading_out_of_the_root_are_refused)
{
    CHECK_EQ_INT(first_byte("abs_out"), -EXDEV);
    CHECK_EQ_INT(first_byte("up"), -EXDEV);
    CHECK_EQ_INT(first_byte("escape_dir/outside.txt"), -EXDEV);
}

TEST(dotdot_and_absolute_paths_are_refused)
{
    CHECK_EQ_INT(first_byte("../outside.txt"), -EXDEV);
    CHECK_EQ_INT(first_byte("sub/../../outside.txt"), -EXDEV);
    CHECK_EQ_INT(first_byte("/etc/passwd"), -EXDEV);
}

TEST(missing_file_is_enoent)
{
    CHECK_EQ_INT(first_byte("nope.txt"), -ENOENT);
}

TEST(without_root_real_the_slow_path_is_refused)
{
    make_tree();
    int fd = open_beneath(root_fd, "abs_in", O_RDONLY, NULL);
    CHECK_EQ_INT(fd, -EXDEV);
}
