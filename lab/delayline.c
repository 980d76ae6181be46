/*
 * delayline: the lab's link. Joins a TUN device in the client's network namespace to one in the server's, and
 * carries every IP packet across as a real link would, separately in each direction:
 *
 *   arrival -> loss (probability p) -> bottleneck buffer (bytes, drop-tail) -> sent at the rate -> one-way delay
 *
 * The bottleneck is a FIFO that sends at `rate` bits per second (IP bytes, no link-layer framing); a packet that
 * does not fit in the bytes still waiting to be sent is dropped. While the link is down every packet is dropped,
 * at arrival and at delivery. Packets keep their order; the delay has no jitter.
 *
 * Usage: delayline CONTROL_SOCKET CLIENT_NETNS SERVER_NETNS DEVICE
 *   Creates DEVICE (a TUN device, gone when this process exits) in both namespaces (paths like /run/netns/NAME),
 *   then serves the control socket: one command line per connection, one reply line ("ok ..." or "error ...").
 *     set c2s|s2c|both KEY=VALUE...   delay_us, rate_bps (0: unlimited), buffer_bytes (0: unlimited), loss (0..1)
 *     down SECONDS                    the link is down for SECONDS (0 brings it up now)
 *     seed N                          seeds the loss generator (runs are repeatable)
 *     stats                           settings, counters and this process's CPU time
 * Stops on SIGTERM or SIGINT. Single-threaded: ppoll on both devices and the socket, sleeping until the next
 * packet is due.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MTU 1500
#define SLOT_BYTES 1600     /* one packet; the devices' MTU is 1500 and they do no offloads */
#define SLOTS 8192          /* packets in flight per direction: 12 MB, 1 Gbit/s for 100 ms */
#define READ_BURST 64       /* packets read from one device before looking at the other */

struct packet {
    uint64_t due_ns;
    uint32_t len;
    unsigned char data[SLOT_BYTES];
};

struct direction {
    const char *name;
    int in_fd, out_fd;
    /* settings */
    uint64_t delay_ns, rate_bps, buffer_bytes;
    double loss;
    /* the bottleneck: when it will have sent everything it holds, and the last delivery time handed out */
    uint64_t busy_until_ns, last_due_ns;
    /* packets on their way, in order of due time */
    struct packet *ring;
    size_t head, count;
    /* counters */
    uint64_t packets, bytes, delivered, delivered_bytes, lost, overflowed, dropped_down, dropped_full;
};

static struct direction c2s = {.name = "c2s"}, s2c = {.name = "s2c"};
static uint64_t down_until_ns;
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static volatile sig_atomic_t stopping;

static void die(const char *format, ...) {
    va_list args;
    va_start(args, format);
    fprintf(stderr, "delayline: ");
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n");
    va_end(args);
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: uniform in [0, 1). */
static double random_unit(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dULL) >> 11) / 9007199254740992.0;
}

/* Opens a TUN device named `name` inside the network namespace at `netns_path`; this process stays where it was. */
static int open_tun(const char *netns_path, const char *name) {
    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    int target = open(netns_path, O_RDONLY | O_CLOEXEC);
    if (home < 0 || target < 0) die("cannot open %s: %s", netns_path, strerror(errno));
    if (setns(target, CLONE_NEWNET) != 0) die("setns %s: %s", netns_path, strerror(errno));
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) die("open /dev/net/tun: %s", strerror(errno));
    struct ifreq request;
    memset(&request, 0, sizeof request);
    request.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(request.ifr_name, IFNAMSIZ, "%s", name);
    if (ioctl(fd, TUNSETIFF, &request) != 0) die("TUNSETIFF %s in %s: %s", name, netns_path, strerror(errno));
    if (setns(home, CLONE_NEWNET) != 0) die("setns back: %s", strerror(errno));
    close(home);
    close(target);
    return fd;
}

