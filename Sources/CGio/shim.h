#ifndef PREFETCHD_CGIO_SHIM_H
#define PREFETCHD_CGIO_SHIM_H
#include <gio/gio.h>

/// Called with the data it was connected with whenever a proxy's properties or its service's presence change.
typedef void (*prefetchd_proxy_changed_fn)(gpointer data);

/// Connects `handler` to a proxy's "g-properties-changed" (the service changed a property) and "notify::g-name-owner"
/// (the service appeared or went away). Swapped, so the handler gets `data` first and ignores the signal's arguments.
static inline void prefetchd_proxy_on_change(GDBusProxy *proxy, prefetchd_proxy_changed_fn handler, gpointer data) {
    g_signal_connect_data(proxy, "g-properties-changed", G_CALLBACK(handler), data, NULL, G_CONNECT_SWAPPED);
    g_signal_connect_data(proxy, "notify::g-name-owner", G_CALLBACK(handler), data, NULL, G_CONNECT_SWAPPED);
}

/// A private connection to the system bus (not GIO's shared one, which would end the process when the bus goes away:
/// its exit-on-close is set), or NULL with `error` set.
static inline GDBusConnection *prefetchd_system_bus_connect(GError **error) {
    gchar *address = g_dbus_address_get_for_bus_sync(G_BUS_TYPE_SYSTEM, NULL, error);
    if (address == NULL) return NULL;
    GDBusConnection *connection = g_dbus_connection_new_for_address_sync(
        address, G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
        NULL, NULL, error);
    g_free(address);
    if (connection != NULL) g_dbus_connection_set_exit_on_close(connection, FALSE);
    return connection;
}

/// Connects `handler` to the connection's "closed" signal (the bus went away), swapped like the proxies' handlers.
static inline void prefetchd_connection_on_closed(GDBusConnection *connection, prefetchd_proxy_changed_fn handler,
                                                  gpointer data) {
    g_signal_connect_data(connection, "closed", G_CALLBACK(handler), data, NULL, G_CONNECT_SWAPPED);
}

/// Calls `callback(data)` once, `seconds` from now, on the thread that runs `context`.
static inline void prefetchd_call_later(GMainContext *context, guint seconds, GSourceFunc callback, gpointer data) {
    GSource *source = g_timeout_source_new_seconds(seconds);
    g_source_set_callback(source, callback, data, NULL);
    g_source_attach(source, context);
    g_source_unref(source);
}

/// A cached property of type `u` (uint32): 1 and `*value` set when the service has it with that type, else 0.
static inline int prefetchd_proxy_uint32(GDBusProxy *proxy, const char *name, guint32 *value) {
    GVariant *variant = g_dbus_proxy_get_cached_property(proxy, name);
    int found = variant != NULL && g_variant_is_of_type(variant, G_VARIANT_TYPE_UINT32);
    if (found) *value = g_variant_get_uint32(variant);
    if (variant) g_variant_unref(variant);
    return found;
}

/// A cached property of type `b` (boolean): 1 and `*value` set when the service has it with that type, else 0.
static inline int prefetchd_proxy_boolean(GDBusProxy *proxy, const char *name, int *value) {
    GVariant *variant = g_dbus_proxy_get_cached_property(proxy, name);
    int found = variant != NULL && g_variant_is_of_type(variant, G_VARIANT_TYPE_BOOLEAN);
    if (found) *value = g_variant_get_boolean(variant) ? 1 : 0;
    if (variant) g_variant_unref(variant);
    return found;
}

/// A cached property of type `s` (string), copied (free it with g_free), or NULL when the service does not have it.
static inline gchar *prefetchd_proxy_string(GDBusProxy *proxy, const char *name) {
    GVariant *variant = g_dbus_proxy_get_cached_property(proxy, name);
    gchar *value = variant != NULL && g_variant_is_of_type(variant, G_VARIANT_TYPE_STRING)
        ? g_variant_dup_string(variant, NULL) : NULL;
    if (variant) g_variant_unref(variant);
    return value;
}

#endif
