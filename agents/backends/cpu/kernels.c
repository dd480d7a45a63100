/* One-token decoding attention over bfloat16 keys and values on CPU (agents/backends/cpu_kernels.py).
 *
 * Per (row, key head): the query heads of its group score every visible position (the shared
 * prefix's, then the row's own unmasked ones, packed in that order), a float32 softmax, and the
 * weighted sum of the values, rounded once to bfloat16. Masked positions are skipped, never
 * read, and the sums run over the packed visible positions: a row's result does not depend on
 * how much padding its buffer has, on the other rows, or on the thread count (each (row, key
 * head) is one thread's work).
 *
 * With AMX (tile_attention; prefill_attention_bf16 for prefill chunks): scores in the tile unit,
 * probabilities as two bfloat16 parts against the values in tile layout, the shared prefix
 * scored and weighted once per key head for all rows. The same invariances hold (see
 * tile_attention).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM 256 /* head sizes up to this */
#define PREFETCH 32 /* positions ahead that the weighted sum prefetches */

static inline float bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}

static inline uint16_t float_to_bf16(float f) {
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u); /* NaN */
    v.u += 0x7fffu + ((v.u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(v.u >> 16);
}

/* dot of two 64-byte aligned float vectors, d elements */
static inline float dot(const float *a, const float *b, int d) {
    a = __builtin_assume_aligned(a, 64);
    b = __builtin_assume_aligned(b, 64);
    float acc = 0.0f;
    for (int i = 0; i < d; i++) acc += a[i] * b[i];
    return acc;
}

/* out[i] += w * b[i] for a bfloat16 vector b */
static inline void axpy_bf16(float *out, float w, const uint16_t *b, int d) {
    for (int i = 0; i < d; i++) out[i] += w * bf16_to_float(b[i]);
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* r[i] = the sum of v[i]'s 16 lanes, for 16 vectors (a fixed tree: the same bits every time) */
static inline __m512 sum16(const __m512 *v) {
    __m512 w[8], x[4];
    for (int i = 0; i < 8; i++)
        w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d c = _mm512_castps_pd(w[2 * i]), d = _mm512_castps_pd(w[2 * i + 1]);
        x[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(c, d)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(c, d)));
    }
    __m512 z01 = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], 0x88),
                               _mm512_shuffle_f32x4(x[0], x[1], 0xDD));
    __m512 z23 = _mm512_add_ps(_mm512_shuffle_f32x4(x[2], x[3], 0x88),
                               _mm512_shuffle_f32x4(x[2], x[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(z01, z23, 0x88),
                         _mm512_shuffle_f32x4(z01, z23, 0xDD));
}

static inline __m512 load16_bf16(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 lanes of partial sums of q . k over 64 elements (their total is the score) */
static inline __m512 partial_dot_64(const uint16_t *q, const float *qf, const uint16_t *k) {
#if defined(__AVX512BF16__)
    (void)qf;
    __m512i k0 = _mm512_loadu_si512((const void *)k), k1 = _mm512_loadu_si512((const void *)(k + 32));
    __m512i q0 = _mm512_loadu_si512((const void *)q), q1 = _mm512_loadu_si512((const void *)(q + 32));
    __m512 acc = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)k0, (__m512bh)q0);
    return _mm512_dpbf16_ps(acc, (__m512bh)k1, (__m512bh)q1);
#else
    (void)q;
    __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qf), load16_bf16(k));
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(qf + 16), load16_bf16(k + 16), acc);
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(qf + 32), load16_bf16(k + 32), acc);
    return _mm512_fmadd_ps(_mm512_loadu_ps(qf + 48), load16_bf16(k + 48), acc);
#endif
}

static void score_rows_64(const uint16_t *q, const float *qf, const uint16_t *const *krows,
                          int n, int groups, float *scores, int stride, float scale) {
    __m512 parts[16];
    __m512 factor = _mm512_set1_ps(scale);
    for (int t0 = 0; t0 < n; t0 += 16) {
        int m = n - t0 < 16 ? n - t0 : 16;
        for (int i = 0; i < 16 && t0 + PREFETCH + i < n; i++) {
            _mm_prefetch((const char *)krows[t0 + PREFETCH + i], _MM_HINT_T0);
            _mm_prefetch((const char *)(krows[t0 + PREFETCH + i] + 32), _MM_HINT_T0);
        }
        for (int g = 0; g < groups; g++) {
            for (int i = 0; i < 16; i++)
                parts[i] = i < m ? partial_dot_64(q + g * 64, qf + g * 64, krows[t0 + i])
                                 : _mm512_setzero_ps();
            __m512 r = _mm512_mul_ps(sum16(parts), factor);
            _mm512_mask_storeu_ps(scores + (size_t)g * stride + t0, (__mmask16)((1u << m) - 1), r);
        }
    }
}

static void weigh_rows_64(float *acc, const uint16_t *const *vrows, int n, int groups,
                          const float *probs, int stride) {
    for (int g0 = 0; g0 < groups; g0 += 4) {
        int gc = groups - g0 < 4 ? groups - g0 : 4;
        __m512 a[4][4];
        for (int g = 0; g < 4; g++)
            for (int c = 0; c < 4; c++) a[g][c] = _mm512_setzero_ps();
        for (int t = 0; t < n; t++) {
            __m512 v[4];
            if (t + PREFETCH < n) { /* the hardware prefetcher alone left these loads waiting */
                _mm_prefetch((const char *)vrows[t + PREFETCH], _MM_HINT_T0);
                _mm_prefetch((const char *)(vrows[t + PREFETCH] + 32), _MM_HINT_T0);
            }
            for (int c = 0; c < 4; c++) v[c] = load16_bf16(vrows[t] + 16 * c);
            for (int g = 0; g < 4; g++) {
                if (g >= gc) break;
                __m512 w = _mm512_set1_ps(probs[(size_t)(g0 + g) * stride + t]);
                for (int c = 0; c < 4; c++) a[g][c] = _mm512_fmadd_ps(w, v[c], a[g][c]);
            }
        }
        for (int g = 0; g < gc; g++)
            for (int c = 0; c < 4; c++) _mm512_storeu_ps(acc + (g0 + g) * 64 + 16 * c, a[g][c]);
    }
}
#define HAVE_ROWS_64 1
#endif

/* s[0..n) := softmax(s[0..n)) in float32 (max, exp, one running sum, one scaling), s[n..pad)
 * := 0; no position: nothing */
static inline void softmax_row(float *s, int n, int pad) {
    float high = -3.4e38f;
    for (int t = 0; t < n; t++) high = s[t] > high ? s[t] : high;
    float sum = 0.0f;
    for (int t = 0; t < n; t++) {
        s[t] = expf(s[t] - high);
        sum += s[t];
    }
    float inv = n ? 1.0f / sum : 0.0f;
    for (int t = 0; t < n; t++) s[t] *= inv;
    for (int t = n; t < pad; t++) s[t] = 0.0f;
}

