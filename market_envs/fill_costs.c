/* The fill with the terms of CostModel, by hand for the CPU (market_envs/fill.py builds it); at the end of
   the file, the eager step's read of the actions (`read_actions`, `read_rate_actions`).

   The same rules as `_fill_with_costs` in market_envs/fill.py, which stays the kernel on CUDA
   and wherever this one cannot be built; tests/test_native_fill.py holds the two equal on
   random orders with each combination of terms, and the env's reference tests hold this one
   to tests/reference_env.py. Written by hand for speed: the rules need about 14 sums per
   sub-environment (benchmarks/RESULTS.md, "Costs in the env step", fifth pass and after).

   Rows go four at a time (sub-environments e0 .. e0 + 3). Per row: pass 1 splits the signed orders
   into sales and purchases, reads the fill prices, caps the orders at the participation limit, prices the sales and the full buys (commission, half-spread, impact) and
   sums their bills in 4-lane vectors along the stocks; the four rows' sums are then ended together
   (`v_sum4`, lane r = row r) and the cash limit's scale is computed for the four in one vector;
   pass 2 (`second_pass`) prices the bought shares and writes the holdings. Where the cash does
   not bind (scale 1) the bought shares are the full buys, whose sums pass 1 already holds in the
   same lanes and order, so pass 2 only writes the holdings (`second_pass_unscaled`). The last
   stocks of a row (N not a multiple of 4) go as one vector whose missing lanes are 0, which adds
   0 to every sum. So each sum is ((lane 0 + lane 1) + (lane 2 + lane 3)) of lane-wise running sums:
   the same rule as before, summed in another order (results equal to the last bits).

   The orders are one signed array [E, N], shares (+ bought, - sold): a stock is sold or bought,
   never both, so its sale is max(-order, 0) and its purchase max(order, 0), and a NaN order is
   neither (no order). fill.py's `fill_orders` forms the array as buys - sells from the env's two
   sides (a NaN side gives a NaN order), and its `order_sides` is the same rule for the torch
   kernels, which take the sides.
   The tables are read in place at each sub-environment's fill bar `bars[e]`: the open prices
   (float32, the panel's, widened to double exactly as torch's `.double()` does) and the market
   tables (half-spread and impact, float32 and widened the same way; the fill cap, float64; a
   pointer may be NULL: term off). A table's row stride is 0 for a [1, N] row that every bar
   shares, N otherwise. Every other array is [E, N] or [E], float64, contiguous. `out` is [8, E]:
   cash after the fill, value traded, commission, half-spread, impact, value ordered, value and
   shares left unfilled by the cap.
   So the caller writes one [E, N] array before the call (the orders), not three (the sales, the
   purchases and their prices): under torch.compile inductor writes what the kernel reads just
   before the call, and the kernel read it back from beyond the L2 cache (benchmarks/RESULTS.md,
   "The compiled step's extra time taken apart").

   Which terms are on is a constant of each of the 32 versions of `fill_rows` that
   `fill_with_costs` chooses from by its `terms` bits (from `CostModel.terms`): gcc vectorised
   the loops with branches on run-time flags about 5x slower. The commission's fee per share, minimum and cap need no branch: at 0
   (the cap: 1e300) they leave every result as it was. The vectors are AVX's where the compiler
   targets it (-march=native), else GCC's generic vectors with the same lanes and order. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX__)
#include <immintrin.h>
typedef __m256d vec;
static inline vec v_set(double x) { return _mm256_set1_pd(x); }
static inline vec v_load(const double *p) { return _mm256_loadu_pd(p); }
static inline __m256i v_first(int64_t k) { return _mm256_cmpgt_epi64(_mm256_set1_epi64x(k), _mm256_setr_epi64x(0, 1, 2, 3)); }
static inline vec v_load_first(const double *p, int64_t k) { return _mm256_maskload_pd(p, v_first(k)); }
static inline void v_store(double *p, vec v) { _mm256_storeu_pd(p, v); }
static inline vec v_load_float(const float *p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
static inline vec v_load_float_first(const float *p, int64_t k) {
    return _mm256_cvtps_pd(_mm_maskload_ps(p, _mm_cmpgt_epi32(_mm_set1_epi32((int)k), _mm_setr_epi32(0, 1, 2, 3))));
}
static inline void v_store_first(double *p, vec v, int64_t k) { /* no masked store: slow on AMD */
    __m128d low = _mm256_castpd256_pd128(v);
    if (k >= 2) {
        _mm_storeu_pd(p, low);
        if (k == 3) _mm_store_sd(p + 2, _mm256_extractf128_pd(v, 1));
    } else {
        _mm_store_sd(p, low);
    }
}
static inline vec v_min(vec a, vec b) { return _mm256_min_pd(a, b); } /* a < b ? a : b */
static inline vec v_max(vec a, vec b) { return _mm256_max_pd(a, b); } /* a > b ? a : b */
static inline vec v_sqrt(vec a) { return _mm256_sqrt_pd(a); }
static inline vec v_floor(vec a) { return _mm256_floor_pd(a); }
static inline vec v_if_greater(vec a, vec b, vec x, vec y) { return _mm256_blendv_pd(y, x, _mm256_cmp_pd(a, b, _CMP_GT_OQ)); }
static inline vec v_one_if_positive(vec a) { return _mm256_and_pd(_mm256_cmp_pd(a, _mm256_setzero_pd(), _CMP_GT_OQ), _mm256_set1_pd(1.0)); }
/* lane r: the sum of the lanes of row r's vector, (l0 + l1) + (l2 + l3) */
static inline vec v_sum4(vec r0, vec r1, vec r2, vec r3) {
    vec a = _mm256_hadd_pd(r0, r1), b = _mm256_hadd_pd(r2, r3); /* r0 01, r1 01, r0 23, r1 23 */
    return _mm256_permute2f128_pd(a, b, 0x20) + _mm256_permute2f128_pd(a, b, 0x31);
}
#else
typedef double vec __attribute__((vector_size(32)));
static inline vec v_set(double x) { return (vec){x, x, x, x}; }
static inline vec v_load(const double *p) { vec v; memcpy(&v, p, sizeof v); return v; }
static inline vec v_load_first(const double *p, int64_t k) { vec v = {0, 0, 0, 0}; for (int64_t l = 0; l < k; l++) v[l] = p[l]; return v; }
static inline void v_store(double *p, vec v) { memcpy(p, &v, sizeof v); }
static inline vec v_load_float(const float *p) { return (vec){p[0], p[1], p[2], p[3]}; }
static inline vec v_load_float_first(const float *p, int64_t k) { vec v = {0, 0, 0, 0}; for (int64_t l = 0; l < k; l++) v[l] = p[l]; return v; }
static inline void v_store_first(double *p, vec v, int64_t k) { for (int64_t l = 0; l < k; l++) p[l] = v[l]; }
static inline vec v_min(vec a, vec b) { vec r; for (int l = 0; l < 4; l++) r[l] = a[l] < b[l] ? a[l] : b[l]; return r; }
static inline vec v_max(vec a, vec b) { vec r; for (int l = 0; l < 4; l++) r[l] = a[l] > b[l] ? a[l] : b[l]; return r; }
static inline vec v_sqrt(vec a) { vec r; for (int l = 0; l < 4; l++) r[l] = sqrt(a[l]); return r; }
static inline vec v_floor(vec a) { vec r; for (int l = 0; l < 4; l++) r[l] = floor(a[l]); return r; }
static inline vec v_if_greater(vec a, vec b, vec x, vec y) { vec r; for (int l = 0; l < 4; l++) r[l] = a[l] > b[l] ? x[l] : y[l]; return r; }
static inline vec v_one_if_positive(vec a) { vec r; for (int l = 0; l < 4; l++) r[l] = a[l] > 0.0 ? 1.0 : 0.0; return r; }
static inline vec v_sum4(vec r0, vec r1, vec r2, vec r3) {
    return (vec){(r0[0] + r0[1]) + (r0[2] + r0[3]), (r1[0] + r1[1]) + (r1[2] + r1[3]), (r2[0] + r2[1]) + (r2[2] + r2[3]),
                 (r3[0] + r3[1]) + (r3[2] + r3[3])};
}
#endif

