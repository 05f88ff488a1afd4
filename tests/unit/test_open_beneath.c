/* Unit tests of open_beneath: nothing outside the tree, symlinks inside it followed. */
#define TEST_MAIN
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "open_beneath.h"

/* A tree:  TMP/outside.txt  TMP/root/{a.txt, sub/b.txt, rel -> a.txt,
 * abs_in -> TMP/root/a.txt, abs_out -> TMP/outside.txt, up -> ../outside.txt,
 * subdir_link -> sub, escape_dir -> .., fifo_abs -> TMP/fifo, fifo_rel -> ../fifo,
 * loop_a -> loop_b, loop_b -> loop_a, self -> self, flip/f}  TMP/fifo  TMP/out/f (a FIFO)
 * Nothing ever writes to the FIFOs: opening one to read would block. */
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
    static const char *const links[][2] = {
        {"fifo_rel", "../fifo"}, {"loop_a", "loop_b"}, {"loop_b", "loop_a"}, {"self", "self"},
    };
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", root, links[i][0]);
        if (symlink(links[i][1], path) < 0)
            abort();
    }
    snprintf(path, sizeof(path), "%s/fifo_abs", root);
    snprintf(target, sizeof(target), "%s/fifo", tmp);
    if (symlink(target, path) < 0 || mkfifo(target, 0644) < 0)
        abort();
    snprintf(path, sizeof(path), "%s/out", tmp);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/out/f", tmp);
    if (mkfifo(path, 0644) < 0)
        abort();
    snprintf(path, sizeof(path), "%s/flip", root);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/flip/f", root);
    put(path, "f");
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

/* --- the slow path itself (kernels without openat2, absolute symlinks) --------------- */

#define BLOCKED (-100000) /* the lookup never returned: it opened a FIFO */

/* What open_beneath_walk(dirfd, rel) gives: the first byte read, -errno, or BLOCKED.
 * It runs in a child process with an alarm, so that an open that blocks fails the test
 * instead of hanging it. */
static int walk_byte_from(int dirfd, const char *rel)
{
    make_tree();
    int p[2];
    if (pipe(p) < 0)
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        alarm(2);
        int fd = open_beneath_walk(dirfd, rel, O_RDONLY, root);
        int r = fd;
        char c = 0;
        if (fd >= 0)
            r = read(fd, &c, 1) == 1 ? c : -EIO;
        if (write(p[1], &r, sizeof(r)) != sizeof(r))
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    int r = BLOCKED;
    if (read(p[0], &r, sizeof(r)) != sizeof(r))
        r = BLOCKED;
    close(p[0]);
    waitpid(pid, NULL, 0);
    return r;
}

static int walk_byte(const char *rel)
{
    make_tree();
    return walk_byte_from(root_fd, rel);
}

TEST(walk_opens_plain_files_and_follows_relative_symlinks)
{
    CHECK_EQ_INT(walk_byte("a.txt"), 'a');
    CHECK_EQ_INT(walk_byte("sub/b.txt"), 'b');
    CHECK_EQ_INT(walk_byte("rel"), 'a');
    CHECK_EQ_INT(walk_byte("subdir_link/b.txt"), 'b');
    CHECK_EQ_INT(walk_byte("./sub//b.txt"), 'b');
}

TEST(walk_follows_an_absolute_symlink_inside_the_root)
{
    CHECK_EQ_INT(walk_byte("abs_in"), 'a');
}

TEST(walk_refuses_symlinks_to_a_fifo_outside_without_opening_it)
{
    CHECK_EQ_INT(walk_byte("fifo_abs"), -EXDEV);
    CHECK_EQ_INT(walk_byte("fifo_rel"), -EXDEV);
    CHECK_EQ_INT(walk_byte("abs_out"), -EXDEV);
    CHECK_EQ_INT(walk_byte("up"), -EXDEV);
}

TEST(walk_refuses_dotdot_leading_out_and_admits_dotdot_staying_in)
{
    CHECK_EQ_INT(walk_byte("../outside.txt"), -EXDEV);
    CHECK_EQ_INT(walk_byte("sub/../../outside.txt"), -EXDEV);
    CHECK_EQ_INT(walk_byte("escape_dir/outside.txt"), -EXDEV);
    CHECK_EQ_INT(walk_byte("/etc/passwd"), -EXDEV);
    CHECK_EQ_INT(walk_byte("sub/../a.txt"), 'a');
}