static void *aligned(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* this thread's scratch of at least `count` floats, kept between calls (the sampler's vocabulary's
 * worth, prefill's probabilities: allocating them every call cost fresh mappings and page faults) */
static float *thread_scratch(size_t count) {
    static __thread float *buffer = NULL;
    static __thread size_t capacity = 0;
    if (count > capacity) {
        free(buffer);
        buffer = aligned(sizeof(float) * count);
        capacity = buffer ? count : 0;
    }
    return buffer;
}

/* krows[0..n), vrows[0..n) := the prefix's rows, then the row's own visible ones (mask NULL: all
 * `length`), in order; returns n. One body for the bfloat16 and the float32 kernel. */
#define VISIBLE_ROWS(name, type)                                                                \
    static int name(const type *pk, const type *pv, int prefix, const type *k, const type *v, \
                    const uint8_t *mask, int length, int dim, const type **krows,            \
                    const type **vrows) {                                                    \
        int n = 0;                                                                           \
        for (int j = 0; j < prefix; j++, n++) {                                              \
            krows[n] = pk + (size_t)j * dim;                                                 \
            vrows[n] = pv + (size_t)j * dim;                                                 \
        }                                                                                    \
        for (int j = 0; j < length; j++) {                                                   \
            if (mask && !mask[j]) continue;                                                  \
            krows[n] = k + (size_t)j * dim;                                                  \
            vrows[n] = v + (size_t)j * dim;                                                  \
            n++;                                                                             \
        }                                                                                    \
        return n;                                                                            \
    }
VISIBLE_ROWS(visible_rows_bf16, uint16_t)
VISIBLE_ROWS(visible_rows_f32, float)

/* One item's scratch, allocated per call: the query in float32 and the weighted sums (`qf`,
 * `acc`: [groups][width] each), the scores ([groups][stride]) and the visible key and value
 * rows' addresses (`krows`, `vrows`: `total` pointers, typed by the caller). 0 on success;
 * on failure nothing is left allocated. */
typedef struct {
    float *qf, *acc, *scores;
    void *krows, *vrows;
    int stride, width;
} item_scratch;

static int item_scratch_alloc(item_scratch *s, int groups, int dim, int total) {
    s->stride = (total + 15) / 16 * 16;
    s->width = (dim + 15) / 16 * 16;
    s->qf = aligned(sizeof(float) * (size_t)groups * s->width * 2 + 64 * sizeof(float));
    s->scores = aligned(sizeof(float) * (size_t)groups * (s->stride > 0 ? s->stride : 16));
    s->krows = malloc(sizeof(void *) * (size_t)(total > 0 ? total : 1));
    s->vrows = malloc(sizeof(void *) * (size_t)(total > 0 ? total : 1));
    s->acc = s->qf ? s->qf + (size_t)groups * s->width : NULL;
    if (s->qf && s->scores && s->krows && s->vrows && dim <= MAX_DIM) return 0;
    free(s->qf); free(s->scores); free(s->krows); free(s->vrows);
    return 1;
}

static void item_scratch_free(item_scratch *s) {
    free(s->qf); free(s->scores); free(s->krows); free(s->vrows);
}

static int one_item(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                    const uint8_t *mask, const uint16_t *pk, const uint16_t *pv, int prefix,
                    uint16_t *out, int groups, int dim, int length, float scale) {
    /* q, out: [groups][dim]; k, v: [length][dim] (this row and key head); mask: [length] or
     * NULL; pk, pv: [prefix][dim] or NULL. Every float array starts 64-byte aligned and every
     * per-group row at a multiple of 16 floats, so the compiler's vectorised loops split their
     * work the same way whatever the addresses: the bits depend on the visible positions only. */
    item_scratch s;
    if (item_scratch_alloc(&s, groups, dim, prefix + length)) return 1;
    const int stride = s.stride, width = s.width;
    float *qf = s.qf, *scores = s.scores, *acc = s.acc;
    const uint16_t **krows = s.krows, **vrows = s.vrows;
    for (int g = 0; g < groups; g++)
        for (int i = 0; i < dim; i++) qf[g * width + i] = bf16_to_float(q[g * dim + i]);
    const int n = visible_rows_bf16(pk, pv, prefix, k, v, mask, length, dim, krows, vrows);
#ifdef HAVE_ROWS_64
    if (dim == 64)
        score_rows_64(q, qf, krows, n, groups, scores, stride, scale);
    else
#endif
        for (int t = 0; t < n; t++) {
            float kf[MAX_DIM] __attribute__((aligned(64)));
            for (int i = 0; i < dim; i++) kf[i] = bf16_to_float(krows[t][i]);
            for (int g = 0; g < groups; g++)
                scores[(size_t)g * stride + t] = dot(qf + g * width, kf, dim) * scale;
        }
    for (int g = 0; g < groups; g++) softmax_row(scores + (size_t)g * stride, n, n);
    memset(acc, 0, sizeof(float) * (size_t)groups * width);
#ifdef HAVE_ROWS_64
    if (dim == 64)
        weigh_rows_64(acc, vrows, n, groups, scores, stride);
    else
#endif
        for (int t = 0; t < n; t++)
            for (int g = 0; g < groups; g++)
                axpy_bf16(acc + g * width, scores[(size_t)g * stride + t], vrows[t], dim);
    for (int g = 0; g < groups; g++)
        for (int i = 0; i < dim; i++) out[g * dim + i] = float_to_bf16(acc[g * width + i]);
    item_scratch_free(&s);
    return 0;
}

#ifdef HAVE_ROWS_64
/* the calling thread's scratch of at least `bytes`, kept between calls (a layer's scores
 * for a batch are a few hundred KB: a fresh mapping every call cost page faults) */
static void *call_scratch(size_t bytes) {
    static __thread void *buffer = NULL;
    static __thread size_t capacity = 0;
    if (bytes > capacity) {
        free(buffer);
        buffer = aligned(bytes);
        capacity = buffer ? bytes : 0;
    }
    return buffer;
}

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define HAVE_TILES 1
#include <sys/syscall.h>
#include <unistd.h>

static int tiles_wanted = 1; /* set_tiles() */

/* AMX's tiles need the kernel's permission once per process (Linux 5.16+) */
static int tiles_allowed(void) {
    static int state = -1;
    if (state < 0) state = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
                                   18 /* XFEATURE_XTILEDATA */) == 0;
    return state && tiles_wanted;
}

/* this thread's tile configuration: every tile 16 rows of 64 bytes */
static void tiles_on(void) {
    struct { uint8_t palette, start, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.colsb[i] = 64, c.rows[i] = 16;
    _tile_loadconfig(&c);
}

/* c (16 x 16 floats, row i = position i's scores) transposed in place: row n = query n's */
static inline void transpose16(float *c) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_load_ps(c + 16 * i);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    for (int i = 0; i < 16; i++) _mm512_store_ps(c + 16 * i, r[i]);
}

/* b := up to 16 queries (64 bfloat16 each) as the B operand of q . k, two tiles of 16 rows:
 * row r of tile h holds dims 32h + 2r and 32h + 2r + 1 of each query (zeros past count) */
static void query_tile(const uint16_t *const *queries, int count, uint32_t *b) {
    for (int h = 0; h < 2; h++) {
        float rows[256] __attribute__((aligned(64)));
        for (int n = 0; n < 16; n++)
            _mm512_store_ps(rows + 16 * n, n < count ? _mm512_loadu_ps((const float *)(queries[n] + 32 * h))
                                                     : _mm512_setzero_ps());
        transpose16(rows); /* moves bits only */
        memcpy(b + 256 * h, rows, sizeof rows);
    }
}

/* tiles 1 and 2 := 16 key rows at `keys` (`stride` bytes apart), dims 0-31 and 32-63 */
static inline void load_keys(const uint16_t *keys, long stride) {
    _tile_loadd(1, keys, stride);
    _tile_loadd(2, keys + 32, stride);
}

/* c[i][n] = key row i . query n for the keys of load_keys and the queries `b` of query_tile:
 * the products exact, summed in float32 in the tile unit's fixed order, so a score's bits
 * depend on its key and query only */
static inline void score_tile(const uint32_t *b, float *c) {
    _tile_loadd(3, b, 64);
    _tile_loadd(4, b + 256, 64);
    _tile_zero(0);
    _tile_dpbf16ps(0, 1, 3);
    _tile_dpbf16ps(0, 2, 4);
    _tile_stored(0, c, 64);
}

/* 16 key rows as one block: `rows` itself when they are 16 consecutive rows, else copied into
 * `scratch` (zeros past m) */
