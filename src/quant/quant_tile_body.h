/* The tiled canonical products (og_quant.h og_gemm_fn), written once for a vector of
 * TV_N int32 lanes: quant_tile_avx512.c (16 lanes, VNNI), quant_tile_avxvnni.c (8
 * lanes, AVX-VNNI) and quant_tile_avx2.c (8 lanes, vpmaddubsw) define the tv_*
 * operations and include this file once. The k-quants and the 32-element Q8_0, Q4_0,
 * Q5_0 (below); the batched path of prefill and of grouped experts.
 *
 * A tile is 32 weight rows. Each of its blocks is unpacked once into the work
 * buffer (og_tile_block), by gathers of the same four bytes of TV_N rows' blocks:
 * the 256 quants as u8 with rows in the lanes (int32 j of w[k4] holds elements 4k4
 * .. 4k4 + 3 of row j), the chunk scales, the bsum factors, d and dmin. Then for
 * TV_MR activation rows at a time, every vpdpbusd takes one unpacked weight vector
 * and four activation bytes broadcast, so the inner loop is vpdpbusd and loads: no
 * horizontal sums. A 16-element chunk's sum is scaled as it closes (vpdpwssd with
 * the scale in the low word where the chunk sum fits int16, vpmulld where not:
 * Q5_K, Q6_K); the type's offset (Q3_K -4, Q6_K -32) or mins (Q2_K, Q4_K, Q5_K)
 * come from the activation's bsums by vpdpwssd. Without VNNI (plain AVX2) vpdpbusd
 * is vpmaddubsw + vpmaddwd (no int16 pair exceeds 2 x 63 x 128) and vpdpwssd is
 * vpmaddwd: the same exact integers. The block's I_b and S_b are exact integers, as
 * every tier's; then the canonical float steps (og_quant.h "Canonical numerics")
 * are done for the rows at once: v = (dx dy) (float)I, v = fma(-(dmin dy),
 * (float)S, v), lane b mod 32 += v, kept in the work buffer for OG_TILE_ACT
 * activation rows, and the butterfly at the end. So each (activation row, weight
 * row) result is og_type_traits.vec_dot_canonical's bits, whatever the tile, batch,
 * tier or thread. */

#define TV_PARTS (OG_TILE_ROWS / TV_N) /* vectors of rows in a tile */
#define TV_NP 2                        /* of those, per micro tile (the rest: further passes) */

static inline int32_t ld32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* How a chunk's sum meets its scale: vpdpwssd of the 16-element sum (it fits int16),
 * of each 8-element half (SCALE_DPWSSD8: Q5_K, 8 x 31 x 128 fits where 16 do not;
 * two single-uop vpdpwssd beat vpmulld's two uops and add), or vpmulld (Q6_K). */
typedef enum { SCALE_DPWSSD, SCALE_DPWSSD8, SCALE_MULLD } scale_mode;
typedef enum { BP_OFFSET, BP_MINS } bp_role; /* the bsum factors: into I (an offset) or S (mins) */

/* Where part p (rows TV_N p ..) of the tile block's fields lie: every field is an
 * int32 (or float) per row of the 32, in row order. */
#define W_AT(t, k4, p) ((int32_t *)(t)->w[k4] + TV_N * (p))
#define SC_AT(t, c, p) (&(t)->sc[c][0][0] + TV_N * (p))
#define BP_AT(t, q, p) (&(t)->bp[q][0][0] + TV_N * (p))
#define DX_AT(t, p) (&(t)->dx[0][0] + TV_N * (p))
#define DM_AT(t, p) (&(t)->dm[0][0] + TV_N * (p))

/* ---- unpacking straight into the lanes (gathers) ------------------------------
 * TV_N rows at a time (part p of the tile): vpgatherdd takes the same four bytes of
 * each row's block (rows w_stride bytes apart, so 15 w_stride must fit int32:
 * OG_GEMM_MAX_STRIDE), which is one step k4 of the rows-in-lanes layout for the
 * formats whose bytes hold consecutive elements; rows past the tile's end (live
 * clear) read nothing and are zero. No transposes: their shuffles compete with
 * vpdpbusd for port 5, where gathers mostly use the load ports. */
typedef void (*gather_fn)(const uint8_t *blk, tv_i idx, tv_m live, og_tile_block *t, int p);

/* Byte r of each lane of v (r < 4), zero-extended. */
static inline tv_i byte_of(tv_i v, int r) { return tv_and(tv_srli(v, 8 * r), tv_set1(0xff)); }
/* Byte r of each lane of v, sign-extended. */
static inline tv_i sbyte_of(tv_i v, int r) { return tv_srai(tv_slli(v, 24 - 8 * r), 24); }
/* The int16 pair (lo, hi) of two int32 lanes (each within int16). */
static inline tv_i pair16v(tv_i lo, tv_i hi) { return tv_or(tv_and(lo, tv_set1(0xffff)), tv_slli(hi, 16)); }

/* Q2_K: element 128g + 32j + 4k + i (k < 8) is qs[32g + 4k + i] >> 2j & 3; scales[c]:
 * the chunk's scale in the low nibble, its min in the high one. */
static void gather_q2_K(const uint8_t *blk, tv_i idx, tv_m live, og_tile_block *t, int p) {
    const tv_i dd = tv_gather(blk, idx, live, 80), m4 = tv_set1(0x0f0f0f0f), m2 = tv_set1(0x03030303);
    tv_storef(DX_AT(t, p), tv_half(dd, false));
    tv_storef(DM_AT(t, p), tv_half(dd, true));
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) { /* scales 4q .. 4q + 3 */
        const tv_i v = tv_gather(blk, idx, live, 4 * q), lo = tv_and(v, m4), hi = tv_and(tv_srli(v, 4), m4);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) tv_store(SC_AT(t, 4 * q + r, p), byte_of(lo, r));
        tv_store(BP_AT(t, 2 * q, p), pair16v(byte_of(hi, 0), byte_of(hi, 1)));
        tv_store(BP_AT(t, 2 * q + 1, p), pair16v(byte_of(hi, 2), byte_of(hi, 3)));
    }
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const tv_i v = tv_gather(blk, idx, live, 16 + 32 * g + 4 * k);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) tv_store(W_AT(t, 32 * g + 8 * j + k, p), tv_and(tv_srli(v, 2 * j), m2));
        }
}