#define LANES 4

/* Fetch the line at `p` ahead of its use, into the outer caches (the hint's locality 1: prefetcht2) rather
   than into L1 (locality 3): the next four rows' table rows were some 180 lines at N = 100 (136 since the
   half-spread and impact tables are float32), which on a Zen 4 host held up the current rows' own loads when
   sent to L1; the costs step at N = 100, E = 1,024 took 0.90x to 0.96x the time with this hint, paired in one
   process (benchmarks/RESULTS.md, "The tables' prefetch aimed at L2"). Inlined by force: as a plain call
   gcc -O3 dropped it, prefetches and all. */
static inline __attribute__((always_inline)) void prefetch_far(const void *p) { __builtin_prefetch(p, 0, 1); }

typedef struct {
    double buy_cost, sell_cost, per_share, minimum, cap_rate;
} rules_t;

enum { UNFILLED_SHARES, UNFILLED_VALUE, SOLD, SALE_SLIPPED, SALE_SPREAD, SALE_COMMISSION, WANTED, BUY_SLIPPED,
       BUY_SPREAD, BUY_COMMISSION, BOUGHT_SHARES, COUNT, FIRST_SUMS };
enum { VALUE_BOUGHT, SLIPPED, SPREAD, COMMISSION, SECOND_SUMS };

