#ifndef PREFETCHD_CSYSTEM_SHIM_H
#define PREFETCHD_CSYSTEM_SHIM_H
/* Linux interfaces the Glibc module leaves out: epoll, signalfd, eventfd, timerfd, malloc_trim. */
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#endif
