#ifndef PREFETCHD_CGDKPIXBUF_SHIM_H
#define PREFETCHD_CGDKPIXBUF_SHIM_H
#include <gdk-pixbuf/gdk-pixbuf.h>
#include <glib.h>
#endif