/* the rate of orders of `shares`: half-spread + impact, at most 1 (`_slippage`) */
static inline __attribute__((always_inline)) vec slippage(vec shares, vec hs, vec imp, const int spread_on, const int impact_on) {
    if (impact_on) {
        vec rate = v_sqrt(v_max(shares, v_set(1e-300)));
        rate = rate * imp;
        if (spread_on) rate = hs + rate;
        return v_min(rate, v_set(1.0));
    }
    return spread_on ? hs : v_set(0.0);
}

/* pass 1 of four stocks of signed orders `d` */
static inline __attribute__((always_inline)) void first(vec d, vec p, vec hs, vec imp, vec cap, vec *acc,
    double *sells, double *buys, rules_t r, const int spread_on, const int impact_on, const int cap_on, const int per_order) {
    const int has_rate = spread_on || impact_on;
    vec zero = v_set(0.0);
    /* the sale and the purchase, >= 0: v_max(x, 0) is 0 where x is NaN (a NaN order is no order) */
    vec s = v_max(zero - d, zero), b = v_max(d, zero), orders = s + b;
    if (cap_on) {
        s = v_min(s, cap);
        b = v_min(b, cap);
        vec filled = s + b, unfilled = orders - filled;
        acc[UNFILLED_SHARES] += unfilled;
        acc[UNFILLED_VALUE] += unfilled * p;
        orders = filled;
    }
    v_store(sells, s);
    v_store(buys, b);
    vec fee = zero;
    if (per_order) fee = v_max(s * p * v_set(r.sell_cost) + b * p * v_set(r.buy_cost) + orders * v_set(r.per_share), v_set(r.minimum));
    vec rate = slippage(orders, hs, imp, spread_on, impact_on);
    vec value = s * p;
    acc[SOLD] += value;
    if (has_rate) acc[SALE_SLIPPED] += value * rate;
    if (spread_on && impact_on) acc[SALE_SPREAD] += value * hs;
    if (per_order || has_rate) {
        vec sale_fee = fee;
        if (!per_order) sale_fee = value * v_set(r.sell_cost);
        vec most = v_set(1.0);
        if (has_rate) most = v_set(1.0) - rate;
        most = v_min(v_set(per_order ? r.cap_rate : 1e300), most);
        acc[SALE_COMMISSION] += v_min(value * most, sale_fee);
    }
    vec want = b * p;
    acc[WANTED] += want;
    if (has_rate) acc[BUY_SLIPPED] += want * rate;
    if (spread_on && impact_on) acc[BUY_SPREAD] += want * hs;
    if (per_order) {
        acc[BUY_COMMISSION] += v_min(want * v_set(r.cap_rate), fee);
        acc[BOUGHT_SHARES] += b;
        acc[COUNT] += v_one_if_positive(b);
    }
}

