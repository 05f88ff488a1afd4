/* alloc_counter.c — an LD_PRELOAD library that counts heap allocations, for tests.
 *
 * Loaded into the server with
 *     LD_PRELOAD=build/tests/alloc_counter.so LFHTTPD_ALLOC_COUNTER=/tmp/some/file
 * it replaces malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign and free.
 * Each replacement forwards to glibc's own implementation (__libc_malloc and friends:
 * no dlsym, which may itself allocate and would recurse), and each call of an
 * allocating function adds one to a 64-bit counter.
 *
 * The counter lives in a MAP_SHARED mapping of the file named by LFHTTPD_ALLOC_COUNTER,
 * which the constructor creates (or truncates) to 8 bytes, so a test can read the count
 * from outside at any moment: struct.unpack("<Q", open(path, "rb").read(8)).
 * If the variable is unset, or the file cannot be mapped, nothing is counted.
 * Allocations made before the constructor runs (by the dynamic loader, say) are not
 * counted either; the count is for comparing two moments in a running process.
 *
 * Build: cc -shared -fPIC -O2 -Wall -Wextra -Werror -o alloc_counter.so alloc_counter.c
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h> /* memalign */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* glibc's implementations, exported for exactly this kind of interposition. */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *ptr);

/* NULL until the constructor has mapped the counter file. */
static uint64_t *counter;

static inline void count(void)
{
    uint64_t *c = __atomic_load_n(&counter, __ATOMIC_RELAXED);
    if (c)
        __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void alloc_counter_init(void)
{
    const char *path = getenv("LFHTTPD_ALLOC_COUNTER");
    if (!path || !*path)
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (ftruncate(fd, sizeof(uint64_t)) != 0) {
        close(fd);
        return;
    }
    void *m = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    __atomic_store_n(&counter, (uint64_t *)m, __ATOMIC_RELEASE);
}

void *malloc(size_t size)
{
    count();
    return __libc_malloc(size);
}

void *calloc(size_t nmemb, size_t size)
{
    count();
    return __libc_calloc(nmemb, size);
}

void *realloc(void *ptr, size_t size)
{
    count();
    return __libc_realloc(ptr, size);
}

void *memalign(size_t alignment, size_t size)
{
    count();
    return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size)
{
    count();
    return __libc_memalign(alignment, size);
}

int posix_memalign(void **memptr, size_t alignment, size_t size)
{
    /* posix_memalign requires a power of two that is a multiple of sizeof(void *). */
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0)
        return EINVAL;
    count();
    void *p = __libc_memalign(alignment, size);
    if (!p)
        return ENOMEM;
    *memptr = p;
    return 0;
}

void free(void *ptr)
{
    __libc_free(ptr);
}