/* A packet read from d->in_fd at `now`: dropped, or queued with the time it reaches the other side. */
static void admit(struct direction *d, const unsigned char *data, size_t len, uint64_t now) {
    d->packets++;
    d->bytes += len;
    if (now < down_until_ns) { d->dropped_down++; return; }
    if (d->loss > 0 && random_unit() < d->loss) { d->lost++; return; }
    uint64_t sent_ns = now;
    if (d->rate_bps > 0) {
        uint64_t start = d->busy_until_ns > now ? d->busy_until_ns : now;
        uint64_t waiting_bytes = (uint64_t)((double)(start - now) * (double)d->rate_bps / 8e9);
        if (d->buffer_bytes > 0 && waiting_bytes + len > d->buffer_bytes) { d->overflowed++; return; }
        sent_ns = start + (uint64_t)((double)len * 8e9 / (double)d->rate_bps);
        d->busy_until_ns = sent_ns;
    }
    if (d->count == SLOTS) { d->dropped_full++; return; }
    uint64_t due = sent_ns + d->delay_ns;
    if (due < d->last_due_ns) due = d->last_due_ns; /* a shorter delay set live must not reorder */
    d->last_due_ns = due;
    struct packet *p = &d->ring[(d->head + d->count) % SLOTS];
    p->due_ns = due;
    p->len = (uint32_t)len;
    memcpy(p->data, data, len);
    d->count++;
}

static void read_device(struct direction *d) {
    unsigned char buffer[SLOT_BYTES];
    for (int i = 0; i < READ_BURST; i++) {
        ssize_t n = read(d->in_fd, buffer, sizeof buffer);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) return;
            die("read %s: %s", d->name, strerror(errno));
        }
        if (n == 0 || n > MTU) continue; /* never happens with MTU 1500 and no offloads */
        admit(d, buffer, (size_t)n, now_ns());
    }
}

/* Writes every packet that is due; returns when the next one is due (UINT64_MAX: none waiting). */
static uint64_t deliver(struct direction *d, uint64_t now) {
    while (d->count > 0) {
        struct packet *p = &d->ring[d->head];
        if (p->due_ns > now) return p->due_ns;
        if (now < down_until_ns) {
            d->dropped_down++;
        } else if (write(d->out_fd, p->data, p->len) == (ssize_t)p->len) {
            d->delivered++;
            d->delivered_bytes += p->len;
        } else {
            d->dropped_full++; /* the receiving device refused it */
        }
        d->head = (d->head + 1) % SLOTS;
        d->count--;
    }
    return UINT64_MAX;
}

static int set_value(struct direction *d, const char *key, const char *value, char *error, size_t error_size) {
    char *end;
    errno = 0;
    if (strcmp(key, "loss") == 0) {
        double loss = strtod(value, &end);
        if (errno || *end || !(loss >= 0 && loss <= 1)) goto bad;
        d->loss = loss;
        return 0;
    }
    unsigned long long number = strtoull(value, &end, 10);
    if (errno || *end || value[0] == '-' || value[0] == '\0') goto bad;
    if (strcmp(key, "delay_us") == 0 && number <= 60000000ULL) d->delay_ns = number * 1000ULL;
    else if (strcmp(key, "rate_bps") == 0 && number <= 100000000000ULL) d->rate_bps = number;
    else if (strcmp(key, "buffer_bytes") == 0 && number <= (1ULL << 30)) d->buffer_bytes = number;
    else goto bad;
    return 0;
bad:
    snprintf(error, error_size, "error bad setting %s=%s (delay_us <= 60000000, rate_bps <= 1e11, "
             "buffer_bytes <= 2^30, 0 <= loss <= 1)", key, value);
    return -1;
}

static void append(char *out, size_t size, const char *format, ...) {
    size_t used = strlen(out);
    if (used >= size) return;
    va_list args;
    va_start(args, format);
    vsnprintf(out + used, size - used, format, args);
    va_end(args);
}