/* pass 1 of a row: also writes its capped sales, purchases and prices (double) into the scratch
   rows `sells`, `buys` and `price` for pass 2 (padded: the missing lanes of the last vector 0) */
static inline __attribute__((always_inline)) void first_pass(int64_t n, const double *orders, const float *open,
    const float *hs, const float *imp, const double *cap, double *sells, double *buys, double *price, vec *acc,
    rules_t r, const int spread_on, const int impact_on, const int cap_on, const int per_order) {
    vec zero = v_set(0.0), a[FIRST_SUMS];
    for (int k = 0; k < FIRST_SUMS; k++) a[k] = zero;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        vec p = v_load_float(open + j);
        v_store(price + j, p);
        first(v_load(orders + j), p, spread_on ? v_load_float(hs + j) : zero, impact_on ? v_load_float(imp + j) : zero,
              cap_on ? v_load(cap + j) : zero, a, sells + j, buys + j, r, spread_on, impact_on, cap_on, per_order);
    }
    if (j < n) { /* the last stocks, the missing lanes 0: no order, which adds 0 to every sum */
        int64_t k = n - j;
        vec p = v_load_float_first(open + j, k);
        v_store(price + j, p);
        first(v_load_first(orders + j, k), p, spread_on ? v_load_float_first(hs + j, k) : zero,
              impact_on ? v_load_float_first(imp + j, k) : zero, cap_on ? v_load_first(cap + j, k) : zero, a, sells + j,
              buys + j, r, spread_on, impact_on, cap_on, per_order);
    }
    for (int k = 0; k < FIRST_SUMS; k++) acc[k] = a[k];
}

static inline __attribute__((always_inline)) vec second(vec scale, vec s, vec b, vec p, vec hs, vec imp, vec held, vec *acc,
    rules_t r, const int spread_on, const int impact_on, const int per_order, const int weights_mode) {
    vec bought = b * scale;
    if (!weights_mode) bought = v_floor(bought);
    vec rate = slippage(bought, hs, imp, spread_on, impact_on);
    vec value = bought * p;
    acc[VALUE_BOUGHT] += value;
    if (spread_on || impact_on) acc[SLIPPED] += value * rate;
    if (spread_on && impact_on) acc[SPREAD] += value * hs;
    if (per_order)
        acc[COMMISSION] += v_min(value * v_set(r.cap_rate), v_max(value * v_set(r.buy_cost) + bought * v_set(r.per_share), v_set(r.minimum)));
    return held - s + bought;
}

static inline __attribute__((always_inline)) void second_pass(int64_t n, double scale_of_row, const double *sells,
    const double *buys, const double *price, const float *hs, const float *imp, const double *held, double *next,
    vec *acc, rules_t r, const int spread_on, const int impact_on, const int per_order, const int weights_mode) {
    vec zero = v_set(0.0), scale = v_set(scale_of_row), a[SECOND_SUMS];
    for (int k = 0; k < SECOND_SUMS; k++) a[k] = zero;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        v_store(next + j, second(scale, v_load(sells + j), v_load(buys + j), v_load(price + j),
                                 spread_on ? v_load_float(hs + j) : zero, impact_on ? v_load_float(imp + j) : zero, v_load(held + j), a, r, spread_on, impact_on, per_order, weights_mode));
    if (j < n) {
        int64_t k = n - j;
        v_store_first(next + j, second(scale, v_load(sells + j), v_load(buys + j), v_load(price + j),
                                       spread_on ? v_load_float_first(hs + j, k) : zero,
                                       impact_on ? v_load_float_first(imp + j, k) : zero,
                                       v_load_first(held + j, k), a, r, spread_on, impact_on, per_order, weights_mode), k);
    }
    for (int k = 0; k < SECOND_SUMS; k++) acc[k] = a[k];
}

