/* Workloads with known resource use, for the monitor tests.
 *   touch MIB HOLD_MS          allocate and touch MIB MiB, hold, exit
 *   spike MIB SPIKE_MS HOLD_MS touch MIB MiB for SPIKE_MS, free it, hold HOLD_MS more
 *   busy THREADS MS            THREADS threads spinning for MS
 *   forkbomb                   fork forever
 *   doublefork PIDFILE         setsid double-forked grandchild sleeps; writes its pid; parent sleeps
 *   write PATH MIB             write MIB MiB to PATH, then sleep a second
 *   evict PATH                 flush PATH and drop it from the page cache
 *   read PATH                  read PATH in 1 MiB chunks (no copy kept)
 * busy prints "cpu_seconds S" (its own rusage) on stdout when done, so a test can compare a
 * Report with what the workload itself measured in the same run.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static char *touch(long mib) {
    size_t bytes = (size_t)mib << 20;
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
    return p;
}

static long busy_ms;
static void *spin(void *arg) {
    (void)arg;
    double end = now() + busy_ms / 1000.0;
    volatile unsigned long x = 0;
    while (now() < end) x++;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    if (!strcmp(argv[1], "touch") && argc == 4) {
        touch(atol(argv[2]));
        sleep_ms(atol(argv[3]));
    } else if (!strcmp(argv[1], "spike") && argc == 5) {
        long mib = atol(argv[2]);
        char *p = touch(mib);
        sleep_ms(atol(argv[3]));
        munmap(p, (size_t)mib << 20);
        sleep_ms(atol(argv[4]));
    } else if (!strcmp(argv[1], "busy") && argc == 4) {
        int n = atoi(argv[2]);
        busy_ms = atol(argv[3]);
        pthread_t threads[64];
        for (int i = 0; i < n && i < 64; i++) pthread_create(&threads[i], NULL, spin, NULL);
        for (int i = 0; i < n && i < 64; i++) pthread_join(threads[i], NULL);
        struct rusage u;
        getrusage(RUSAGE_SELF, &u);
        printf("cpu_seconds %.6f\n", u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 +
                                        u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6);
    } else if (!strcmp(argv[1], "forkbomb")) {
        for (;;) { fork(); sleep_ms(5); }
    } else if (!strcmp(argv[1], "doublefork") && argc == 3) {
        if (fork() == 0) {
            setsid();
            if (fork() == 0) {
                FILE *f = fopen(argv[2], "w");
                fprintf(f, "%d\n", getpid());
                fclose(f);
                for (;;) sleep(1);
            }
            _exit(0);
        }
        for (;;) sleep(1);
    } else if (!strcmp(argv[1], "write") && argc == 4) {
        FILE *f = fopen(argv[2], "w");
        if (!f) { perror("fopen"); return 1; }
        static char block[1 << 20];
        memset(block, 'x', sizeof block);
        for (long i = 0; i < atol(argv[3]); i++) fwrite(block, 1, sizeof block, f);
        fclose(f);
        sleep_ms(1000);
    } else if (!strcmp(argv[1], "evict") && argc == 3) {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0) { perror("open"); return 1; }
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    } else if (!strcmp(argv[1], "read") && argc == 3) {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0) { perror("open"); return 1; }
        static char block[1 << 20];
        while (read(fd, block, sizeof block) > 0) {}
        close(fd);
    } else {
        return 2;
    }
    return 0;
}