static const uint16_t *key_block(const uint16_t *const *rows, int m, uint16_t *scratch,
                                 long *stride) {
    int consecutive = m == 16;
    for (int i = 1; i < m && consecutive; i++) consecutive = rows[i] == rows[0] + (size_t)i * 64;
    if (consecutive) {
        *stride = 128;
        return rows[0];
    }
    for (int i = 0; i < 16; i++) {
        if (i < m) memcpy(scratch + i * 64, rows[i], 128);
        else memset(scratch + i * 64, 0, 128);
    }
    *stride = 128;
    return scratch;
}

/* B operands of p . v for 32 value rows of 64 bfloat16 (a NULL row is zeros), four tiles of
 * 16 dims: tile c row r holds (v[2r][16c + n], v[2r + 1][16c + n]) for n < 16 */
static void value_tiles(const uint16_t *const *rows, uint32_t *b) {
    const __m512i low = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i high = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (int r = 0; r < 16; r++) {
        const uint16_t *x = rows[2 * r], *y = rows[2 * r + 1];
        for (int half = 0; half < 2; half++) {
            __m512i a = x ? _mm512_loadu_si512((const void *)(x + 32 * half)) : _mm512_setzero_si512();
            __m512i c = y ? _mm512_loadu_si512((const void *)(y + 32 * half)) : _mm512_setzero_si512();
            __m512i lo = _mm512_unpacklo_epi16(a, c), hi = _mm512_unpackhi_epi16(a, c);
            _mm512_store_si512((void *)(b + (2 * half) * 256 + r * 16),
                               _mm512_permutex2var_epi64(lo, low, hi));
            _mm512_store_si512((void *)(b + (2 * half + 1) * 256 + r * 16),
                               _mm512_permutex2var_epi64(lo, high, hi));
        }
    }
}

/* A operands: positions [t0, t0 + 32) of up to 16 probability rows (zeros past n positions and
 * past count rows) as bfloat16 high and low parts, p = hi + lo to about 16 bits */
static void prob_tiles(const float *const *probs, int count, int t0, int n, uint16_t *hi,
                       uint16_t *lo) {
    __mmask16 first = n >= 16 ? 0xffff : (__mmask16)((1u << (n > 0 ? n : 0)) - 1);
    __mmask16 second = n >= 32 ? 0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
    for (int m = 0; m < 16; m++) {
        for (int part = 0; part < 2; part++) {
            __m512 x = m < count ? _mm512_maskz_loadu_ps(part ? second : first,
                                                         probs[m] + t0 + 16 * part)
                                 : _mm512_setzero_ps();
            __m256bh h = _mm512_cvtneps_pbh(x);
            __m512 back = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
            __m256bh l = _mm512_cvtneps_pbh(_mm512_sub_ps(x, back));
            _mm256_store_si256((__m256i *)(hi + m * 32 + 16 * part), (__m256i)h);
            _mm256_store_si256((__m256i *)(lo + m * 32 + 16 * part), (__m256i)l);
        }
    }
}

