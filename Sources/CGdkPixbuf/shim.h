#ifndef PREFETCHD_CGDKPIXBUF_SHIM_H
#define PREFETCHD_CGDKPIXBUF_SHIM_H
#include <gdk-pixbuf/gdk-pixbuf.h>
#include <glib.h>

/// The C signature of a GdkPixbufLoader "size-prepared" handler.
typedef void (*prefetchd_size_prepared_fn)(GdkPixbufLoader *loader, gint width, gint height, gpointer data);

/// Connects `handler` to the loader's "size-prepared" signal (a typed `g_signal_connect_data`, which Swift cannot
/// call with a typed callback because GCallback is `void (*)(void)`). `data` must outlive the loader.
static inline gulong prefetchd_loader_on_size_prepared(GdkPixbufLoader *loader, prefetchd_size_prepared_fn handler,
                                                       gpointer data) {
    return g_signal_connect_data(loader, "size-prepared", G_CALLBACK(handler), data, NULL, (GConnectFlags)0);
}

/// The C signature of a GdkPixbufLoader "area-prepared" handler.
typedef void (*prefetchd_area_prepared_fn)(GdkPixbufLoader *loader, gpointer data);

/// Connects `handler` to the loader's "area-prepared" signal; `data` must outlive the loader.
static inline gulong prefetchd_loader_on_area_prepared(GdkPixbufLoader *loader, prefetchd_area_prepared_fn handler,
                                                       gpointer data) {
    return g_signal_connect_data(loader, "area-prepared", G_CALLBACK(handler), data, NULL, (GConnectFlags)0);
}

/// The C signature of a GdkPixbufLoader "area-updated" handler.
typedef void (*prefetchd_area_updated_fn)(GdkPixbufLoader *loader, gint x, gint y, gint width, gint height,
                                          gpointer data);

/// Connects `handler` to the loader's "area-updated" signal; `data` must outlive the loader.
static inline gulong prefetchd_loader_on_area_updated(GdkPixbufLoader *loader, prefetchd_area_updated_fn handler,
                                                      gpointer data) {
    return g_signal_connect_data(loader, "area-updated", G_CALLBACK(handler), data, NULL, (GConnectFlags)0);
}
#endif
