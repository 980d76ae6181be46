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

#endif