/* tiles 0-3 (16 sums x 16 dims each) += the A operands' rows times the value tiles */
static inline void weigh_tiles(const uint16_t *hi, const uint16_t *lo, const uint32_t *b) {
    _tile_loadd(4, hi, 64);
    _tile_loadd(5, lo, 64);
    _tile_loadd(6, b, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(0, 5, 6);
    _tile_loadd(6, b + 256, 64);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(1, 5, 6);
    _tile_loadd(6, b + 512, 64);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    _tile_loadd(6, b + 768, 64);
    _tile_dpbf16ps(3, 4, 6);
    _tile_dpbf16ps(3, 5, 6);
}

static inline void load_sums(const float *c) {
    _tile_loadd(0, c, 256);
    _tile_loadd(1, c + 16, 256);
    _tile_loadd(2, c + 32, 256);
    _tile_loadd(3, c + 48, 256);
}

static inline void store_sums(float *c) {
    _tile_stored(0, c, 256);
    _tile_stored(1, c + 16, 256);
    _tile_stored(2, c + 32, 256);
    _tile_stored(3, c + 48, 256);
}

/* tiles 1 and 2 := key rows t0..t0+15 of the n consecutive rows at `keys` (zeros past n),
 * the rows PREFETCH ahead prefetched */
static void load_key_rows(const uint16_t *keys, int t0, int n, uint16_t *gathered) {
    int m = n - t0 < 16 ? n - t0 : 16;
    for (int t = t0 + PREFETCH; t < t0 + PREFETCH + 16 && t < n; t++) {
        _mm_prefetch((const char *)(keys + (size_t)t * 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(keys + (size_t)t * 64 + 32), _MM_HINT_T0);
    }
    const uint16_t *krows[16];
    for (int i = 0; i < m; i++) krows[i] = keys + (size_t)(t0 + i) * 64;
    long stride;
    const uint16_t *block = key_block(krows, m, gathered, &stride);
    load_keys(block, stride);
}

/* decode_attention_bf16 for dim 64 on a CPU with AMX: scores in the tile unit, the shared
 * prefix's keys and values read once per key head for every row's queries. A score is the same
 * bits whichever queries share its tile, and each row's softmax and weighted sums are its own,
 * over the prefix's positions and then its visible ones, in that order: a row gets the same
 * bits alone, in any batch, and with the prefix split off or in its own buffer. Phases: the
 * prefix's scores (per key head, 16 queries and 64 positions), each item's own scores and
 * softmax, the prefix's weighted sums (per key head and PAIRS (row, query head) pairs), each
 * item's own weighted sums. */
static int tile_attention(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                          const uint8_t *mask, const uint16_t *pk, const uint16_t *pv, int prefix,
                          uint16_t *out, int rows, int heads, int kv_heads, int capacity,
                          int length, float scale, int threads) {
    const int dim = 64, groups = heads / kv_heads, items = rows * kv_heads;
    const int width = length > 0 ? length : 1;
    size_t score_floats = 0, head = (sizeof(size_t) * (size_t)items + 63) / 64 * 64;
    int own_scratch[64];
    int *own = rows <= 64 ? own_scratch : malloc(sizeof(int) * (size_t)rows);
    if (!own) return items;
    for (int r = 0; r < rows; r++) { /* visible own positions per row: they size the scores */
        int n = 0;
        for (int j = 0; j < length; j++) n += !mask || mask[(size_t)r * length + j];
        own[r] = n;
        score_floats += (size_t)kv_heads * groups * (size_t)((prefix + n + 15) / 16 * 16);
    }
    const int query_tiles = (rows * groups + 15) / 16;
    size_t acc_floats = (size_t)items * groups * 64 + (size_t)kv_heads * query_tiles * 512;
    size_t pointers = (size_t)items * width * 2;
    size_t bytes =
        head + sizeof(float) * (acc_floats + score_floats) + sizeof(uint16_t *) * pointers;
    char *base = call_scratch(bytes);
    if (!base) {
        if (own != own_scratch) free(own);
        return items;
    }
    size_t *offset = (size_t *)base;
    float *acc = (float *)(base + head), *scores = acc + acc_floats;
    uint32_t *qtiles = (uint32_t *)(acc + (size_t)items * groups * 64);
    const uint16_t **rowptr = (const uint16_t **)(scores + score_floats);
    for (int item = 0, at = 0; item < items; item++) {
        offset[item] = (size_t)at;
        at += groups * ((prefix + own[item / kv_heads] + 15) / 16 * 16);
    }
    const int blocks = (prefix + 15) / 16, chunk = 4, per_head = (blocks + chunk - 1) / chunk;
    const int shared_blocks = prefix / 32;
#pragma omp parallel num_threads(threads)
    {
        uint32_t b[1024] __attribute__((aligned(64)));
        float c[256] __attribute__((aligned(64)));
        uint16_t gathered[16 * 64] __attribute__((aligned(64)));
        uint16_t hi[16 * 32] __attribute__((aligned(64))), lo[16 * 32] __attribute__((aligned(64)));
        float sums[16 * 64] __attribute__((aligned(64)));
        const __m512 factor = _mm512_set1_ps(scale);
        tiles_on();
#pragma omp for schedule(static)
        for (int u = 0; u < kv_heads * query_tiles; u++) { /* the prefix's query tiles */
            int h = u / query_tiles, count = 0;
            const uint16_t *queries[16] = {0};
            for (int p = u % query_tiles * 16; count < 16 && p < rows * groups; p++, count++)
                queries[count] = q + ((size_t)(p / groups) * heads + (size_t)h * groups + p % groups) * dim;
            query_tile(queries, count, qtiles + (size_t)u * 512);
        }
#pragma omp for schedule(static)
        for (int u = 0; u < kv_heads * per_head; u++) { /* the prefix's scores */
            int h = u / per_head, b0 = u % per_head * chunk;
            const uint16_t *keys = pk + (size_t)h * prefix * dim;
            for (int blk = b0; blk < b0 + chunk && blk < blocks; blk++) {
                int t0 = blk * 16, m = prefix - t0 < 16 ? prefix - t0 : 16;
                load_key_rows(keys, t0, prefix, gathered);
                for (int nt = 0; nt < query_tiles; nt++) {
                    score_tile(qtiles + (size_t)(h * query_tiles + nt) * 512, c);
                    transpose16(c);
                    for (int n = 0, p = nt * 16; n < 16 && p < rows * groups; n++, p++) {
                        int r = p / groups, g = p % groups, item = r * kv_heads + h;
                        float *dest = scores + offset[item] +
                                      (size_t)g * ((prefix + own[r] + 15) / 16 * 16);
                        _mm512_mask_storeu_ps(dest + t0, (__mmask16)((1u << m) - 1),
                                              _mm512_mul_ps(_mm512_load_ps(c + 16 * n), factor));
                    }
                }
            }
        }
#pragma omp for schedule(static)
        for (int item = 0; item < items; item++) { /* own scores, softmax */
            int r = item / kv_heads, h = item % kv_heads, n = own[r], total = prefix + n;
            int stride = (total + 15) / 16 * 16;
            size_t kv = ((size_t)r * kv_heads + h) * (size_t)capacity * dim;
            size_t qo = ((size_t)r * heads + (size_t)h * groups) * dim;
            const uint16_t **krows = rowptr + (size_t)item * width * 2, **vrows = krows + width;
            for (int j = 0, t = 0; j < length; j++) {
                if (mask && !mask[(size_t)r * length + j]) continue;
                krows[t] = k + kv + (size_t)j * dim;
                vrows[t] = v + kv + (size_t)j * dim;
                t++;
            }
            const uint16_t *queries[16] = {0};
            for (int g = 0; g < groups; g++) queries[g] = q + qo + (size_t)g * dim;
            query_tile(queries, groups, b);
            float *s0 = scores + offset[item];
            for (int t0 = 0; t0 < n; t0 += 16) {
                int m = n - t0 < 16 ? n - t0 : 16;
                for (int i = t0 + PREFETCH; i < t0 + PREFETCH + 16 && i < n; i++) {
                    _mm_prefetch((const char *)krows[i], _MM_HINT_T0);
                    _mm_prefetch((const char *)(krows[i] + 32), _MM_HINT_T0);
                }
                long kstride;
                const uint16_t *block = key_block(krows + t0, m, gathered, &kstride);
                load_keys(block, kstride);
                score_tile(b, c);
                transpose16(c);
                for (int g = 0; g < groups; g++)
                    _mm512_mask_storeu_ps(s0 + (size_t)g * stride + prefix + t0,
                                          (__mmask16)((1u << m) - 1),
                                          _mm512_mul_ps(_mm512_load_ps(c + 16 * g), factor));
            }
            for (int g = 0; g < groups; g++) softmax_row(s0 + (size_t)g * stride, total, total);
            memset(acc + (size_t)item * groups * 64, 0, sizeof(float) * (size_t)groups * 64);
        }
#pragma omp for schedule(static)
        for (int u = 0; u < kv_heads * query_tiles; u++) { /* the prefix's weighted sums */
            int h = u / query_tiles, p0 = u % query_tiles * 16, count = 0;
            if (!shared_blocks) continue;
            float *dest[16];
            const float *probs[16];
            for (int p = p0; p < p0 + 16 && p < rows * groups; p++, count++) {
                int r = p / groups, g = p % groups, item = r * kv_heads + h;
                dest[count] = acc + ((size_t)item * groups + g) * 64;
                probs[count] = scores + offset[item] + (size_t)g * ((prefix + own[r] + 15) / 16 * 16);
            }
            const uint16_t *values = pv + (size_t)h * prefix * dim, *vrows[32];
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int j = 0; j < shared_blocks; j++) {
                for (int i = 0; i < 32; i++) vrows[i] = values + (size_t)(32 * j + i) * dim;
                value_tiles(vrows, b);
                prob_tiles(probs, count, 32 * j, 32, hi, lo);
                weigh_tiles(hi, lo, b);
            }
            store_sums(sums);
            for (int m = 0; m < count; m++) memcpy(dest[m], sums + m * 64, sizeof(float) * 64);
        }
#pragma omp for schedule(static)
        for (int item = 0; item < items; item++) { /* own weighted sums, rounding */
            int r = item / kv_heads, h = item % kv_heads, n = own[r], total = prefix + n;
            int stride = (total + 15) / 16 * 16;
            size_t qo = ((size_t)r * heads + (size_t)h * groups) * dim;
            const uint16_t **own_values = rowptr + (size_t)item * width * 2 + width;
            const uint16_t *values = prefix ? pv + (size_t)h * prefix * dim : NULL, *vrows[32];
            const float *probs[16];
            for (int g = 0; g < groups; g++) probs[g] = scores + offset[item] + (size_t)g * stride;
            memset(sums, 0, sizeof(float) * 16 * 64);
            memcpy(sums, acc + (size_t)item * groups * 64, sizeof(float) * (size_t)groups * 64);
            load_sums(sums);
            for (int j = shared_blocks; 32 * j < total; j++) {
                for (int i = 0; i < 32; i++) {
                    int t = 32 * j + i;
                    vrows[i] = t < prefix ? values + (size_t)t * dim
                               : t < total ? own_values[t - prefix] : NULL;
                    int ahead = t + PREFETCH - prefix;
                    if (ahead >= 0 && ahead < n) {
                        _mm_prefetch((const char *)own_values[ahead], _MM_HINT_T0);
                        _mm_prefetch((const char *)(own_values[ahead] + 32), _MM_HINT_T0);
                    }
                }
                value_tiles(vrows, b);
                prob_tiles(probs, groups, 32 * j, total - 32 * j, hi, lo);
                weigh_tiles(hi, lo, b);
            }
            store_sums(sums);
            for (int g = 0; g < groups; g++)
                for (int i = 0; i < dim; i++) out[qo + g * dim + i] = float_to_bf16(sums[g * 64 + i]);
        }
        _tile_release();
    }
    if (own != own_scratch) free(own);
    return 0;
}
#endif
#endif

#ifdef HAVE_TILES
/* One unit of prefill attention: up to 16 query rows (token-major: row m is new token m / groups,
 * query head m % groups of key head h) of one chunk against its row's keys, causal among the
 * chunk's new tokens. */
static void prefill_unit(const uint16_t *q, const uint16_t *k, const uint16_t *v, const int32_t *e,
                         int h, int m0, uint16_t *out, int q_len, int heads, int kv_heads,
                         int capacity, float scale, float *probs, uint32_t *b, uint32_t *vt,
                         float *c, uint16_t *gathered, uint16_t *hi, uint16_t *lo, float *sums) {
    const int dim = 64, groups = heads / kv_heads;
    const int key_row = e[0], start = e[1], stop = e[2], new = e[3], row = e[4], end = e[5];
    const int span = stop - start, count = new * groups - m0 < 16 ? new * groups - m0 : 16;
    const uint16_t *queries[16] = {0};
    int vis[16];
    size_t at[16];
    for (int n = 0; n < count; n++) {
        int m = m0 + n, i = m / groups, g = m % groups, pos = end - new + i;
        at[n] = (((size_t)row * q_len + pos) * heads + (size_t)h * groups + g) * dim;
        queries[n] = q + at[n];
        vis[n] = span - new + i + 1;
    }
    const int most = vis[count - 1], stride = (most + 31) / 32 * 32;
    const uint16_t *keys = k + (((size_t)key_row * kv_heads + h) * capacity + start) * dim;
    const uint16_t *values = v + (((size_t)key_row * kv_heads + h) * capacity + start) * dim;
    const __m512 factor = _mm512_set1_ps(scale);
    query_tile(queries, count, b);
    for (int t0 = 0; t0 < most; t0 += 16) { /* scores */
        int m = most - t0 < 16 ? most - t0 : 16;
        load_key_rows(keys, t0, most, gathered);
        score_tile(b, c);
        transpose16(c);
        for (int n = 0; n < count; n++)
            _mm512_mask_storeu_ps(probs + (size_t)n * stride + t0, (__mmask16)((1u << m) - 1),
                                  _mm512_mul_ps(_mm512_load_ps(c + 16 * n), factor));
    }
    for (int n = 0; n < count; n++) /* each query over its visible positions */
        softmax_row(probs + (size_t)n * stride, vis[n], stride);
    const float *rows_p[16];
    for (int n = 0; n < 16; n++) rows_p[n] = n < count ? probs + (size_t)n * stride : NULL;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int t0 = 0; t0 < most; t0 += 32) { /* weighted sums of the values */
        const uint16_t *vrows[32];
        for (int i = 0; i < 32; i++) vrows[i] = t0 + i < most ? values + (size_t)(t0 + i) * dim : NULL;
        for (int t = t0 + 32; t < t0 + 64 && t < most; t++) {
            _mm_prefetch((const char *)(values + (size_t)t * dim), _MM_HINT_T0);
            _mm_prefetch((const char *)(values + (size_t)t * dim + 32), _MM_HINT_T0);
        }
        value_tiles(vrows, vt);
        prob_tiles(rows_p, count, t0, most - t0, hi, lo);
        weigh_tiles(hi, lo, vt);
    }
    store_sums(sums);
    for (int n = 0; n < count; n++)
        for (int i = 0; i < dim; i++) out[at[n] + i] = float_to_bf16(sums[n * 64 + i]);
}
#endif

