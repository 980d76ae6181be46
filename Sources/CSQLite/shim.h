#ifndef PREFETCHD_CSQLITE_SHIM_H
#define PREFETCHD_CSQLITE_SHIM_H
#include <sqlite3.h>

/* SQLITE_TRANSIENT is a cast macro Swift cannot import. */
static inline int pf_sqlite3_bind_text_copy(sqlite3_stmt *s, int i, const char *v) {
    return sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
}
static inline int pf_sqlite3_bind_blob_copy(sqlite3_stmt *s, int i, const void *v, int n) {
    return sqlite3_bind_blob(s, i, v, n, SQLITE_TRANSIENT);
}

/* sqlite3_config is variadic. Without memory statistics, which nothing reads, an allocation takes no global mutex. */
static inline int pf_sqlite3_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

#endif
