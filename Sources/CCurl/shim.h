#ifndef PREFETCHD_CCURL_SHIM_H
#define PREFETCHD_CCURL_SHIM_H
#include <curl/curl.h>

/* curl_easy_setopt, curl_easy_getinfo, curl_multi_setopt and curl_share_setopt are variadic, which Swift cannot call:
   one typed wrapper per argument kind. */

static inline CURLcode pf_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pf_easy_setopt_off_t(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pf_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pf_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pf_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }

typedef size_t (*pf_data_callback)(char *data, size_t size, size_t count, void *userdata);
static inline CURLcode pf_easy_setopt_data_callback(CURL *h, CURLoption o, pf_data_callback v) { return curl_easy_setopt(h, o, v); }

typedef int (*pf_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
static inline CURLcode pf_easy_setopt_xferinfo_callback(CURL *h, pf_xferinfo_callback v) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, v); }

typedef int (*pf_prereq_callback)(void *userdata, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port, int conn_local_port);
static inline CURLcode pf_easy_setopt_prereq_callback(CURL *h, pf_prereq_callback v) { return curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, v); }

typedef int (*pf_resolver_start_callback)(void *resolver_state, void *reserved, void *userdata);
static inline CURLcode pf_easy_setopt_resolver_start_callback(CURL *h, pf_resolver_start_callback v) { return curl_easy_setopt(h, CURLOPT_RESOLVER_START_FUNCTION, v); }

static inline CURLcode pf_easy_setopt_opensocket_callback(CURL *h, curl_opensocket_callback v) { return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, v); }

static inline CURLcode pf_easy_setopt_sockopt_callback(CURL *h, curl_sockopt_callback v) { return curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, v); }

static inline CURLcode pf_easy_setopt_closesocket_callback(CURL *h, curl_closesocket_callback v) { return curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, v); }

static inline CURLcode pf_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode pf_easy_getinfo_off_t(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode pf_easy_getinfo_string(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode pf_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode pf_easy_getinfo_socket(CURL *h, CURLINFO i, curl_socket_t *v) { return curl_easy_getinfo(h, i, v); }

/* CURLVERSION_NOW is a macro naming another macro: Swift sees neither. */
static inline const curl_version_info_data *pf_version_info(void) { return curl_version_info(CURLVERSION_NOW); }

static inline CURLSHcode pf_share_setopt_long(CURLSH *s, CURLSHoption o, long v) { return curl_share_setopt(s, o, v); }

static inline CURLMcode pf_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }
static inline CURLMcode pf_multi_setopt_pointer(CURLM *m, CURLMoption o, void *v) { return curl_multi_setopt(m, o, v); }
static inline CURLMcode pf_multi_setopt_socket_callback(CURLM *m, curl_socket_callback v) { return curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, v); }
static inline CURLMcode pf_multi_setopt_timer_callback(CURLM *m, curl_multi_timer_callback v) { return curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, v); }

#endif