/* whether the tile paths run (the CPU has AMX, Linux granted it, and set_tiles did not turn
 * them off) */
int tiles_available(void) {
#ifdef HAVE_TILES
    return tiles_allowed();
#else
    return 0;
#endif
}

/* on = 0: the vector paths even where tiles exist (tests only); returns the
 * previous setting */
int set_tiles(int on) {
#ifdef HAVE_TILES
    int before = tiles_wanted;
    tiles_wanted = on != 0;
    return before;
#else
    (void)on;
    return 0;
#endif
}

/* Prefill attention (prefill_attention="kernel"), dim 64, with AMX. q, out: [batch][q_len]
 * [heads][dim]; k, v: [rows][kv_heads][capacity][dim]; chunks[6 * c] = (key row, start, stop,
 * new, query row, end): the chunk's queries are positions [end - new, end) of its query row, its
 * keys positions [start, stop) of its key row, the new tokens' keys the last `new` of them,
 * causal among those. Scores, softmax and sums as the decoding kernel's tile path: a query's
 * result depends on its own keys and values only, not on the chunk it came in or the others.
 * Returns 0, or -1 where it does not apply (no tiles, dim or groups it does not take), or the
 * number of threads that could not allocate. */
int prefill_attention_bf16(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                           const int32_t *chunks, int count, uint16_t *out, int q_len, int heads,
                           int kv_heads, int dim, int capacity, float scale, int threads) {
#ifdef HAVE_TILES
    if (dim != 64 || heads % kv_heads || heads / kv_heads > 16 || !tiles_allowed()) return -1;
    if (count <= 0) return 0; /* no chunk: nothing to compute */
    const int groups = heads / kv_heads;
    int first_scratch[65], *first = count < 64 ? first_scratch : malloc(sizeof(int) * (size_t)(count + 1));
    if (!first) return 1;
    int longest = 0;
    first[0] = 0;
    for (int c = 0; c < count; c++) {
        const int32_t *e = chunks + 6 * c;
        longest = e[2] - e[1] > longest ? e[2] - e[1] : longest;
        first[c + 1] = first[c] + kv_heads * ((e[3] * groups + 15) / 16);
    }
    const int units = first[count];
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(+ : failed)
    {
        uint32_t b[512] __attribute__((aligned(64))), vt[1024] __attribute__((aligned(64)));
        float c[256] __attribute__((aligned(64))), sums[16 * 64] __attribute__((aligned(64)));
        uint16_t gathered[16 * 64] __attribute__((aligned(64)));
        uint16_t hi[16 * 32] __attribute__((aligned(64))), lo[16 * 32] __attribute__((aligned(64)));
        float *probs = thread_scratch((size_t)16 * ((longest + 31) / 32 * 32));
        if (!probs) failed++;
        tiles_on();
#pragma omp for schedule(static)
        for (int u = 0; u < units; u++) {
            if (!probs) continue;
            int lo_c = 0, hi_c = count - 1; /* the chunk holding unit u */
            while (lo_c < hi_c) {
                int mid = (lo_c + hi_c + 1) / 2;
                if (first[mid] <= u) lo_c = mid;
                else hi_c = mid - 1;
            }
            const int32_t *e = chunks + 6 * lo_c;
            int tiles = (e[3] * groups + 15) / 16, local = u - first[lo_c];
            prefill_unit(q, k, v, e, local / tiles, local % tiles * 16, out, q_len, heads, kv_heads,
                         capacity, scale, probs, b, vt, c, gathered, hi, lo, sums);
        }
        _tile_release();
    }
    if (first != first_scratch) free(first);
    return failed;
#else
    (void)q; (void)k; (void)v; (void)chunks; (void)count; (void)out; (void)q_len; (void)heads;
    (void)kv_heads; (void)dim; (void)capacity; (void)scale; (void)threads;
    return -1;
#endif
}

/* q: [rows][heads][dim]; k, v: [rows][kv_heads][capacity][dim], positions < length used;
 * mask: [rows][length] (nonzero: visible) or NULL; pk, pv: [kv_heads][prefix][dim] or NULL;
 * out: [rows][heads][dim]. Returns the number of (row, key head) items that failed (out of
 * memory), 0 on success. */
int decode_attention_bf16(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                          const uint8_t *mask, const uint16_t *pk, const uint16_t *pv,
                          int prefix, uint16_t *out, int rows, int heads, int kv_heads,
                          int dim, int capacity, int length, float scale, int threads) {
    int groups = heads / kv_heads;
    int items = rows * kv_heads;
    int failed = 0;
#ifdef HAVE_TILES
    if (dim == 64 && groups <= 16 && tiles_allowed())
        return tile_attention(q, k, v, mask, pk, pv, pk ? prefix : 0, out, rows, heads, kv_heads,
                              capacity, length, scale, threads);
#endif
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : failed)
    for (int item = 0; item < items; item++) {
        int row = item / kv_heads, head = item % kv_heads;
        size_t kv = ((size_t)row * kv_heads + head) * (size_t)capacity * dim;
        size_t qo = ((size_t)row * heads + (size_t)head * groups) * dim;
        size_t po = (size_t)head * prefix * dim;
        failed += one_item(q + qo, k + kv, v + kv, mask ? mask + (size_t)row * length : NULL,
                           pk ? pk + po : NULL, pv ? pv + po : NULL, pk ? prefix : 0, out + qo,
                           groups, dim, length, scale);
    }
    return failed;
}

