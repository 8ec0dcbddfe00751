/* The fill with the terms of CostModel, by hand for the CPU (market_envs/fill.py builds it).

   The same rules as `_fill_with_costs` in market_envs/fill.py, which stays the kernel on CUDA
   and wherever this one cannot be built; tests/test_native_fill.py holds the two equal on
   random orders with each combination of terms, and the env's reference tests hold this one
   to tests/reference_env.py. Written by hand for speed: the rules need about 14 sums per
   sub-environment, and this kernel takes each row in two passes over its N stocks with one
   register per sum (benchmarks/RESULTS.md, "Costs in the env step", fifth pass).

   Per row e: pass 1 caps the orders at the participation limit, prices the sales and the
   full buys (commission, half-spread, impact) and sums their bills; the cash limit then
   gives the buys' common scale; pass 2 (`buy_pass`) prices the bought shares and writes the
   holdings.

   The market tables (half-spread, impact, fill cap) are [T, N] and read in place at each
   sub-environment's fill bar `bars[e]`; a pointer may be NULL (term off), and a table's row
   stride is 0 for a [1, N] row that every bar shares, N otherwise. Every other array is
   [E, N] or [E], float64, contiguous. `out` is [8, E]: cash after the fill, value traded,
   commission, half-spread, impact, value ordered, value and shares left unfilled by the cap.

   Which terms are on is a constant of each of the 32 versions of `fill_rows` that
   `fill_with_costs` chooses from by its `terms` bits (from `CostModel.terms`): gcc vectorised
   the loops with branches on run-time flags about 5x slower. The commission's fee per share, minimum and cap need no branch: at 0
   (the cap: 1e300) they leave every result as it was. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static inline double max_d(double a, double b) { return a > b ? a : b; }
static inline double min_d(double a, double b) { return a < b ? a : b; }

typedef struct {
    double value, slipped, spread, commission;
} sums_t;

/* Pass 2 of one row: the bought shares (`buys` x `scale`, rounded down in shares mode), their
   costs, and the new holdings in `next`. */
static inline __attribute__((always_inline)) sums_t buy_pass(
    int64_t n, double scale, const double *buys, const double *sells, const double *price,
    const double *hs, const double *imp, const double *held, double *next, double buy_cost, double per_share,
    double minimum, double cap_rate, const int spread_on, const int impact_on, const int per_order,
    const int weights_mode) {
    double value_bought = 0.0, slipped = 0.0, spread = 0.0, commission = 0.0;
#pragma omp simd reduction(+ : value_bought, slipped, spread, commission)
    for (int64_t j = 0; j < n; j++) {
        double bought = weights_mode ? buys[j] * scale : floor(buys[j] * scale);
        double p = price[j], rate = 0.0;
        if (impact_on) { /* impact per share falls with the order: the rate of the bought shares */
            rate = sqrt(max_d(bought, 1e-300));
            rate = min_d(spread_on ? hs[j] + rate * imp[j] : rate * imp[j], 1.0);
        } else if (spread_on) {
            rate = hs[j];
        }
        double value = bought * p;
        value_bought += value;
        if (spread_on || impact_on) slipped += value * rate;
        if (spread_on && impact_on) spread += value * hs[j];
        if (per_order) commission += min_d(value * cap_rate, max_d(value * buy_cost + bought * per_share, minimum));
        next[j] = held[j] - sells[j] + bought;
    }
    return (sums_t){value_bought, slipped, spread, commission};
}