/* Q3_K: u = q2 + 4 (bit 4g + j of hmask[4k + i]) for element 128g + 32j + 4k + i, in
 * [0, 7] (q = u - 4: the offset is the bsum term); the 16 scales minus 32 from the
 * 12 bytes as og_q3_scales reads them. */
static void gather_q3_K(const uint8_t *blk, tv_i idx, tv_m live, og_tile_block *t, int p) {
    tv_storef(DX_AT(t, p), tv_half(tv_gather(blk, idx, live, 106), true)); /* d at 108: the word ending the block */
    tv_storef(DM_AT(t, p), tv_zerof());
    const tv_i a = tv_gather(blk, idx, live, 96), b = tv_gather(blk, idx, live, 100), c = tv_gather(blk, idx, live, 104);
    const tv_i m4 = tv_set1(0x0f0f0f0f), m2 = tv_set1(0x03030303), m1 = tv_set1(0x01010101);
    const tv_i v[4] = {/* bytes: scales 4q .. 4q + 3, plus 32 */
                       tv_or(tv_and(a, m4), tv_slli(tv_and(c, m2), 4)),
                       tv_or(tv_and(b, m4), tv_slli(tv_and(tv_srli(c, 2), m2), 4)),
                       tv_or(tv_and(tv_srli(a, 4), m4), tv_slli(tv_and(tv_srli(c, 4), m2), 4)),
                       tv_or(tv_and(tv_srli(b, 4), m4), tv_slli(tv_and(tv_srli(c, 6), m2), 4))};
    const tv_i k32 = tv_set1(32), k4 = tv_set1(-4);
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        tv_i sv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            sv[r] = tv_sub(byte_of(v[q], r), k32);
            tv_store(SC_AT(t, 4 * q + r, p), tv_and(sv[r], tv_set1(0xffff)));
        }
        tv_store(BP_AT(t, 2 * q, p), pair16v(tv_mullo(sv[0], k4), tv_mullo(sv[1], k4)));
        tv_store(BP_AT(t, 2 * q + 1, p), pair16v(tv_mullo(sv[2], k4), tv_mullo(sv[3], k4)));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const tv_i hm = tv_gather(blk, idx, live, 4 * k);
#pragma GCC unroll 2
        for (int g = 0; g < 2; g++) {
            const tv_i qv = tv_gather(blk, idx, live, 32 + 32 * g + 4 * k);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const tv_i q2 = tv_and(tv_srli(qv, 2 * j), m2);
                const tv_i hb = tv_slli(tv_and(tv_srli(hm, 4 * g + j), m1), 2);
                tv_store(W_AT(t, 32 * g + 8 * j + k, p), tv_or(q2, hb));
            }
        }
    }
}

/* Q4_K and Q5_K's d, dmin, six-bit scales and mins (the 12 bytes at 4, as k4_unpack
 * reads them): chunks 2u, 2u + 1 take scale u, bsums 2u, 2u + 1 min u. */