/* one_item for float32 q, keys, values and out (a float32 model's decoding steps on a CPU
 * without native bfloat16): the same visible positions in the same order, float32 dot products
 * and weighted sums in the compiler's vector loops (a fixed split: 64-byte aligned scratch) */
static int one_item_f32(const float *q, const float *k, const float *v, const uint8_t *mask,
                        const float *pk, const float *pv, int prefix, float *out, int groups,
                        int dim, int length, float scale) {
    item_scratch s;
    if (item_scratch_alloc(&s, groups, dim, prefix + length)) return 1;
    const int stride = s.stride, width = s.width;
    float *qf = s.qf, *scores = s.scores, *acc = s.acc;
    const float **krows = s.krows, **vrows = s.vrows;
    memset(qf, 0, sizeof(float) * (size_t)groups * width);
    for (int g = 0; g < groups; g++) memcpy(qf + g * width, q + g * dim, sizeof(float) * dim);
    const int n = visible_rows_f32(pk, pv, prefix, k, v, mask, length, dim, krows, vrows);
    float kf[MAX_DIM] __attribute__((aligned(64)));
    memset(kf, 0, sizeof(kf));
    for (int t = 0; t < n; t++) {
        memcpy(kf, krows[t], sizeof(float) * dim);
        for (int g = 0; g < groups; g++)
            scores[(size_t)g * stride + t] = dot(qf + g * width, kf, width) * scale;
    }
    for (int g = 0; g < groups; g++) softmax_row(scores + (size_t)g * stride, n, n);
    memset(acc, 0, sizeof(float) * (size_t)groups * width);
    for (int t = 0; t < n; t++) {
        const float *row = vrows[t];
        for (int g = 0; g < groups; g++) {
            const float w = scores[(size_t)g * stride + t];
            float *a = acc + g * width;
            for (int i = 0; i < dim; i++) a[i] += w * row[i];
        }
    }
    for (int g = 0; g < groups; g++) memcpy(out + g * dim, acc + g * width, sizeof(float) * dim);
    item_scratch_free(&s);
    return 0;
}

int decode_attention_f32(const float *q, const float *k, const float *v, const uint8_t *mask,
                         const float *pk, const float *pv, int prefix, float *out, int rows,
                         int heads, int kv_heads, int dim, int capacity, int length, float scale,
                         int threads) {
    int groups = heads / kv_heads;
    int items = rows * kv_heads;
    int failed = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : failed)
    for (int item = 0; item < items; item++) {
        int row = item / kv_heads, head = item % kv_heads;
        size_t kv = ((size_t)row * kv_heads + head) * (size_t)capacity * dim;
        size_t qo = ((size_t)row * heads + (size_t)head * groups) * dim;
        size_t po = (size_t)head * prefix * dim;
        failed += one_item_f32(q + qo, k + kv, v + kv, mask ? mask + (size_t)row * length : NULL,
                               pk ? pk + po : NULL, pv ? pv + po : NULL, pk ? prefix : 0,
                               out + qo, groups, dim, length, scale);
    }
    return failed;
}

/* ----- 4-bit groupwise weights times bfloat16 rows (decoding steps' linear layers) -----
 *
 * out[m][n] = bf16(sum over k of x[m][k] * w[n][k]), w = q * s + low per group of 32 k and
 * column n (q in 0..15; s and low float32).
 *
 * With AVX-512 VNNI each row's 32 values of a group are written as s_x * (h + l / 254), h and
 * l int8 (h = round(x / s_x), s_x = max |x| / 127; l the rounded remainder: about 15 bits per
 * value, finer than bfloat16's 8 for all but values far below the group's largest), and
 * sum(q * x) = s_x * (sum(q * h) + sum(q * l) / 254) comes from exact integer dot products;
 * the low term uses the float32 sum of the group's x. With AVX2 the same integer sums come from
 * vpmaddubsw / vpmaddwd, and the same float32 steps follow in the same order.
 * Elsewhere plain float32 sums. Either way a row's sums are its own, in a fixed order: the same
 * bits whatever the row count, blocking or thread count. x is bfloat16 or float32 (x_f32), out
 * bfloat16 or float32 (out_f32).
 *
 * packed: [N/64 blocks][K/32 groups][4 panels of 16 columns][4 chunks][64 bytes]; byte
 * 4 * c + i of chunk j holds column (panel * 16 + c)'s q at k = 8j + i (low nibble) and
 * k = 8j + 4 + i (high nibble). scales: [N/64][K/32][2][64]: s, then low, per column. */
#define INT4_ROWS 16  /* rows per call at most */
#define INT4_MAX_K 8192

typedef struct {
    int m_rows, n, k, groups;
    const int8_t *xh, *xl;  /* [m][k] */
    const float *sx, *xsum; /* [m][groups] */
    const float *xf;        /* [m][k] float32 (the plain path) */
    const int32_t *hsum, *lsum; /* [m][groups]: sums of h and l (the 8-bit product) */
} int4_rows;

static inline uint8_t int4_q(const uint8_t *group, int col, int kk) {
    /* q of column col (0..63) at k offset kk (0..31) within one block-group */
    const uint8_t *chunk = group + ((col / 16) * 4 + kk / 8) * 64;
    uint8_t byte = chunk[4 * (col % 16) + kk % 4];
    return (kk % 8) < 4 ? (byte & 15) : (byte >> 4);
}

/* Which integer dot products the 4- and 8-bit products use: 2 AVX-512 VNNI, 1 AVX2, 0 none
 * (plain float32 sums). */
int int_dot_path(void) {
#if defined(__AVX512VNNI__)
    return 2;
#elif defined(__AVX2__)
    return 1;
#else
    return 0;
#endif
}

#if !defined(__AVX512VNNI__) && defined(__AVX2__)
#include <immintrin.h>
#define INT_DOT_AVX2 1

/* 8 columns' float32 steps after the integer sums ih, il: the VNNI path's, lane for lane */
static inline __m256 row_group_finish(__m256i ih, __m256i il, float sx) {
    __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(il), _mm256_set1_ps(1.0f / 254.0f),
                               _mm256_cvtepi32_ps(ih));
    return _mm256_mul_ps(t, _mm256_set1_ps(sx));
}
#endif

#if defined(__AVX512VNNI__)
/* s_x * (sum(w * h) + sum(w * l) / 254) for 16 columns of row m, group g: eight 4-byte quads of
 * weights w (unsigned bytes) and the row's int8 parts, integer sums started at ih and il */
static inline __m512 row_group_sum(const int4_rows *r, const __m512i *w, int m, int g,
                                   __m512i ih, __m512i il) {
    const int32_t *h = (const int32_t *)(r->xh + (size_t)m * r->k + g * 32);
    const int32_t *l = (const int32_t *)(r->xl + (size_t)m * r->k + g * 32);
    for (int q = 0; q < 8; q++) {
        ih = _mm512_dpbusd_epi32(ih, w[q], _mm512_set1_epi32(h[q]));
        il = _mm512_dpbusd_epi32(il, w[q], _mm512_set1_epi32(l[q]));
    }
    __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il), _mm512_set1_ps(1.0f / 254.0f),
                               _mm512_cvtepi32_ps(ih));
    return _mm512_mul_ps(t, _mm512_set1_ps(r->sx[m * r->groups + g]));
}
#endif

