#include "og_base.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                  \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                     \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                     \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                  \
    } while (0)

uint64_t og_siphash13(const uint64_t key[2], const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t v0 = 0x736f6d6570736575ULL ^ key[0], v1 = 0x646f72616e646f6dULL ^ key[1];
    uint64_t v2 = 0x6c7967656e657261ULL ^ key[0], v3 = 0x7465646279746573ULL ^ key[1];
    size_t whole = n & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m;
        memcpy(&m, p + i, 8);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t i = 0; i < (n & 7); i++) b |= (uint64_t)p[whole + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

void og_random_key(uint64_t key[2]) {
    if (getrandom(key, 16, GRND_NONBLOCK) == 16) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    key[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)key;
    key[1] = (uint64_t)ts.tv_sec * 0xbf58476d1ce4e5b9ULL ^ (uint64_t)(uintptr_t)&ts;
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (len == 2 && c < 0xc2) return 0;                       /* overlong */
    if (len == 3 && c == 0xe0 && s[1] < 0xa0) return 0;        /* overlong */
    if (len == 3 && c == 0xed && s[1] >= 0xa0) return 0;       /* surrogates */
    if (len == 4 && (c > 0xf4 || (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))) return 0;
    return len;
}

bool og_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_len(u + i, n - i);
        if (!len) return false;
        i += len;
    }
    return true;
}

const char *og_printable(const char *s, size_t n, char *out, size_t outlen) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    if (outlen == 0) return out;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_len(u + i, n - i);
        bool escape = len == 0 || (len == 1 && (u[i] < 0x20 || u[i] == 0x7f || u[i] == '\\'));
        size_t need = escape ? (u[i] == '\\' ? 2 : 4) : len;
        if (o + need + 4 > outlen) {
            if (outlen > 4) memcpy(out + (o < outlen - 4 ? o : outlen - 4), "...", 4);
            return out;
        }
        if (escape && u[i] == '\\') {
            out[o++] = '\\';
            out[o++] = '\\';
            i++;
        } else if (escape) {
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", u[i]);
            i++;
        } else {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        }
    }
    out[o] = '\0';
    return out;
}