static inline void gather_k45_scales(const uint8_t *blk, tv_i idx, tv_m live, og_tile_block *t, int p) {
    const tv_i dd = tv_gather(blk, idx, live, 0), a = tv_gather(blk, idx, live, 4);
    const tv_i b = tv_gather(blk, idx, live, 8), c = tv_gather(blk, idx, live, 12);
    tv_storef(DX_AT(t, p), tv_half(dd, false));
    tv_storef(DM_AT(t, p), tv_half(dd, true));
    const tv_i m6 = tv_set1(0x3f3f3f3f), m4 = tv_set1(0x0f0f0f0f), m2 = tv_set1(0x30303030);
    const tv_i s_lo = tv_and(a, m6), m_lo = tv_and(b, m6);
    const tv_i s_hi = tv_or(tv_and(c, m4), tv_and(tv_srli(a, 2), m2));
    const tv_i m_hi = tv_or(tv_and(tv_srli(c, 4), m4), tv_and(tv_srli(b, 2), m2));
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
        const tv_i sv = byte_of(u < 4 ? s_lo : s_hi, u & 3), mv = byte_of(u < 4 ? m_lo : m_hi, u & 3);
        tv_store(SC_AT(t, 2 * u, p), sv); /* a positive int16 in the low word is also the int32 */
        tv_store(SC_AT(t, 2 * u + 1, p), sv);
        tv_store(BP_AT(t, u, p), pair16v(mv, mv));
    }
}

/* Q4_K and Q5_K: element 64q + 4k + i (k < 8) is the low nibble of qs[32q + 4k + i],
 * element 64q + 32 + 4k + i its high nibble; Q5_K's fifth bits: bit 2q (low) and
 * 2q + 1 (high) of qh[4k + i]. */
static inline void gather_k45(const uint8_t *blk, tv_i idx, tv_m live, og_tile_block *t, int p, int qs_off, int qh_off) {
    gather_k45_scales(blk, idx, live, t, p);
    const tv_i m4 = tv_set1(0x0f0f0f0f), m1 = tv_set1(0x01010101);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const tv_i hv = qh_off >= 0 ? tv_gather(blk, idx, live, qh_off + 4 * k) : tv_zero();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const tv_i v = tv_gather(blk, idx, live, qs_off + 32 * q + 4 * k);
            tv_i lo = tv_and(v, m4), hi = tv_and(tv_srli(v, 4), m4);
            if (qh_off >= 0) {
                lo = tv_or(lo, tv_slli(tv_and(tv_srli(hv, 2 * q), m1), 4));
                hi = tv_or(hi, tv_slli(tv_and(tv_srli(hv, 2 * q + 1), m1), 4));
            }
            tv_store(W_AT(t, 16 * q + k, p), lo);
            tv_store(W_AT(t, 16 * q + 8 + k, p), hi);
        }
    }
}
static void gather_q4_K(const uint8_t *blk, tv_i idx, tv_m live, og_tile_block *t, int p) {
    gather_k45(blk, idx, live, t, p, 16, -1);
}
static void gather_q5_K(const uint8_t *blk, tv_i idx, tv_m live, og_tile_block *t, int p) {
    gather_k45(blk, idx, live, t, p, 48, 16);
}

/* Q6_K: u = low 4 bits | high 2 bits << 4 in [0, 63] (q = u - 32) for element 128g +
 * 32j + 4k + i: ql[64g + 32 (j & 1) + 4k + i] >> 4 (j >> 1), qh[32g + 4k + i] >> 2j;
 * the scales int8. */
static void gather_q6_K(const uint8_t *blk, tv_i idx, tv_m live, og_tile_block *t, int p) {
    tv_storef(DX_AT(t, p), tv_half(tv_gather(blk, idx, live, 206), true)); /* d at 208: the word ending the block */
    tv_storef(DM_AT(t, p), tv_zerof());
    const tv_i k32 = tv_set1(-32), m4 = tv_set1(0x0f0f0f0f), m2 = tv_set1(0x03030303);
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const tv_i v = tv_gather(blk, idx, live, 192 + 4 * q);
        tv_i sv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) tv_store(SC_AT(t, 4 * q + r, p), sv[r] = sbyte_of(v, r));
        tv_store(BP_AT(t, 2 * q, p), pair16v(tv_mullo(sv[0], k32), tv_mullo(sv[1], k32)));
        tv_store(BP_AT(t, 2 * q + 1, p), pair16v(tv_mullo(sv[2], k32), tv_mullo(sv[3], k32)));
    }
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const tv_i hq = tv_gather(blk, idx, live, 128 + 32 * g + 4 * k);
            const tv_i l0 = tv_gather(blk, idx, live, 64 * g + 4 * k), l1 = tv_gather(blk, idx, live, 64 * g + 32 + 4 * k);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const tv_i lo = tv_and(tv_srli(j & 1 ? l1 : l0, 4 * (j >> 1)), m4);
                const tv_i hi = tv_slli(tv_and(tv_srli(hq, 2 * j), m2), 4);
                tv_store(W_AT(t, 32 * g + 8 * j + k, p), tv_or(lo, hi));
            }
        }
}

/* The offsets of TV_N rows w_stride bytes apart. */
static inline tv_i row_offsets(size_t w_stride) { return tv_mullo(tv_iota(), tv_set1((int)w_stride)); }