/* out[m][block's 64 columns] = acc, as float32 or rounded to bfloat16 */
static void store_block(const int4_rows *r, const float *acc, void *out, int out_f32, int block) {
    for (int m = 0; m < r->m_rows; m++)
        for (int c = 0; c < 64; c++) {
            const size_t at = (size_t)m * r->n + block * 64 + c;
            if (out_f32)
                ((float *)out)[at] = acc[m * 64 + c];
            else
                ((uint16_t *)out)[at] = float_to_bf16(acc[m * 64 + c]);
        }
}

static void int4_block(const int4_rows *r, const uint8_t *packed, const float *scales,
                       void *out, int out_f32, int block) {
    float acc[INT4_ROWS * 64] __attribute__((aligned(64)));
    memset(acc, 0, sizeof(float) * 64 * (size_t)r->m_rows);
    for (int g = 0; g < r->groups; g++) {
        const uint8_t *p = packed + ((size_t)block * r->groups + g) * 1024;
        const float *sc = scales + ((size_t)block * r->groups + g) * 128;
#if defined(__AVX512VNNI__)
        const __m512i nibble = _mm512_set1_epi8(15);
        for (int panel = 0; panel < 4; panel++) {
            __m512i w[8];
            for (int j = 0; j < 4; j++) {
                __m512i chunk = _mm512_loadu_si512((const void *)(p + (panel * 4 + j) * 64));
                w[2 * j] = _mm512_and_si512(chunk, nibble);
                w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), nibble);
            }
            __m512 s = _mm512_load_ps(sc + panel * 16), low = _mm512_load_ps(sc + 64 + panel * 16);
            for (int m = 0; m < r->m_rows; m++) {
                const __m512i zero = _mm512_setzero_si512();
                __m512 t = row_group_sum(r, w, m, g, zero, zero);
                float *a = acc + m * 64 + panel * 16;
                __m512 v = _mm512_fmadd_ps(s, t, _mm512_load_ps(a));
                v = _mm512_fmadd_ps(low, _mm512_set1_ps(r->xsum[m * r->groups + g]), v);
                _mm512_store_ps(a, v);
            }
        }
#elif defined(INT_DOT_AVX2)
        /* 8 columns (half a panel) at a time; vpmaddubsw's pair sums (at most 2 * 15 * 127) and
         * their total over the group's 8 quads (at most 30,480) fit in int16 */
        const __m256i nibble = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
        for (int half = 0; half < 8; half++) {
            const int panel = half / 2, side = half % 2;
            __m256i w[8];
            for (int j = 0; j < 4; j++) {
                __m256i chunk = _mm256_loadu_si256(
                    (const __m256i *)(p + (panel * 4 + j) * 64 + side * 32));
                w[2 * j] = _mm256_and_si256(chunk, nibble);
                w[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), nibble);
            }
            __m256 s = _mm256_load_ps(sc + half * 8), low = _mm256_load_ps(sc + 64 + half * 8);
            for (int m = 0; m < r->m_rows; m++) {
                const int32_t *h = (const int32_t *)(r->xh + (size_t)m * r->k + g * 32);
                const int32_t *l = (const int32_t *)(r->xl + (size_t)m * r->k + g * 32);
                __m256i sh = _mm256_setzero_si256(), sl = _mm256_setzero_si256();
                for (int q = 0; q < 8; q++) {
                    sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(w[q], _mm256_set1_epi32(h[q])));
                    sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(w[q], _mm256_set1_epi32(l[q])));
                }
                __m256 t = row_group_finish(_mm256_madd_epi16(sh, ones), _mm256_madd_epi16(sl, ones),
                                            r->sx[m * r->groups + g]);
                float *a = acc + m * 64 + half * 8;
                __m256 v = _mm256_fmadd_ps(s, t, _mm256_load_ps(a));
                v = _mm256_fmadd_ps(low, _mm256_set1_ps(r->xsum[m * r->groups + g]), v);
                _mm256_store_ps(a, v);
            }
        }
#else
        for (int m = 0; m < r->m_rows; m++) {
            const float *xa = r->xf + (size_t)m * r->k + g * 32;
            for (int c = 0; c < 64; c++) {
                float sum = 0.0f;
                for (int kk = 0; kk < 32; kk++)
                    sum = fmaf(xa[kk], fmaf((float)int4_q(p, c, kk), sc[c], sc[64 + c]), sum);
                acc[m * 64 + c] += sum;
            }
        }
#endif
    }
    store_block(r, acc, out, out_f32, block);
}

/* The rows' float32 values, int8 parts, scales, sums (per group of 32) in this thread's
 * buffers; the caller checked m_rows <= INT4_ROWS and k <= INT4_MAX_K. */
static int4_rows prepare_rows(const void *x, int x_f32, int m_rows, int n, int k) {
    static __thread int8_t xh[INT4_ROWS * INT4_MAX_K] __attribute__((aligned(64)));
    static __thread int8_t xl[INT4_ROWS * INT4_MAX_K] __attribute__((aligned(64)));
    static __thread float xf[INT4_ROWS * INT4_MAX_K] __attribute__((aligned(64)));
    static __thread float sx[INT4_ROWS * INT4_MAX_K / 32], xsum[INT4_ROWS * INT4_MAX_K / 32];
    static __thread int32_t hsum[INT4_ROWS * INT4_MAX_K / 32], lsum[INT4_ROWS * INT4_MAX_K / 32];
    const int groups = k / 32;
    for (int m = 0; m < m_rows; m++)
        for (int g = 0; g < groups; g++) {
            const size_t base = (size_t)m * k + g * 32;
            float big = 0.0f, total = 0.0f;
            for (int i = 0; i < 32; i++) {
                float v = x_f32 ? ((const float *)x)[base + i]
                                : bf16_to_float(((const uint16_t *)x)[base + i]);
                xf[base + i] = v;
                total += v;
                big = fmaxf(big, fabsf(v));
            }
            const float scale = big / 127.0f, inverse = big > 0.0f ? 127.0f / big : 0.0f;
            int32_t hs = 0, ls = 0;
            for (int i = 0; i < 32; i++) {
                float y = xf[base + i] * inverse;
                float hi = nearbyintf(y);
                float lo = fmaxf(-127.0f, fminf(127.0f, nearbyintf((y - hi) * 254.0f)));
                xh[base + i] = (int8_t)hi;
                xl[base + i] = (int8_t)lo;
                hs += (int32_t)hi;
                ls += (int32_t)lo;
            }
            sx[m * groups + g] = scale;
            xsum[m * groups + g] = total;
            hsum[m * groups + g] = hs;
            lsum[m * groups + g] = ls;
        }
    const int4_rows rows = {m_rows, n, k, groups, xh, xl, sx, xsum, xf, hsum, lsum};
    return rows;
}

/* 0 on success; -1 for shapes it does not take (more than INT4_ROWS rows, n % 64, k % 32) */
int int4_linear_bf16(const void *x, const uint8_t *packed, const float *scales, void *out,
                     int m_rows, int n, int k, int threads, int x_f32, int out_f32) {
    if (m_rows < 1 || m_rows > INT4_ROWS || n % 64 || k % 32 || k > INT4_MAX_K) return -1;
    const int4_rows rows = prepare_rows(x, x_f32, m_rows, n, k);
    const int blocks = n / 64;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int block = 0; block < blocks; block++)
        int4_block(&rows, packed, scales, out, out_f32, block);
    return 0;
}

