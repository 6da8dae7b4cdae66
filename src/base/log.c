#include "og_base.h"

static const char *level_name(og_log_level level) {
    switch (level) {
    case OG_LOG_ERROR: return "error";
    case OG_LOG_WARN: return "warning";
    case OG_LOG_INFO: return "info";
    case OG_LOG_DEBUG: return "debug";
    }
    return "log";
}

void og_log(const og_logger *lg, og_log_level level, const char *fmt, ...) {
    og_log_level max = lg ? lg->level : OG_LOG_WARN;
    if (level > max) return;
    FILE *out = (lg && lg->out) ? lg->out : stderr;
    /* One fprintf per line so concurrent writers do not interleave mid-line. */
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(out, "onegpu: %s: %s\n", level_name(level), line);
}
