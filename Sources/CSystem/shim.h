#ifndef PREFETCHD_CSYSTEM_SHIM_H
#define PREFETCHD_CSYSTEM_SHIM_H
/* Linux interfaces the Glibc module leaves out: epoll, signalfd, eventfd, timerfd, malloc_trim, and getaddrinfo's
   GNU error code for a name without addresses. */
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

/* glibc's EAI_NODATA (<netdb.h> shows it under _GNU_SOURCE only; including it here would hide the socket constants
   of the Glibc module). */
static const int pf_eai_nodata = -5;
#endif