/* ----- 8-bit groupwise weights (GGUF Q8_0: w = q * d, q in -127..127 per group of 32) -----
 *
 * The same scheme: packed [N/64][K/32][4 panels][8 chunks][64 bytes], byte 4 * c + i of chunk
 * j holding q + 128 of column (panel * 16 + c) at k = 4j + i; scales [N/64][K/32][64] (d).
 * sum(q * h) = sum((q + 128) * h) - 128 * sum(h), exact in int32. */
static void int8_block(const int4_rows *r, const uint8_t *packed, const float *scales,
                       void *out, int out_f32, int block) {
    float acc[INT4_ROWS * 64] __attribute__((aligned(64)));
    memset(acc, 0, sizeof(float) * 64 * (size_t)r->m_rows);
    for (int g = 0; g < r->groups; g++) {
        const uint8_t *p = packed + ((size_t)block * r->groups + g) * 2048;
        const float *sc = scales + ((size_t)block * r->groups + g) * 64;
#if defined(__AVX512VNNI__)
        for (int panel = 0; panel < 4; panel++) {
            __m512i w[8];
            for (int j = 0; j < 8; j++)
                w[j] = _mm512_loadu_si512((const void *)(p + (panel * 8 + j) * 64));
            __m512 d = _mm512_load_ps(sc + panel * 16);
            for (int m = 0; m < r->m_rows; m++) {
                __m512 t = row_group_sum(r, w, m, g,
                                         _mm512_set1_epi32(-128 * r->hsum[m * r->groups + g]),
                                         _mm512_set1_epi32(-128 * r->lsum[m * r->groups + g]));
                float *a = acc + m * 64 + panel * 16;
                _mm512_store_ps(a, _mm512_fmadd_ps(d, t, _mm512_load_ps(a)));
            }
        }
#elif defined(INT_DOT_AVX2)
        /* the bytes are q + 128; vpmaddubsw takes |q| times h with q's sign (pair sums at most
         * 2 * 127 * 127, in int16), so the sums start at 0 rather than -128 * sum(h) */
        const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
        for (int half = 0; half < 8; half++) {
            const int panel = half / 2, side = half % 2;
            __m256i w[8], sign[8];
            for (int j = 0; j < 8; j++) {
                __m256i q = _mm256_xor_si256(
                    _mm256_loadu_si256((const __m256i *)(p + (panel * 8 + j) * 64 + side * 32)), flip);
                w[j] = _mm256_abs_epi8(q);
                sign[j] = q;
            }
            __m256 d = _mm256_load_ps(sc + half * 8);
            for (int m = 0; m < r->m_rows; m++) {
                const int32_t *h = (const int32_t *)(r->xh + (size_t)m * r->k + g * 32);
                const int32_t *l = (const int32_t *)(r->xl + (size_t)m * r->k + g * 32);
                __m256i ih = _mm256_setzero_si256(), il = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) {
                    __m256i hs = _mm256_sign_epi8(_mm256_set1_epi32(h[j]), sign[j]);
                    __m256i ls = _mm256_sign_epi8(_mm256_set1_epi32(l[j]), sign[j]);
                    ih = _mm256_add_epi32(ih, _mm256_madd_epi16(_mm256_maddubs_epi16(w[j], hs), ones));
                    il = _mm256_add_epi32(il, _mm256_madd_epi16(_mm256_maddubs_epi16(w[j], ls), ones));
                }
                __m256 t = row_group_finish(ih, il, r->sx[m * r->groups + g]);
                float *a = acc + m * 64 + half * 8;
                _mm256_store_ps(a, _mm256_fmadd_ps(d, t, _mm256_load_ps(a)));
            }
        }
#else
        for (int m = 0; m < r->m_rows; m++) {
            const float *xa = r->xf + (size_t)m * r->k + g * 32;
            for (int c = 0; c < 64; c++) {
                const uint8_t *column = p + ((c / 16) * 8) * 64 + 4 * (c % 16);
                float sum = 0.0f;
                for (int kk = 0; kk < 32; kk++)
                    sum = fmaf(xa[kk], (float)((int)column[(kk / 4) * 64 + kk % 4] - 128), sum);
                acc[m * 64 + c] += sum * sc[c];
            }
        }
#endif
    }
    store_block(r, acc, out, out_f32, block);
}

/* out: float32 when out_f32, else bfloat16 */
int int8_linear_bf16(const void *x, const uint8_t *packed, const float *scales, void *out,
                     int m_rows, int n, int k, int threads, int x_f32, int out_f32) {
    if (m_rows < 1 || m_rows > INT4_ROWS || n % 64 || k % 32 || k > INT4_MAX_K) return -1;
    const int4_rows rows = prepare_rows(x, x_f32, m_rows, n, k);
    const int blocks = n / 64;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int block = 0; block < blocks; block++)
        int8_block(&rows, packed, scales, out, out_f32, block);
    return 0;
}

/* ----- one token per row from float32 logits: temperature sampling and its log-prob -----
 *
 * Row r draws the first index whose cumulative weight exp((l - max) / T) exceeds
 * draws[r] times the total (the inverse of the row's distribution at one uniform draw, as
 * agents.backends.hf_loading.sample_next does), and gets the token's log-prob at temperature
 * 1. The cumulative weights are sums of 16-value blocks taken in order, so the total and the
 * search agree. A row's result depends on its own logits and draw only. */
#define SAMPLE_BLOCK 16

static void sample_one(const float *l, int vocab, float inv_t, float draw, float *weights,
                       float *blocks, int64_t *token, float *logprob) {
    float high = -INFINITY;
    for (int i = 0; i < vocab; i++) high = l[i] > high ? l[i] : high;
    const int nblocks = (vocab + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK;
    float unit = 0.0f; /* sum of exp(l - max), temperature 1 */
    for (int b = 0; b < nblocks; b++) {
        const int start = b * SAMPLE_BLOCK;
        const int stop = start + SAMPLE_BLOCK < vocab ? start + SAMPLE_BLOCK : vocab;
        float part = 0.0f, part1 = 0.0f;
        for (int i = start; i < stop; i++) {
            const float shifted = l[i] - high;
            const float w = expf(shifted * inv_t);
            weights[i] = w;
            part += w;
            part1 += inv_t == 1.0f ? w : expf(shifted);
        }
        blocks[b] = part;
        unit += part1;
    }
    float total = 0.0f;
    for (int b = 0; b < nblocks; b++) total += blocks[b];
    const float target = draw * total;
    float before = 0.0f;
    int chosen = vocab - 1;
    for (int b = 0; b < nblocks; b++) {
        if (before + blocks[b] > target) {
            const int start = b * SAMPLE_BLOCK;
            const int stop = start + SAMPLE_BLOCK < vocab ? start + SAMPLE_BLOCK : vocab;
            float c = before;
            for (int i = start; i < stop; i++) {
                c += weights[i];
                if (c > target) {
                    chosen = i;
                    break;
                }
            }
            if (chosen == vocab - 1 && c <= target) chosen = stop - 1;
            break;
        }
        before += blocks[b];
    }
    while (chosen > 0 && weights[chosen] == 0.0f) chosen--; /* never a zero-weight token */
    *token = chosen;
    *logprob = l[chosen] - high - logf(unit);
}

int sample_rows(const float *logits, int rows, int vocab, float inv_temperature,
                const float *draws, int64_t *tokens, float *logprobs, int threads) {
    int failed = 0;
    const size_t nblocks = (size_t)vocab / SAMPLE_BLOCK + 1;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : failed)
    for (int r = 0; r < rows; r++) {
        float *weights = thread_scratch((size_t)vocab + nblocks + 16);
        if (!weights) {
            failed++;
        } else {
            float *blocks = weights + ((size_t)vocab + 15) / 16 * 16;
            sample_one(logits + (size_t)r * vocab, vocab, inv_temperature, draws[r], weights,
                       blocks, tokens + r, logprobs + r);
        }
    }
    return failed;
}