/* One tile block (the block at blk of row 0, and of the next rows w_stride bytes on)
 * of the tile's nrt rows into t by gathers, TV_N rows at a time. */
static inline void gather_tile_block(gather_fn gather, const uint8_t *blk, size_t w_stride, int nrt, og_tile_block *t) {
    const tv_i idx = row_offsets(w_stride);
    for (int p = 0; p < TV_PARTS; p++) /* a part past the tile's rows reads nothing (and points at row 0: no pointer past the rows) */
        gather(nrt > TV_N * p ? blk + (size_t)(TV_N * p) * w_stride : blk, idx, tv_live(nrt - TV_N * p), t, p);
}

/* ---- the integer steps and the canonical float steps --------------------------- */

/* The step of the 32-element formats' s8 quants w: with VNNI vpdpbusd of the
 * activations biased to u8, without it tv_dp_s8s8 of the s8 ones. */
#if TV_VNNI
#define DP_S8(acc, w, a) tv_dpbusd(acc, a, w)
#else
#define DP_S8(acc, w, a) tv_dp_s8s8(acc, w, a)
#endif

/* P[i][h] = init[h] (or 0) + the vpdpbusd sums of the k4 steps k0 .. k0 + steps - 1
 * of activation row i (bytes a[i] + 4 k4, broadcast) against parts p0 + h of the
 * tile block: u8 quants against s8 activations (s8q false) or s8 quants (true, DP_S8). */
static inline __attribute__((always_inline)) void dp_steps(int mr, bool s8q, const og_tile_block *t, int p0, int k0,
                                                            int steps, const uint8_t *const *a, const int32_t *init0,
                                                            const int32_t *init1, tv_i P[TV_MR][TV_NP]) {
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) { /* from zero, or from init (a correction each sum takes anyway) */
        P[i][0] = init0 ? tv_load(init0) : tv_zero();
        P[i][1] = init1 ? tv_load(init1) : tv_zero();
    }
#pragma GCC unroll 8
    for (int k = 0; k < steps; k++) {
        const int k4 = k0 + k;
        const tv_i w0 = tv_load(W_AT(t, k4, p0)), w1 = tv_load(W_AT(t, k4, p0 + 1));
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const tv_i av = tv_set1(ld32(a[i] + 4 * k4));
            P[i][0] = s8q ? DP_S8(P[i][0], w0, av) : tv_dpbusd(P[i][0], w0, av);
            P[i][1] = s8q ? DP_S8(P[i][1], w1, av) : tv_dpbusd(P[i][1], w1, av);
        }
    }
}

/* The canonical lanes: act row i, part p, lane l (of the `used` ones: us = used TV_N
 * floats per row and part) hold TV_N floats. Packed by `used`, not 32: with a short
 * row (K = 2048: 8 lanes) 32-lane rows put the 16 activation rows' lanes 4 KiB
 * apart, in the same few L1 sets, and evicted each other before finish_lanes. */
#define LANE_AT(lanes, us, i, p, l) ((lanes) + (size_t)(us) * (TV_PARTS * (i) + (p)) + TV_N * (l))

/* mr (<= TV_MR) activation rows y[i] (their block b) against parts p0, p0 + 1 of the
 * tile's block t: the canonical term of each pair joins lane b % 32 of its lanes. */
static inline __attribute__((always_inline)) void tile_mr(int mr, scale_mode sm, bp_role role, const og_tile_block *t,
                                                           int p0, const og_block_q8_K *const *y, float *lanes, int us,
                                                           int64_t b) {
    tv_i I[TV_MR][TV_NP], P[TV_MR][TV_NP];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) I[i][0] = I[i][1] = tv_zero();
    const uint8_t *a[TV_MR];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) a[i] = (const uint8_t *)y[i]->qs;
    const int span = sm == SCALE_DPWSSD8 ? 2 : 4; /* k4 steps per scaled sum */
    for (int c = 0; c < 16; c++) {
        const tv_i s0 = tv_load(SC_AT(t, c, p0)), s1 = tv_load(SC_AT(t, c, p0 + 1));
#pragma GCC unroll 2
        for (int k0 = 4 * c; k0 < 4 * c + 4; k0 += span) {
            dp_steps(mr, false, t, p0, k0, span, a, NULL, NULL, P);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                if (sm != SCALE_MULLD) { /* the sum fits int16: times the low word's scale */
                    I[i][0] = tv_dpwssd(I[i][0], P[i][0], s0);
                    I[i][1] = tv_dpwssd(I[i][1], P[i][1], s1);
                } else {
                    I[i][0] = tv_add(I[i][0], tv_mullo(P[i][0], s0));
                    I[i][1] = tv_add(I[i][1], tv_mullo(P[i][1], s1));
                }
            }
        }
    }
    if (role == BP_MINS) /* P is free again: now S */
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) P[i][0] = P[i][1] = tv_zero();
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        const tv_i f0 = tv_load(BP_AT(t, q, p0)), f1 = tv_load(BP_AT(t, q, p0 + 1));
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const tv_i bs = tv_set1(ld32(&y[i]->bsums[2 * q]));
            if (role == BP_OFFSET) {
                I[i][0] = tv_dpwssd(I[i][0], f0, bs);
                I[i][1] = tv_dpwssd(I[i][1], f1, bs);
            } else {
                P[i][0] = tv_dpwssd(P[i][0], f0, bs);
                P[i][1] = tv_dpwssd(P[i][1], f1, bs);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        const tv_f dy = tv_set1f(y[i]->d);
#pragma GCC unroll 2
        for (int h = 0; h < TV_NP; h++) {
            tv_f v = tv_mulf(tv_mulf(tv_loadf(DX_AT(t, p0 + h)), dy), tv_cvtf(I[i][h]));
            if (role == BP_MINS) v = tv_fnmaddf(tv_mulf(tv_loadf(DM_AT(t, p0 + h)), dy), tv_cvtf(P[i][h]), v);
            float *l = LANE_AT(lanes, us, i, p0 + h, b & 31);
            tv_storef(l, tv_addf(b < 32 ? tv_zerof() : tv_loadf(l), v)); /* a lane's first term: +0 + v */
        }
    }
}