/* pass 2 where the cash does not bind (scale 1): the bought shares are the full buys, so their sums
   are pass 1's (the same lanes, the same order); only the holdings are written. Returns 0 (and the
   caller takes the full pass) if a buy is not whole shares in shares mode, where floor would change it. */
static inline __attribute__((always_inline)) int second_pass_unscaled(int64_t n, const double *sells, const double *buys,
    const double *held, double *next, const int weights_mode) {
    int64_t j = 0;
    if (!weights_mode) {
        vec fractional = v_set(0.0);
        for (; j < n; j += LANES) { vec b = v_load(buys + j); fractional = v_max(fractional, b - v_floor(b)); }
        double lanes[LANES];
        v_store(lanes, fractional);
        if (lanes[0] != 0.0 || lanes[1] != 0.0 || lanes[2] != 0.0 || lanes[3] != 0.0) return 0;
        j = 0;
    }
    for (; j + LANES <= n; j += LANES) v_store(next + j, v_load(held + j) - v_load(sells + j) + v_load(buys + j));
    if (j < n) v_store_first(next + j, v_load_first(held + j, n - j) - v_load(sells + j) + v_load(buys + j), n - j);
    return 1;
}

static inline __attribute__((always_inline)) void fill_rows(
    int64_t num_envs, int64_t n, const double *orders, const double *holdings, const double *cash_in,
    const int64_t *bars, const float *open_rows, int64_t open_stride, const float *half_spread_rows,
    int64_t half_spread_stride, const float *impact_rows, int64_t impact_stride, const double *cap_rows,
    int64_t cap_stride, double buy_cost, double sell_cost, double per_share, double minimum, double max_rate,
    double *holdings_out, double *out, double *scratch, int64_t padded, const int spread_on, const int impact_on,
    const int cap_on, const int per_order, const int weights_mode) {
    const int has_rate = spread_on || impact_on;
    const rules_t r = {buy_cost, sell_cost, per_share, minimum, max_rate > 0.0 ? max_rate : 1e300};
    const vec zero = v_set(0.0);
    for (int64_t e0 = 0; e0 < num_envs; e0 += LANES) {
        const int64_t rows = num_envs - e0 < LANES ? num_envs - e0 : LANES;
        for (int64_t e = e0 + LANES; e < e0 + 2 * LANES && e < num_envs; e++) { /* the next rows' tables */
            for (int64_t k = 0; k < n; k += 16) { /* a line: 16 floats, 8 doubles */
                prefetch_far(open_rows + bars[e] * open_stride + k);
                if (spread_on) prefetch_far(half_spread_rows + bars[e] * half_spread_stride + k);
                if (impact_on) prefetch_far(impact_rows + bars[e] * impact_stride + k);
            }
            if (cap_on)
                for (int64_t k = 0; k < n; k += 8) prefetch_far(cap_rows + bars[e] * cap_stride + k);
        }
        vec acc[LANES][FIRST_SUMS];
        for (int64_t q = 0; q < LANES; q++) {
            double *sells = scratch + 3 * q * padded, *buys = sells + padded, *price = buys + padded;
            if (q >= rows) {
                for (int k = 0; k < FIRST_SUMS; k++) acc[q][k] = zero;
                continue;
            }
            const int64_t e = e0 + q, bar = bars[e];
            first_pass(n, orders + e * n, open_rows + bar * open_stride, half_spread_rows + bar * half_spread_stride,
                       impact_rows + bar * impact_stride, cap_rows + bar * cap_stride, sells, buys, price, acc[q], r,
                       spread_on, impact_on, cap_on, per_order);
        }
        vec sum[FIRST_SUMS];
        for (int k = 0; k < FIRST_SUMS; k++) sum[k] = v_sum4(acc[0][k], acc[1][k], acc[2][k], acc[3][k]);
        vec sold = sum[SOLD], sale_commission = sum[SALE_COMMISSION], buy_commission = sum[BUY_COMMISSION];
        if (!(per_order || has_rate)) sale_commission = sold * v_set(sell_cost);
        if (!per_order) buy_commission = sum[WANTED] * v_set(buy_cost);
        vec cash = (rows == LANES ? v_load(cash_in + e0) : v_load_first(cash_in + e0, rows)) + sold - sale_commission - sum[SALE_SLIPPED];
        vec needed = sum[WANTED] + sum[BUY_SLIPPED] + buy_commission;
        vec linear = sum[WANTED] * v_set(1.0 + buy_cost) + sum[BUY_SLIPPED] + sum[BOUGHT_SHARES] * v_set(per_share);
        vec room = cash - sum[COUNT] * v_set(minimum);
        vec scale = v_if_greater(needed, cash, v_max(room, zero) / v_max(linear, v_set(1e-300)), v_set(1.0));
        double scales[LANES];
        v_store(scales, scale);
        vec acc2[LANES][SECOND_SUMS];
        for (int64_t q = 0; q < LANES; q++) {
            if (q >= rows) {
                for (int k = 0; k < SECOND_SUMS; k++) acc2[q][k] = zero;
                continue;
            }
            const int64_t e = e0 + q, bar = bars[e];
            const double *sells = scratch + 3 * q * padded, *buys = sells + padded, *price = buys + padded;
            if (scales[q] == 1.0 && second_pass_unscaled(n, sells, buys, holdings + e * n, holdings_out + e * n, weights_mode)) {
                acc2[q][VALUE_BOUGHT] = acc[q][WANTED];
                acc2[q][SLIPPED] = acc[q][BUY_SLIPPED];
                acc2[q][SPREAD] = acc[q][BUY_SPREAD];
                acc2[q][COMMISSION] = acc[q][BUY_COMMISSION];
                continue;
            }
            second_pass(n, scales[q], sells, buys, price, half_spread_rows + bar * half_spread_stride,
                        impact_rows + bar * impact_stride, holdings + e * n, holdings_out + e * n, acc2[q], r, spread_on,
                        impact_on, per_order, weights_mode);
        }
        vec bought[SECOND_SUMS];
        for (int k = 0; k < SECOND_SUMS; k++) bought[k] = v_sum4(acc2[0][k], acc2[1][k], acc2[2][k], acc2[3][k]);
        vec value_bought = bought[VALUE_BOUGHT], slipped = bought[SLIPPED], spread = bought[SPREAD];
        vec commission = bought[COMMISSION];
        if (!per_order) commission = value_bought * v_set(buy_cost);
        vec left = cash - value_bought - commission - slipped;
        vec spread_paid = zero, impact_paid = zero;
        if (!impact_on) {
            spread_paid = sum[SALE_SLIPPED] + slipped;
        } else if (!spread_on) {
            impact_paid = sum[SALE_SLIPPED] + slipped;
        } else {
            spread_paid = sum[SALE_SPREAD] + spread;
            impact_paid = v_max(sum[SALE_SLIPPED] - sum[SALE_SPREAD], zero) + v_max(slipped - spread, zero);
        }
        vec results[8] = {v_max(left, v_min(cash, zero)), sold + value_bought, sale_commission + commission, spread_paid,
                          impact_paid, sold + sum[WANTED] + sum[UNFILLED_VALUE], sum[UNFILLED_VALUE], sum[UNFILLED_SHARES]};
        for (int k = 0; k < 8; k++) {
            if (rows == LANES)
                v_store(out + k * num_envs + e0, results[k]);
            else
                v_store_first(out + k * num_envs + e0, results[k], rows);
        }
    }
}