/* The rows with the terms on that the constants say; see the header. */
static inline __attribute__((always_inline)) void fill_rows(
    int64_t num_envs, int64_t n, const double *sells_in, const double *buys_in, const double *price_rows,
    const double *holdings, const double *cash_in, const int64_t *bars, const double *half_spread_rows,
    int64_t half_spread_stride, const double *impact_rows, int64_t impact_stride, const double *cap_rows,
    int64_t cap_stride, double buy_cost,
    double sell_cost, double per_share, double minimum, double max_rate, double *holdings_out, double *out,
    double *sells, double *buys, const int spread_on, const int impact_on, const int cap_on, const int per_order,
    const int weights_mode) {
    const int has_rate = spread_on || impact_on;
    /* the most an order pays in commission, a fraction of its value (`_order_commission`): the
       cap when set (1e300: none); a sale also at most what is left of its proceeds */
    const double cap_rate = max_rate > 0.0 ? max_rate : 1e300;
    for (int64_t e = 0; e < num_envs; e++) {
        const double *price = price_rows + e * n, *held = holdings + e * n;
        if (e + 1 < num_envs) { /* the next row's tables sit at a bar the hardware cannot guess */
            const int64_t next_bar = bars[e + 1];
            for (int64_t k = 0; k < n; k += 8) {
                if (spread_on) __builtin_prefetch(half_spread_rows + next_bar * half_spread_stride + k);
                if (impact_on) __builtin_prefetch(impact_rows + next_bar * impact_stride + k);
                if (cap_on) __builtin_prefetch(cap_rows + next_bar * cap_stride + k);
            }
        }
        const int64_t bar = bars[e];
        const double *hs = half_spread_rows + bar * half_spread_stride, *imp = impact_rows + bar * impact_stride;
        const double *cap = cap_rows + bar * cap_stride;
        double unfilled_shares = 0.0, unfilled_value = 0.0;
        double sold = 0.0, sale_slipped = 0.0, sale_spread = 0.0, sale_commission = 0.0;
        double wanted = 0.0, buy_slipped = 0.0, buy_commission = 0.0, bought_shares = 0.0, count = 0.0;
#pragma omp simd reduction(+ : unfilled_shares, unfilled_value, sold, sale_slipped, sale_spread, sale_commission, \
                               wanted, buy_slipped, buy_commission, bought_shares, count)
        for (int64_t j = 0; j < n; j++) { /* pass 1: the capped orders, the sales, the full buys */
            double s = sells_in[e * n + j], b = buys_in[e * n + j], p = price[j];
            double orders = s + b; /* a stock is sold or bought, never both */
            if (cap_on) {
                s = min_d(s, cap[j]);
                b = min_d(b, cap[j]);
                double filled = s + b, unfilled = orders - filled;
                unfilled_shares += unfilled;
                unfilled_value += unfilled * p;
                orders = filled;
            }
            sells[j] = s;
            buys[j] = b;
            /* each order's commission before its caps (`_commission_before_caps`); one side is 0 */
            double fee = 0.0;
            if (per_order) fee = max_d(s * p * sell_cost + b * p * buy_cost + orders * per_share, minimum);
            double rate = 0.0; /* `_slippage` of the order */
            if (impact_on) {
                rate = sqrt(max_d(orders, 1e-300));
                rate = min_d(spread_on ? hs[j] + rate * imp[j] : rate * imp[j], 1.0);
            } else if (spread_on) {
                rate = hs[j];
            }
            double value = s * p; /* the sale */
            sold += value;
            if (has_rate) sale_slipped += value * rate;
            if (spread_on && impact_on) sale_spread += value * hs[j];
            if (per_order || has_rate) { /* else the rate alone, linear: summed below */
                double sale_fee = per_order ? fee : value * sell_cost;
                double most = min_d(per_order ? cap_rate : 1e300, has_rate ? 1.0 - rate : 1.0);
                sale_commission += min_d(value * most, sale_fee);
            }
            double want = b * p; /* the full buy */
            wanted += want;
            if (has_rate) buy_slipped += want * rate;
            if (per_order) buy_commission += min_d(want * cap_rate, fee);
            bought_shares += b;
            count += b > 0.0 ? 1.0 : 0.0;
        }
        if (!(per_order || has_rate)) sale_commission = sold * sell_cost;
        if (!per_order) buy_commission = wanted * buy_cost;
        double cash = cash_in[e] + sold - sale_commission - sale_slipped;
        /* the buys' common scale within the cash (`_buys_within_cash`, `_cash_scale`) */
        double needed = wanted + buy_slipped + buy_commission;
        double linear = wanted * (1.0 + buy_cost) + buy_slipped + bought_shares * per_share;
        double room = cash - count * minimum;
        double scale = needed > cash ? max_d(room, 0.0) / max_d(linear, 1e-300) : 1.0;

        sums_t bought = buy_pass(n, scale, buys, sells, price, hs, imp, held, holdings_out + e * n, buy_cost,
                                 per_share, minimum, cap_rate, spread_on, impact_on, per_order, weights_mode);
        double value_bought = bought.value, slipped = bought.slipped, spread = bought.spread;
        double commission = bought.commission;
        if (!per_order) commission = value_bought * buy_cost;
        double left = cash - value_bought - commission - slipped;
        /* the split of the slippage into its half-spread and impact parts, per side (`_side_costs`) */
        double spread_paid = 0.0, impact_paid = 0.0;
        if (!impact_on) {
            spread_paid = sale_slipped + slipped;
        } else if (!spread_on) {
            impact_paid = sale_slipped + slipped;
        } else {
            spread_paid = sale_spread + spread;
            impact_paid = max_d(sale_slipped - sale_spread, 0.0) + max_d(slipped - spread, 0.0);
        }
        /* the bill fits the cash up to rounding; only a debt owed before (a borrow fee) stays below 0 */
        out[0 * num_envs + e] = max_d(left, min_d(cash, 0.0));
        out[1 * num_envs + e] = sold + value_bought;
        out[2 * num_envs + e] = sale_commission + commission;
        out[3 * num_envs + e] = spread_paid;
        out[4 * num_envs + e] = impact_paid;
        out[5 * num_envs + e] = sold + wanted + unfilled_value;
        out[6 * num_envs + e] = unfilled_value;
        out[7 * num_envs + e] = unfilled_shares;
    }
}