/* The butterfly of og_warp_reduce32 over the first cnt (1 .. 16) lanes at l (TV_N
 * floats apart), the others +0. A step whose partner lane is +0 leaves x + 0 (a -0
 * turned +0), and (x + 0) + 0 = x + 0, so the steps with no live partner at all
 * count once. Inlined with a constant cnt, the lanes stay in registers. */
static inline __attribute__((always_inline)) tv_f short_lanes(const float *l, const int cnt0) {
    tv_f v[16];
    int cnt = cnt0, o = 16;
#pragma GCC unroll 16
    for (int j = 0; j < cnt; j++) v[j] = tv_addf(tv_loadf(l + TV_N * j), tv_zerof());
    while (o >= cnt && o > 1) o >>= 1;
#pragma GCC unroll 5
    for (; o && o < cnt; o >>= 1) {
#pragma GCC unroll 16
        for (int j = 0; j < o; j++) v[j] = tv_addf(v[j], j + o < cnt ? v[j + o] : tv_zerof());
        cnt = o;
    }
    return v[0];
}

/* The butterfly of og_warp_reduce32 over the lanes of ma activation rows (lanes from
 * `used` on are +0, never stored), and the results of the tile's nrt rows into
 * out[i * ld + r]. */
static void finish_lanes(const float *lanes, int ma, int used, int nrt, float *out, size_t ld) {
    const int us = used * TV_N;
    for (int i = 0; i < ma; i++)
        for (int p = 0; p < TV_PARTS; p++) {
            const int valid = nrt - TV_N * p;
            if (valid <= 0) continue;
            tv_f v[16];
            if (used > 16) { /* in registers; lanes from `used` on are +0 and added as such */
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++)
                    v[j] = tv_addf(tv_loadf(LANE_AT(lanes, us, i, p, j)), j + 16 < used ? tv_loadf(LANE_AT(lanes, us, i, p, j + 16)) : tv_zerof());
#pragma GCC unroll 16
                for (int o = 8; o; o >>= 1)
#pragma GCC unroll 16
                    for (int j = 0; j < o; j++) v[j] = tv_addf(v[j], v[j + o]);
            } else { /* short rows: only the live lanes (short_lanes), in registers for each count */
                const float *l = LANE_AT(lanes, us, i, p, 0);
                switch (used) {
#define SHORT_CASE(c) \
    case c: v[0] = short_lanes(l, c); break;
                    SHORT_CASE(1) SHORT_CASE(2) SHORT_CASE(3) SHORT_CASE(4) SHORT_CASE(5) SHORT_CASE(6) SHORT_CASE(7)
                    SHORT_CASE(8) SHORT_CASE(9) SHORT_CASE(10) SHORT_CASE(11) SHORT_CASE(12) SHORT_CASE(13)
                    SHORT_CASE(14) SHORT_CASE(15)
                    default: v[0] = short_lanes(l, 16); break;
#undef SHORT_CASE
                }
            }
            tv_storef_first(out + (size_t)i * ld + TV_N * p, valid, v[0]);
        }
}