enum {
    TERM_SPREAD = 1,
    TERM_IMPACT = 2,
    TERM_PARTICIPATION = 4,
    TERM_PER_ORDER_COMMISSION = 8,
    TERM_WEIGHTS_MODE = 16,
};

void fill_with_costs(int64_t num_envs, int64_t n, const double *orders, const double *holdings, const double *cash,
                     const int64_t *bars, const float *open_prices, int64_t open_prices_stride,
                     const float *half_spread, int64_t half_spread_stride, const float *impact, int64_t impact_stride,
                     const double *fill_cap, int64_t fill_cap_stride, double buy_cost, double sell_cost,
                     double per_share, double minimum, double max_rate, int64_t terms, double *holdings_out,
                     double *out) {
    const int64_t padded = (n + LANES - 1) / LANES * LANES;
    double *scratch = malloc(3 * LANES * (size_t)padded * sizeof(double)); /* per row of four: capped sells, buys, prices */
    if (scratch == NULL) abort();
#define FILL_ROWS(F)                                                                                         \
    case F:                                                                                                  \
        fill_rows(num_envs, n, orders, holdings, cash, bars, open_prices, open_prices_stride, half_spread,    \
                  half_spread_stride,                                                                        \
                  impact, impact_stride, fill_cap, fill_cap_stride, buy_cost, sell_cost, per_share, minimum,  \
                  max_rate, holdings_out, out, scratch, padded, ((F) & TERM_SPREAD) != 0,                     \
                  ((F) & TERM_IMPACT) != 0, ((F) & TERM_PARTICIPATION) != 0,                                 \
                  ((F) & TERM_PER_ORDER_COMMISSION) != 0, ((F) & TERM_WEIGHTS_MODE) != 0);                   \
        break;
#define FILL_ROWS_4(F) FILL_ROWS(F) FILL_ROWS(F + 1) FILL_ROWS(F + 2) FILL_ROWS(F + 3)
    switch (terms) {
        FILL_ROWS_4(0) FILL_ROWS_4(4) FILL_ROWS_4(8) FILL_ROWS_4(12)
        FILL_ROWS_4(16) FILL_ROWS_4(20) FILL_ROWS_4(24) FILL_ROWS_4(28)
    }
    free(scratch);
}