TEST(walk_refuses_symlink_loops)
{
    CHECK_EQ_INT(walk_byte("loop_a"), -ELOOP);
    CHECK_EQ_INT(walk_byte("self"), -ELOOP);
}

TEST(walk_from_a_subdirectory_resolves_within_the_whole_root)
{
    make_tree();
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/sub", root);
    int sub = open(path, O_PATH | O_DIRECTORY);
    CHECK(sub >= 0);
    int up = walk_byte_from(sub, "../a.txt");
    int abs_in = walk_byte_from(sub, "../abs_in");
    int out = walk_byte_from(sub, "../../outside.txt");
    close(sub);
    CHECK_EQ_INT(up, 'a');
    CHECK_EQ_INT(abs_in, 'a');
    CHECK_EQ_INT(out, -EXDEV);
}

TEST(walk_missing_file_is_enoent_and_the_callers_flags_hold)
{
    CHECK_EQ_INT(walk_byte("nope.txt"), -ENOENT);
    int fd = open_beneath_walk(root_fd, "sub", O_PATH, root);
    CHECK(fd >= 0);
    CHECK_EQ_INT(fcntl(fd, F_GETFL) & O_PATH, O_PATH);
    close(fd);
    CHECK_EQ_INT(open_beneath_walk(root_fd, "a.txt", O_PATH | O_DIRECTORY, root), -ENOTDIR);
    CHECK_EQ_INT(open_beneath_walk(root_fd, "a.txt", O_RDONLY | O_DIRECTORY, root), -ENOTDIR);
}

/* Swap root/flip, a directory, with root/flip.other, a symlink to TMP/out (where f is a
 * FIFO), back and forth as fast as possible until killed. */
static void flip_forever(void)
{
    char dir[PATH_MAX + 64], other[PATH_MAX + 64], out[PATH_MAX + 64];
    snprintf(dir, sizeof(dir), "%s/flip", root);
    snprintf(other, sizeof(other), "%s/flip.other", root);
    snprintf(out, sizeof(out), "%s/out", tmp);
    if (symlink(out, other) < 0)
        _exit(1);
    for (;;)
        renameat2(AT_FDCWD, dir, AT_FDCWD, other, RENAME_EXCHANGE);
}

/* In a child process with an alarm (an open that blocks kills it): open root/flip/f
 * through the walk over and over for a second and a half. counts[0]: opened inside,
 * counts[1]: opened something else. false if the child never reported (it blocked). */
static bool race_flip(int counts[2])
{
    int p[2];
    if (pipe(p) < 0)
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        alarm(3);
        int n[2] = {0, 0};
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
            int fd = open_beneath_walk(root_fd, "flip/f", O_RDONLY, root);
            if (fd >= 0) {
                char c = 0;
                n[read(fd, &c, 1) == 1 && c == 'f' ? 0 : 1]++;
                close(fd);
            }
            clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 1500);
        _exit(write(p[1], n, sizeof(n)) == sizeof(n) ? 0 : 1);
    }
    close(p[1]);
    bool reported = read(p[0], counts, 2 * sizeof(int)) == 2 * sizeof(int);
    close(p[0]);
    waitpid(pid, NULL, 0);
    return reported;
}

TEST(walk_never_opens_outside_while_a_directory_turns_into_a_symlink)
{
    make_tree();
    pid_t flipper = fork();
    if (flipper == 0)
        flip_forever();
    int counts[2] = {0, 0};
    bool reported = race_flip(counts);
    kill(flipper, SIGKILL);
    waitpid(flipper, NULL, 0);
    char dir[PATH_MAX + 64], other[PATH_MAX + 64]; /* leave the tree as it was */
    snprintf(dir, sizeof(dir), "%s/flip", root);
    snprintf(other, sizeof(other), "%s/flip.other", root);
    struct stat sb;
    if (lstat(dir, &sb) == 0 && S_ISLNK(sb.st_mode))
        renameat2(AT_FDCWD, dir, AT_FDCWD, other, RENAME_EXCHANGE);
    unlink(other);
    CHECK(reported); /* else it blocked opening the FIFO outside */
    CHECK_EQ_INT(counts[1], 0);
    CHECK(counts[0] > 0); /* the race was run, not only refused */
}