static void describe(const struct direction *d, char *out, size_t size) {
    append(out, size, " %s.delay_us=%llu %s.rate_bps=%llu %s.buffer_bytes=%llu %s.loss=%g", d->name,
           (unsigned long long)(d->delay_ns / 1000), d->name, (unsigned long long)d->rate_bps, d->name,
           (unsigned long long)d->buffer_bytes, d->name, d->loss);
    append(out, size, " %s.packets=%llu %s.bytes=%llu %s.delivered=%llu %s.delivered_bytes=%llu %s.lost=%llu"
           " %s.overflowed=%llu %s.dropped_down=%llu %s.dropped_full=%llu %s.in_flight=%zu", d->name,
           (unsigned long long)d->packets, d->name, (unsigned long long)d->bytes, d->name,
           (unsigned long long)d->delivered, d->name, (unsigned long long)d->delivered_bytes, d->name,
           (unsigned long long)d->lost, d->name, (unsigned long long)d->overflowed, d->name,
           (unsigned long long)d->dropped_down, d->name, (unsigned long long)d->dropped_full, d->name, d->count);
}

/* Runs one command line; writes the reply line (without newline) to `out`. */
static void command(char *line, char *out, size_t size) {
    char *save = NULL;
    char *verb = strtok_r(line, " \t\r\n", &save);
    out[0] = '\0';
    if (verb == NULL) {
        snprintf(out, size, "error empty command");
    } else if (strcmp(verb, "set") == 0) {
        char *which = strtok_r(NULL, " \t\r\n", &save);
        struct direction *targets[2] = {NULL, NULL};
        if (which && strcmp(which, "both") == 0) targets[0] = &c2s, targets[1] = &s2c;
        else if (which && strcmp(which, "c2s") == 0) targets[0] = &c2s;
        else if (which && strcmp(which, "s2c") == 0) targets[0] = &s2c;
        else { snprintf(out, size, "error set needs c2s, s2c or both"); return; }
        /* Every setting is checked on a scratch copy first: a bad one changes nothing. */
        struct direction scratch = c2s;
        char *keys[16], *values[16];
        int n = 0;
        for (char *word; (word = strtok_r(NULL, " \t\r\n", &save)) != NULL; n++) {
            char *equals = strchr(word, '=');
            if (equals == NULL || n == 16) { snprintf(out, size, "error expected KEY=VALUE, got %s", word); return; }
            *equals = '\0';
            keys[n] = word, values[n] = equals + 1;
            if (set_value(&scratch, keys[n], values[n], out, size) != 0) return;
        }
        for (int t = 0; t < 2 && targets[t]; t++)
            for (int i = 0; i < n; i++) set_value(targets[t], keys[i], values[i], out, size);
        snprintf(out, size, "ok");
    } else if (strcmp(verb, "down") == 0) {
        char *value = strtok_r(NULL, " \t\r\n", &save);
        char *end = NULL;
        double seconds = value ? strtod(value, &end) : -1;
        if (value == NULL || *end || !(seconds >= 0 && seconds <= 86400)) {
            snprintf(out, size, "error down needs SECONDS from 0 to 86400");
            return;
        }
        down_until_ns = seconds > 0 ? now_ns() + (uint64_t)(seconds * 1e9) : 0;
        snprintf(out, size, "ok");
    } else if (strcmp(verb, "seed") == 0) {
        char *value = strtok_r(NULL, " \t\r\n", &save);
        char *end = NULL;
        unsigned long long seed = value ? strtoull(value, &end, 10) : 0;
        if (value == NULL || *end) { snprintf(out, size, "error seed needs a number"); return; }
        rng_state = seed ? seed : 0x9e3779b97f4a7c15ULL; /* xorshift must not start at 0 */
        snprintf(out, size, "ok");
    } else if (strcmp(verb, "stats") == 0) {
        struct rusage usage;
        getrusage(RUSAGE_SELF, &usage);
        uint64_t now = now_ns();
        snprintf(out, size, "ok down_for_ms=%llu cpu_user_us=%lld cpu_system_us=%lld",
                 (unsigned long long)(now < down_until_ns ? (down_until_ns - now) / 1000000ULL : 0),
                 (long long)usage.ru_utime.tv_sec * 1000000LL + usage.ru_utime.tv_usec,
                 (long long)usage.ru_stime.tv_sec * 1000000LL + usage.ru_stime.tv_usec);
        describe(&c2s, out, size);
        describe(&s2c, out, size);
    } else {
        snprintf(out, size, "error unknown command %s (set, down, seed, stats)", verb);
    }
}