/* The tiled product of one type (og_gemm_fn), its unpacking and its integer steps. */
static inline __attribute__((always_inline)) void gemm_k(gather_fn gather, size_t bsize, scale_mode sm, bp_role role,
                                                          int64_t n, const void *vw, size_t w_stride, int64_t nr,
                                                          const void *vy, size_t y_stride, int64_t m, float *out, size_t ld,
                                                          void *work) {
    const int64_t nb = n / OG_QK_K;
    uint8_t *base = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    og_tile_block *tb = (og_tile_block *)base;
    float *lanes = (float *)(base + (size_t)nb * sizeof(og_tile_block)); /* [OG_TILE_ACT][32 rows][used lanes] */
    const int used = nb < 32 ? (int)nb : 32; /* lanes from `used` on stay +0: never stored or read */
    const int us = used * TV_N;
    for (int64_t r0 = 0; r0 < nr; r0 += OG_TILE_ROWS) {
        const int nrt = nr - r0 < OG_TILE_ROWS ? (int)(nr - r0) : OG_TILE_ROWS;
        const uint8_t *w = (const uint8_t *)vw + (size_t)r0 * w_stride;
        for (int64_t b = 0; b < nb; b++) gather_tile_block(gather, w + (size_t)b * bsize, w_stride, nrt, &tb[b]);
        for (int64_t a0 = 0; a0 < m; a0 += OG_TILE_ACT) {
            const int ma = m - a0 < OG_TILE_ACT ? (int)(m - a0) : OG_TILE_ACT;
            for (int p0 = 0; p0 < TV_PARTS && TV_N * p0 < nrt; p0 += TV_NP)
                for (int64_t b = 0; b < nb; b++)
                    for (int g = 0; g < ma; g += TV_MR) {
                        const int mr = ma - g < TV_MR ? ma - g : TV_MR;
                        const og_block_q8_K *y[TV_MR];
                        for (int i = 0; i < mr; i++)
                            y[i] = (const og_block_q8_K *)((const uint8_t *)vy + (size_t)(a0 + g + i) * y_stride) + b;
                        float *l = LANE_AT(lanes, us, g, 0, 0);
                        switch (mr) {
#if TV_MR >= 4
                        case 4: tile_mr(4, sm, role, &tb[b], p0, y, l, us, b); break;
                        case 3: tile_mr(3, sm, role, &tb[b], p0, y, l, us, b); break;
#endif
                        case 2: tile_mr(2, sm, role, &tb[b], p0, y, l, us, b); break;
                        default: tile_mr(1, sm, role, &tb[b], p0, y, l, us, b); break;
                        }
                    }
            finish_lanes(lanes, ma, used, nrt, out + (size_t)a0 * ld + r0, ld);
        }
    }
}

#define GEMM(name, T, gather, sm, role)                                                                                \
    static void name##_gemm(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *y, size_t y_stride,    \
                            int64_t m, float *out, size_t ld, void *work) {                                            \
        gemm_k(gather, sizeof(T), sm, role, n, w, w_stride, nr, y, y_stride, m, out, ld, work);                       \
    }
/* chunk sums: Q2_K 16 x 3 x 128, Q3_K 16 x 7 x 128, Q4_K 16 x 15 x 128 fit int16;
 * Q5_K's (31) halves do, Q6_K's (63) do not. TV_Q5_K_SCALE: the tier's faster of
 * SCALE_DPWSSD8 and SCALE_MULLD (bench/RESULTS.md) */
GEMM(q2_K, og_block_q2_K, gather_q2_K, SCALE_DPWSSD, BP_MINS)
GEMM(q3_K, og_block_q3_K, gather_q3_K, SCALE_DPWSSD, BP_OFFSET)
GEMM(q4_K, og_block_q4_K, gather_q4_K, SCALE_DPWSSD, BP_MINS)
GEMM(q5_K, og_block_q5_K, gather_q5_K, TV_Q5_K_SCALE, BP_MINS)
GEMM(q6_K, og_block_q6_K, gather_q6_K, SCALE_MULLD, BP_OFFSET)
#undef GEMM

/* ---- the 32-element formats (Q8_0, Q4_0, Q5_0: Q8_0 activations, no bsums) ------
 * A tile block holds eight of their blocks (256 elements, the same w layout), the
 * quants as s8 (q itself: Q4_0 nibble - 8, Q5_0 nibble + 16 fifth bit - 16), and
 * in sc[0..8) the correction -128 sum(q) of each block, in sc[8..16) its d (float
 * bits). With VNNI the activations are the u8 operand, biased by 128 (a copy per
 * micro tile and tile block), so sum (a + 128) q - 128 sum q = I, exact; without,
 * vpmaddubsw takes |q| and a with q's sign (|a| <= 127, og_vec_dot_fn), whose int16
 * pairs stay within 2 x 128 x 127, and no correction. */

/* gather32_fn: block k (< 8, steps 8k .. 8k + 7) of the TV_N rows at blk (rows idx
 * apart): its d in the low word of *dd, its eight quant words as s8 into w[0..8). */
typedef void (*gather32_fn)(const uint8_t *blk, tv_i idx, tv_m live, tv_i *dd, tv_i w[8]);

static void gather32_q8_0(const uint8_t *blk, tv_i idx, tv_m live, tv_i *dd, tv_i w[8]) {
    *dd = tv_gather(blk, idx, live, 0);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) w[i] = tv_gather(blk, idx, live, 2 + 4 * i);
}
/* Q4_0: element 4i + l (i < 4) the low nibble of qs[4i + l], element 16 + 4i + l its
 * high nibble, less 8. */
