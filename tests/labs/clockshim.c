/* Test tooling: offsets the wall clock (CLOCK_REALTIME, gettimeofday, time) of the process
 * it is preloaded into by the seconds written in the file CM_CLOCK_OFFSET_FILE ("+7200"),
 * re-read at most every 0.2 s; the monotonic clock is left alone, as an NTP step leaves it.
 * Children do not inherit it (LD_PRELOAD is dropped at load). Built by tests/labs/clockshim.py.
 * (Debian 12's libfaketime cannot do this for Python 3.11: with its monotonic clock left
 * true, time.sleep fails with EINVAL, wolfcw/libfaketime#426.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static char *offset_file;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static volatile long long offset_s;
static volatile long long read_at_ms = -1000000;

__attribute__((constructor)) static void clockshim_init(void) {
    const char *path = getenv("CM_CLOCK_OFFSET_FILE");
    offset_file = path ? strdup(path) : NULL;
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    unsetenv("LD_PRELOAD");
    unsetenv("CM_CLOCK_OFFSET_FILE");
}

static long long current_offset(void) {
    struct timespec mono;
    if (offset_file == NULL || real_clock_gettime(CLOCK_MONOTONIC, &mono) != 0)
        return offset_s;
    long long now_ms = (long long)mono.tv_sec * 1000 + mono.tv_nsec / 1000000;
    if (now_ms - read_at_ms < 200)
        return offset_s;
    read_at_ms = now_ms;
    FILE *file = fopen(offset_file, "r");
    if (file != NULL) {
        long long value;
        if (fscanf(file, "%lld", &value) == 1)
            offset_s = value;
        fclose(file);
    }
    return offset_s;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int result = real_clock_gettime(clock, ts);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        ts->tv_sec += current_offset();
    return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int result = clock_gettime(CLOCK_REALTIME, &ts);
    (void)tz;
    if (result == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