/* Serves one control connection: one line in, one line out. A client that sends nothing within 200 ms is dropped,
 * so the link never waits long for a controller. */
static void serve_control(int listener) {
    int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (client < 0) return;
    struct timeval timeout = {.tv_sec = 0, .tv_usec = 200000};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    char line[1024];
    size_t used = 0;
    while (used < sizeof line - 1) {
        ssize_t n = read(client, line + used, sizeof line - 1 - used);
        if (n <= 0) break;
        used += (size_t)n;
        if (memchr(line, '\n', used)) break;
    }
    line[used] = '\0';
    char reply[2048];
    command(line, reply, sizeof reply - 1);
    strcat(reply, "\n");
    ssize_t ignored = write(client, reply, strlen(reply));
    (void)ignored;
    close(client);
}

static void on_signal(int signal_number) {
    (void)signal_number;
    stopping = 1;
}

int main(int argc, char **argv) {
    if (argc != 5) die("usage: delayline CONTROL_SOCKET CLIENT_NETNS SERVER_NETNS DEVICE");
    const char *control_path = argv[1];
    int client_fd = open_tun(argv[2], argv[4]);
    int server_fd = open_tun(argv[3], argv[4]);
    c2s.in_fd = client_fd, c2s.out_fd = server_fd;
    s2c.in_fd = server_fd, s2c.out_fd = client_fd;
    c2s.ring = malloc(sizeof(struct packet) * SLOTS);
    s2c.ring = malloc(sizeof(struct packet) * SLOTS);
    if (c2s.ring == NULL || s2c.ring == NULL) die("out of memory");
    rng_state ^= (uint64_t)getpid() << 32 ^ now_ns();

    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(control_path) >= sizeof address.sun_path) die("control socket path too long: %s", control_path);
    strcpy(address.sun_path, control_path);
    unlink(control_path);
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 8) != 0)
        die("control socket %s: %s", control_path, strerror(errno));

    struct sigaction action = {.sa_handler = on_signal};
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigset_t blocked, unblocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigprocmask(SIG_BLOCK, &blocked, &unblocked); /* signals arrive only inside ppoll, so none is missed */

    while (!stopping) {
        uint64_t now = now_ns();
        uint64_t next = deliver(&c2s, now);
        uint64_t next_s2c = deliver(&s2c, now);
        if (next_s2c < next) next = next_s2c;
        struct pollfd fds[3] = {
            {.fd = client_fd, .events = POLLIN},
            {.fd = server_fd, .events = POLLIN},
            {.fd = listener, .events = POLLIN},
        };
        struct timespec wait, *timeout = NULL;
        if (next != UINT64_MAX) {
            uint64_t delta = next > now ? next - now : 0;
            wait.tv_sec = (time_t)(delta / 1000000000ULL);
            wait.tv_nsec = (long)(delta % 1000000000ULL);
            timeout = &wait;
        }
        if (ppoll(fds, 3, timeout, &unblocked) < 0) {
            if (errno == EINTR) continue;
            die("ppoll: %s", strerror(errno));
        }
        if (fds[0].revents & POLLIN) read_device(&c2s);
        if (fds[1].revents & POLLIN) read_device(&s2c);
        if (fds[2].revents & POLLIN) serve_control(listener);
        if ((fds[0].revents | fds[1].revents) & (POLLERR | POLLHUP | POLLNVAL)) die("a TUN device went away");
    }
    unlink(control_path);
    return 0;
}
