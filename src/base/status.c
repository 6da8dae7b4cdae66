#include "og_base.h"

const char *og_status_str(og_status st) {
    switch (st) {
    case OG_OK: return "ok";
    case OG_ERR_INVALID_ARG: return "invalid argument";
    case OG_ERR_IO: return "i/o error";
    case OG_ERR_NOMEM: return "out of memory";
    case OG_ERR_FORMAT: return "malformed input";
    case OG_ERR_UNSUPPORTED: return "unsupported";
    case OG_ERR_NOT_FOUND: return "not found";
    case OG_ERR_TYPE: return "wrong type";
    case OG_ERR_RANGE: return "out of range";
    case OG_ERR_STATE: return "invalid state";
    }
    return "unknown status";
}

og_status og_fail(char *err, size_t errlen, og_status st, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}
