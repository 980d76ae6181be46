#ifndef PREFETCHD_CSYSTEM_SHIM_H
#define PREFETCHD_CSYSTEM_SHIM_H
/* Linux interfaces the Glibc module leaves out: epoll, signalfd, eventfd, timerfd, malloc_trim, accept4, the newer
   fields of TCP_INFO, getaddrinfo's GNU error code for a name without addresses, and naming a thread. */
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#include <stdint.h>

/* The kernel's struct tcp_info (linux/tcp.h) as far as tcpi_min_rtt; glibc's copy stops before
   tcpi_bytes_received. The kernel only appends to it, so this prefix keeps its layout. */
struct pf_tcp_info {
    uint8_t state, ca_state, retransmits, probes, backoff, options, wscale, flags;
    uint32_t rto, ato, snd_mss, rcv_mss;
    uint32_t unacked, sacked, lost, retrans, fackets;
    uint32_t last_data_sent, last_ack_sent, last_data_recv, last_ack_recv;
    uint32_t pmtu, rcv_ssthresh, rtt, rttvar, snd_ssthresh, snd_cwnd, advmss, reordering;
    uint32_t rcv_rtt, rcv_space;
    uint32_t total_retrans;
    uint64_t pacing_rate, max_pacing_rate, bytes_acked, bytes_received;
    uint32_t segs_out, segs_in;
    uint32_t notsent_bytes, min_rtt;
};

/* glibc's accept4, which <sys/socket.h> declares under _GNU_SOURCE only (including it here would hide the socket
   constants of the Glibc module, as for EAI_NODATA below): accepts a client's socket with SOCK_NONBLOCK and
   SOCK_CLOEXEC set, in one call. */
struct sockaddr;
extern int accept4(int fd, struct sockaddr *address, uint32_t *length, int flags);

/* glibc's EAI_NODATA (<netdb.h> shows it under _GNU_SOURCE only; including it here would hide the socket constants
   of the Glibc module). */
static const int pf_eai_nodata = -5;

/* linux/filter.h's struct sock_filter and sock_fprog, for SO_ATTACH_FILTER (the kernel header is left out, so that
   none of its definitions joins this module). */
struct pf_sock_filter { uint16_t code; uint8_t jt, jf; uint32_t k; };
struct pf_sock_fprog { unsigned short len; struct pf_sock_filter *filter; };

/* glibc's pthread_setname_np (declared under _GNU_SOURCE only, as accept4): names a thread, at most 15 bytes. */
extern int pthread_setname_np(unsigned long thread, const char *name);

/* A mark of the daemon's own fatal signals (FatalSignalMark.swift). A handler of SIGSEGV, SIGBUS, SIGILL, SIGFPE and
   SIGABRT writes the signal's number into the file `fd` (with pwrite, which may be called in a handler) and raises
   the signal again; the kernel has put back the default action as it entered the handler (SA_RESETHAND), so the
   signal then takes the process as it would have (a core dump), a fault as well as a signal sent with kill(). In C:
   Swift's globals may allocate or lock on first use, which a signal handler must not. */
#include <signal.h>
#include <unistd.h>

/* The mark's descriptor (a static of a function: Swift does not emit a header's static variables). */
static inline int *pf_fatal_mark(void) { static int fd = -1; return &fd; }

static inline void pf_on_fatal_signal(int signal) {
    char text[3] = { (char)('0' + signal / 10), (char)('0' + signal % 10), '\n' };
    if (pwrite(*pf_fatal_mark(), text, sizeof text, 0) < 0) { /* nothing more can be done here */ }
    raise(signal);
}

/* Starts marking the fatal signals into `fd`; 0, or -1 with errno. */
static inline int pf_mark_fatal_signals(int fd) {
    static const int signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
    *pf_fatal_mark() = fd;
    struct sigaction action;
    action.sa_handler = pf_on_fatal_signal;
    action.sa_flags = SA_RESETHAND | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (unsigned i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        if (sigaction(signals[i], &action, NULL) != 0) return -1;
    }
    return 0;
}

/* Gives the calling thread a stack of its own for signal handlers (SA_ONSTACK), so that a stack overflow, a fault
   with no stack left to run a handler on, is marked too; pass what it returns to pf_signal_stack_end when the thread
   ends. NULL when there is no memory (the thread then goes without). */
static inline void *pf_signal_stack_begin(void) {
    stack_t stack;
    stack.ss_size = 64 * 1024;
    stack.ss_sp = malloc(stack.ss_size);
    stack.ss_flags = 0;
    if (stack.ss_sp != NULL && sigaltstack(&stack, NULL) != 0) {
        free(stack.ss_sp);
        return NULL;
    }
    return stack.ss_sp;
}

static inline void pf_signal_stack_end(void *memory) {
    if (memory == NULL) return;
    stack_t off;
    off.ss_sp = NULL;
    off.ss_size = 0;
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, NULL);
    free(memory);
}

/* stdout, which print writes through: Swift 6 does not let its global be read, and a static prefetchctl has no
   dlsym to find it. */
#include <stdio.h>
static inline FILE *pf_stdout(void) { return stdout; }
#endif
