#include "og_base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t og_fnv1a64(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

og_status og_parse_size(const char *s, uint64_t *out_bytes) {
    if (!s || !*s || !out_bytes) return OG_ERR_INVALID_ARG;
    /* plain decimal only: no sign, spaces, hex or exponent ("0x10G", "1e3G", "+1G") */
    size_t nd = strspn(s, "0123456789.");
    if (nd == 0 || !isdigit((unsigned char)s[0])) return OG_ERR_INVALID_ARG;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end != s + nd) return OG_ERR_INVALID_ARG;
    if (end == s || errno || !(v >= 0) || !isfinite(v)) return OG_ERR_INVALID_ARG;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mult > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0') return OG_ERR_INVALID_ARG;
    double bytes = v * mult;
    if (bytes > 1152921504606846976.0) return OG_ERR_INVALID_ARG; /* 1 EiB: beyond any machine */
    if (mult == 1 && bytes != floor(bytes)) return OG_ERR_INVALID_ARG; /* "1.5" bytes */
    *out_bytes = (uint64_t)bytes;
    return OG_OK;
}

const char *og_fmt_bytes(uint64_t bytes, char *buf, size_t buflen) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, buflen, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, buflen, "%.2f %s", v, units[u]);
    return buf;
}

og_status og_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                       char *err, size_t errlen) {
    *out = NULL;
    /* O_NONBLOCK: a FIFO must not block the open; only regular files are read. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return og_fail(err, errlen, OG_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return og_fail(err, errlen, OG_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return og_fail(err, errlen, OG_ERR_IO, "%s: %s", path, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return og_fail(err, errlen, OG_ERR_RANGE, "%s: %lld bytes, more than the %zu allowed",
                       path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return og_fail(err, errlen, OG_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n + 1);
    }
    size_t got = fread(buf, 1, n, f);
    int rerr = ferror(f);
    fclose(f);
    if (got != n || rerr) {
        free(buf);
        return og_fail(err, errlen, OG_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = '\0';
    *out = buf;
    if (out_len) *out_len = n;
    return OG_OK;
}

og_status og_check_writable(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return og_fail(err, errlen, OG_ERR_IO, "%s: exists and is not a regular file (a %s); give a file path", path,
                       S_ISLNK(st.st_mode) ? "symbolic link" : S_ISDIR(st.st_mode) ? "directory" : "device or pipe");
    size_t n = strlen(path);
    char *dir = malloc(n + 2);
    if (!dir) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    int ok = access(dir, W_OK | X_OK) == 0;
    int e = errno;
    og_status rs = ok ? OG_OK : og_fail(err, errlen, OG_ERR_IO, "%s: cannot write in %s: %s", path, dir, strerror(e));
    free(dir);
    return rs;
}

og_status og_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    og_status cs = og_check_writable(path, err, errlen);
    if (cs) return cs;
    struct stat old;
    mode_t mode = lstat(path, &old) == 0 ? (old.st_mode & 07777) : 0644;
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (!tmp) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        og_status st = og_fail(err, errlen, OG_ERR_IO, "%s: cannot create a file beside it: %s", path, strerror(errno));
        free(tmp);
        return st;
    }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w;
        left -= (size_t)w;
    }
    int e = left ? (errno ? errno : EIO) : 0;
    if (!e && fchmod(fd, mode)) e = errno;
    if (!e && fsync(fd)) e = errno;
    if (close(fd) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    if (e) {
        unlink(tmp);
        free(tmp);
        return og_fail(err, errlen, OG_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    free(tmp);
    return OG_OK;
}

size_t og_utf8_repair(const char *s, size_t n, char *out) {
    size_t k = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        /* the second byte's range depends on the first (no overlongs, surrogates, > U+10FFFF) */
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        size_t got = len ? 1 : 0;
        if (len > 1 && i + 1 < n && u[i + 1] >= lo && u[i + 1] <= hi) {
            got = 2;
            while (got < len && i + got < n && u[i + got] >= 0x80 && u[i + got] <= 0xBF) got++;
        }
        if (len && got == len) {
            memcpy(out + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += got ? got : 1;
        }
    }
    return k;
}

og_status og_buf_reserve(og_buf *b, size_t bytes) {
    if (bytes <= b->cap && b->p) return OG_OK;
    size_t cap = b->cap + b->cap / 2 > bytes ? b->cap + b->cap / 2 : bytes;
    cap = cap < 64 ? 64 : (cap + 63) & ~(size_t)63;
    free(b->p);
    b->p = NULL;
    b->cap = 0;
    if (bytes > SIZE_MAX / 4) return OG_ERR_NOMEM; /* no host has it; keeps the sum above from wrapping */
    b->p = aligned_alloc(64, cap);
    b->cap = b->p ? cap : 0;
    b->grows++;
    return b->p ? OG_OK : OG_ERR_NOMEM;
}

void og_buf_free(og_buf *b) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}