static void gather32_q4_0(const uint8_t *blk, tv_i idx, tv_m live, tv_i *dd, tv_i w[8]) {
    const tv_i m4 = tv_set1_8(0x0F), k8 = tv_set1_8(8);
    *dd = tv_gather(blk, idx, live, 0);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const tv_i v = tv_gather(blk, idx, live, 2 + 4 * i);
        w[i] = tv_sub8(tv_and(v, m4), k8);
        w[4 + i] = tv_sub8(tv_and(tv_srli(v, 4), m4), k8);
    }
}
/* Q5_0: Q4_0's nibbles plus 16 times bit e of qh for element e, less 16: the bits of
 * step g (elements 4g .. 4g + 3) are bits 4 (g % 2) .. + 3 of qh byte g / 2. */
static void gather32_q5_0(const uint8_t *blk, tv_i idx, tv_m live, tv_i *dd, tv_i w[8]) {
    const tv_i m4 = tv_set1_8(0x0F), k16 = tv_set1_8(16);
    const tv_i qh = tv_gather(blk, idx, live, 2);
    *dd = tv_gather(blk, idx, live, 0);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const tv_i v = tv_gather(blk, idx, live, 6 + 4 * i);
        w[i] = tv_and(v, m4);
        w[4 + i] = tv_and(tv_srli(v, 4), m4);
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        /* qh byte g / 2 of each row in all four bytes of its lane (vpshufb stays in 128-bit lanes) */
        const tv_i hb = tv_shuf8(qh, tv_add8(tv_set4(0x0C0C0C0C, 0x08080808, 0x04040404, 0), tv_set1_8((char)(g / 2))));
        const tv_i bit = tv_set1((int)(0x08040201u << (4 * (g % 2)))); /* byte l: bit 4 (g % 2) + l */
        w[g] = tv_sub8(tv_add8(w[g], tv_bits16(hb, bit)), k16);
    }
}

/* Tile block b (blocks 8b .. 8b + nbk - 1 of each row) of the tile's nrt rows: the
 * quants, in sc[k] the correction -128 sum(q) of block k, in sc[8 + k] its d (float
 * bits); blocks past nbk are zero. */
static void gather32_tile_block(gather32_fn gather, size_t bsize, const uint8_t *w, size_t w_stride, int nrt, int64_t b,
                                int nbk, og_tile_block *t) {
    const tv_i idx = row_offsets(w_stride);
    for (int p = 0; p < TV_PARTS; p++) {
        const tv_m live = tv_live(nrt - TV_N * p);
        const uint8_t *rows = w + (size_t)(nrt > TV_N * p ? TV_N * p : 0) * w_stride + (size_t)(8 * b) * bsize;
        for (int k = 0; k < 8; k++) {
            tv_i dd = tv_zero(), q[8];
            for (int i = 0; i < 8; i++) q[i] = tv_zero();
            if (k < nbk) gather(rows + (size_t)k * bsize, idx, live, &dd, q);
            tv_i sum = tv_zero();
            for (int i = 0; i < 8; i++) {
                tv_store(W_AT(t, 8 * k + i, p), q[i]);
                sum = tv_add(sum, tv_sum4_s8(q[i]));
            }
            tv_store(SC_AT(t, k, p), tv_sub(tv_zero(), tv_slli(sum, 7)));
            tv_storef((float *)SC_AT(t, 8 + k, p), tv_half(dd, false));
        }
    }
}

/* mr activation rows (quants ab[i][256], biased where VNNI; dyf[i][k]: the d of
 * their block k, k < nbk) against parts p0, p0 + 1 of the tile block t: each of its
 * nbk blocks' terms join lane (8b + k) % 32. */
static inline __attribute__((always_inline)) void tile32_mr(int mr, const og_tile_block *t, int p0, const uint8_t *ab,
                                                             const float (*dyf)[8], int nbk, float *lanes, int us,
                                                             int64_t b) {
    const uint8_t *a[TV_MR];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) a[i] = ab + 256 * i;
    for (int k = 0; k < nbk; k++) {
        tv_i P[TV_MR][TV_NP];
        if (TV_VNNI) /* from -128 sum(q): I itself */
            dp_steps(mr, true, t, p0, 8 * k, 8, a, SC_AT(t, k, p0), SC_AT(t, k, p0 + 1), P);
        else
            dp_steps(mr, true, t, p0, 8 * k, 8, a, NULL, NULL, P);
        const int lane = (int)((8 * b + k) & 31);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const tv_f dy = tv_set1f(dyf[i][k]); /* a broadcast load: no shuffle */
#pragma GCC unroll 2
            for (int h = 0; h < TV_NP; h++) {
                const tv_f v = tv_mulf(tv_mulf(tv_loadf((const float *)SC_AT(t, 8 + k, p0 + h)), dy), tv_cvtf(P[i][h]));
                float *l = LANE_AT(lanes, us, i, p0 + h, lane);
                tv_storef(l, tv_addf(8 * b + k < 32 ? tv_zerof() : tv_loadf(l), v)); /* a lane's first term: +0 + v */
            }
        }
    }
}