/* Bit k of `terms`: which version of `fill_rows` runs. The bits are those of `TERM_FLAGS` in
   market_envs/fill.py, set from `CostModel.terms` (tests/test_native_fill.py holds the two equal);
   a table's bit is set exactly when its pointer is not NULL. */
enum {
    TERM_SPREAD = 1,
    TERM_IMPACT = 2,
    TERM_PARTICIPATION = 4,
    TERM_PER_ORDER_COMMISSION = 8,
    TERM_WEIGHTS_MODE = 16,
};

/* The interface is declared once, in market_envs/fill.py (`INTERFACE`), which generates the ctypes
   types, the operator's schema and the call; tests/test_native_fill.py reads this signature and fails
   when it differs from the declaration. */
void fill_with_costs(int64_t num_envs, int64_t n, const double *sells, const double *buys, const double *price,
                     const double *holdings, const double *cash, const int64_t *bars, const double *half_spread,
                     int64_t half_spread_stride, const double *impact, int64_t impact_stride,
                     const double *fill_cap, int64_t fill_cap_stride, double buy_cost, double sell_cost,
                     double per_share, double minimum, double max_rate, int64_t terms, double *holdings_out,
                     double *out) {
    double *scratch = malloc(2 * (size_t)n * sizeof(double)); /* the capped sells, then the buys */
    if (scratch == NULL) abort();
#define FILL_ROWS(F)                                                                                         \
    case F:                                                                                                  \
        fill_rows(num_envs, n, sells, buys, price, holdings, cash, bars, half_spread, half_spread_stride,     \
                  impact, impact_stride, fill_cap, fill_cap_stride, buy_cost, sell_cost, per_share, minimum,  \
                  max_rate, holdings_out, out, scratch, scratch + n, ((F) & TERM_SPREAD) != 0,                \
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