/* ------------------------------------------------------------------- the actions, read eagerly

   The actions as the orders read them (`_read_actions` in market_envs/env.py), for the eager step on
   the CPU: each float32 action clipped to [-1, 1] with NaN as 0, widened to double (exact), and with
   the rate action (two blocks a row, the aims then the rates) each stock's trade rate
   ((1 + r) / 2)^2, computed as torch computes it, 0.5 + 0.5 r then the square (halving is exact, so
   the bits are torch's). One pass over the actions where torch's eager ops take five (NaN, clip,
   the aims' copy, the rate's widening sum, the square): at 1,024 sub-environments the fixed cost of
   each op was most of the policy's rate's cost in the step (benchmarks/RESULTS.md, "The policy's rate
   read in one pass"). The compiled step keeps torch's forms, which inductor fuses itself. */

static inline double clean_action(float a) {
    if (a != a) return 0.0; /* NaN: no order */
    return (double)(a > 1.0f ? 1.0f : (a < -1.0f ? -1.0f : a)); /* +-inf to +-1, -0 kept, as torch's clamp */
}

void read_actions(int64_t num_envs, int64_t n, const float *actions, double *aims) {
    const int64_t count = num_envs * n;
#pragma omp simd
    for (int64_t k = 0; k < count; k++) aims[k] = clean_action(actions[k]);
}

void read_rate_actions(int64_t num_envs, int64_t n, const float *actions, double *aims, double *rates) {
    for (int64_t e = 0; e < num_envs; e++) {
        const float *row = actions + e * 2 * n;
        double *aim = aims + e * n, *rate = rates + e * n;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            aim[i] = clean_action(row[i]);
            double half = 0.5 + 0.5 * clean_action(row[n + i]);
            rate[i] = half * half;
        }
    }
}