/* og_gemm_fn of the 32-element formats: gemm_k's loops over tile blocks of eight. */
static inline __attribute__((always_inline)) void gemm32(gather32_fn gather, size_t bsize, int64_t n, const void *vw,
                                                          size_t w_stride, int64_t nr, const void *vy, size_t y_stride,
                                                          int64_t m, float *out, size_t ld, void *work) {
    const int64_t nb = n / 32, ntb = (nb + 7) / 8;
    uint8_t *base = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    og_tile_block *tb = (og_tile_block *)base;
    float *lanes = (float *)(base + (size_t)ntb * sizeof(og_tile_block));
    uint8_t ab[TV_MR * 256] __attribute__((aligned(64)));
    float dyf[TV_MR][8];
    const int used = nb < 32 ? (int)nb : 32, us = used * TV_N;
    const __m256i bias = _mm256_set1_epi8(TV_VNNI ? (char)0x80 : 0);
    for (int64_t r0 = 0; r0 < nr; r0 += OG_TILE_ROWS) {
        const int nrt = nr - r0 < OG_TILE_ROWS ? (int)(nr - r0) : OG_TILE_ROWS;
        const uint8_t *w = (const uint8_t *)vw + (size_t)r0 * w_stride;
        for (int64_t b = 0; b < ntb; b++)
            gather32_tile_block(gather, bsize, w, w_stride, nrt, b, nb - 8 * b < 8 ? (int)(nb - 8 * b) : 8, &tb[b]);
        for (int64_t a0 = 0; a0 < m; a0 += OG_TILE_ACT) {
            const int ma = m - a0 < OG_TILE_ACT ? (int)(m - a0) : OG_TILE_ACT;
            for (int64_t b = 0; b < ntb; b++) {
                const int nbk = nb - 8 * b < 8 ? (int)(nb - 8 * b) : 8;
                for (int g = 0; g < ma; g += TV_MR) {
                    const int mr = ma - g < TV_MR ? ma - g : TV_MR;
                    for (int i = 0; i < mr; i++) {
                        const og_block_q8_0 *y = (const og_block_q8_0 *)((const uint8_t *)vy + (size_t)(a0 + g + i) * y_stride) + 8 * b;
                        for (int k = 0; k < nbk; k++) {
                            _mm256_store_si256((__m256i *)(ab + 256 * i + 32 * k),
                                               _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)y[k].qs), bias));
                            dyf[i][k] = _cvtsh_ss(y[k].d);
                        }
                    }
                    float *l = LANE_AT(lanes, us, g, 0, 0);
                    for (int p0 = 0; p0 < TV_PARTS && TV_N * p0 < nrt; p0 += TV_NP) switch (mr) {
#if TV_MR >= 4
                        case 4: tile32_mr(4, &tb[b], p0, ab, dyf, nbk, l, us, b); break;
                        case 3: tile32_mr(3, &tb[b], p0, ab, dyf, nbk, l, us, b); break;
#endif
                        case 2: tile32_mr(2, &tb[b], p0, ab, dyf, nbk, l, us, b); break;
                        default: tile32_mr(1, &tb[b], p0, ab, dyf, nbk, l, us, b); break;
                        }
                }
            }
            finish_lanes(lanes, ma, used, nrt, out + (size_t)a0 * ld + r0, ld);
        }
    }
}

#define GEMM32(name, T)                                                                                              \
    static void name##_gemm(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *y, size_t y_stride,  \
                            int64_t m, float *out, size_t ld, void *work) {                                          \
        gemm32(gather32_##name, sizeof(T), n, w, w_stride, nr, y, y_stride, m, out, ld, work);                      \
    }
GEMM32(q8_0, og_block_q8_0)
GEMM32(q4_0, og_block_q4_0)
GEMM32(q5_0, og_block_q5_0)
#undef GEMM32

/* The tiled entries of this tier's og_kernels. */
static void fill_tile(og_kernels *k) {
    k->gemm_canonical[OG_TYPE_Q8_0] = q8_0_gemm;
    k->gemm_canonical[OG_TYPE_Q4_0] = q4_0_gemm;
    k->gemm_canonical[OG_TYPE_Q5_0] = q5_0_gemm;
    k->gemm_canonical[OG_TYPE_Q2_K] = q2_K_gemm;
    k->gemm_canonical[OG_TYPE_Q3_K] = q3_K_gemm;
    k->gemm_canonical[OG_TYPE_Q4_K] = q4_K_gemm;
    k->gemm_canonical[OG_TYPE_Q5_K] = q5_K_gemm;
    k->gemm_canonical[OG_TYPE_Q6_K] = q6_K_gemm;
}
