/* LD_PRELOAD shim for the benchmark's load generators (wrk, h2load, edgecache-loadgen): each
 * TCP connection to 127.0.0.1 is first bound to one of EC_SRC_COUNT loopback source addresses,
 * 127.0.0.2 and up, in turn from EC_SRC_FIRST, so the server under test sees that many clients
 * instead of one (an edge serves many addresses; per-address limits see one otherwise).
 * Without EC_SRC_COUNT (or below 2) it changes nothing. Built by bench.py with gcc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>

static atomic_uint turn;

static unsigned env_uint(const char *name) {
    const char *v = getenv(name);
    return v ? (unsigned)strtoul(v, 0, 10) : 0;
}

int connect(int fd, const struct sockaddr *to, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real)
        real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    unsigned count = env_uint("EC_SRC_COUNT");
    if (count > 253)
        count = 253;
    if (count >= 2 && to && to->sa_family == AF_INET && len >= sizeof(struct sockaddr_in) &&
        ((const struct sockaddr_in *)to)->sin_addr.s_addr == htonl(INADDR_LOOPBACK)) {
        unsigned n = (env_uint("EC_SRC_FIRST") + atomic_fetch_add(&turn, 1)) % count;
        struct sockaddr_in from = {0};
        from.sin_family = AF_INET;
        from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + n);
        int one = 1;
        /* The port is chosen at connect time, per destination: no ephemeral-port shortage. */
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        /* A socket already bound (EINVAL) keeps its address. */
        bind(fd, (const struct sockaddr *)&from, sizeof from);
    }
    return real(fd, to, len);
}
