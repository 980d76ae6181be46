#ifndef PREFETCHD_CCRYPTO_SHIM_H
#define PREFETCHD_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/x509.h>
#endif
