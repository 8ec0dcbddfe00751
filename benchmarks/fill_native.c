/* The stand-ins of benchmarks/fill_layouts.py written by hand in C, rows layout (issue 30).

   The same arithmetic per order, in the same order of operations, as `flat_fill` and `fill`
   there; each row (sub-environment) in two passes over its N stocks: the orders, their caps
   and the bill of the full buys, then, once the row's cash scale is known, the bought shares
   and their costs. The tables ([T, N], float64) are read at each row's bar `t[e]` in place:
   no gathered copies. Row sums end in one scalar each (OpenMP SIMD reductions, so the
   compiler may vectorise them without -ffast-math). Built and called by fill_layouts.py
   --native; it measures what a hand-written kernel would save, it is not used by the env. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static inline double max_d(double a, double b) { return a > b ? a : b; }
static inline double min_d(double a, double b) { return a < b ? a : b; }

/* `orders` of fill_layouts.py: at most 100 shares short */
static inline void orders(double action, double held, double *sell, double *buy) {
    double delta = trunc(action * 100.0);
    *sell = max_d(min_d(max_d(-delta, 0.0), held + 100.0), 0.0);
    *buy = max_d(delta, 0.0);
}

/* out: [E, 4] = cash + holdings value, traded value, sold + wanted (as flat_fill's last three)
   after the holdings [E, N] (written to `holdings_out`). */
void flat_fill(int64_t num_envs, int64_t n, const double *holdings, const double *price_table,
               const float *actions, const int64_t *t, const double *cash_in, double *holdings_out,
               double *out) {
    double *sells = malloc(2 * n * sizeof(double)), *buys = sells + n;
    for (int64_t e = 0; e < num_envs; e++) {
        const double *held = holdings + e * n, *price = price_table + t[e] * n;
        const float *action = actions + e * n;
        double sold = 0.0, wanted = 0.0;
#pragma omp simd reduction(+ : sold, wanted)
        for (int64_t j = 0; j < n; j++) {
            orders((double)action[j], held[j], &sells[j], &buys[j]);
            sold += sells[j] * price[j];
            wanted += buys[j] * price[j];
        }
        double cash = cash_in[e] + sold * 0.999;
        double scale = wanted * 1.001 > cash ? max_d(cash, 0.0) / max_d(wanted * 1.001, 1e-300) : 1.0;
        double bought_value = 0.0, worth = 0.0;
        double *next = holdings_out + e * n;
#pragma omp simd reduction(+ : bought_value, worth)
        for (int64_t j = 0; j < n; j++) {
            double bought = floor(buys[j] * scale);
            bought_value += bought * price[j];
            next[j] = held[j] - sells[j] + bought;
            worth += next[j] * price[j];
        }
        out[e * 4 + 0] = cash - bought_value * 1.001 + worth;
        out[e * 4 + 1] = sold + bought_value;
        out[e * 4 + 2] = sold + wanted;
        out[e * 4 + 3] = 0.0;
    }
    free(sells);
}

/* out: [E, 8] = the last eight results of fill_layouts.py's `fill`, in its order. */
void costly_fill(int64_t num_envs, int64_t n, const double *holdings, const double *price_table,
                 const float *actions, const double *half_spread_table, const double *impact_table,
                 const double *cap_table, const int64_t *t, const double *cash_in, double *holdings_out,
                 double *out) {
    double *sells = malloc(2 * n * sizeof(double)), *buys = sells + n;
    for (int64_t e = 0; e < num_envs; e++) {
        const double *held = holdings + e * n, *price = price_table + t[e] * n;
        const double *half_spread = half_spread_table + t[e] * n, *impact = impact_table + t[e] * n;
        const double *cap = cap_table + t[e] * n;
        const float *action = actions + e * n;
        double unfilled_shares = 0.0, unfilled_value = 0.0, proceeds = 0.0, needed = 0.0, linear = 0.0;
        double count = 0.0, ordered_value = 0.0, sale_fees = 0.0;
#pragma omp simd reduction(+ : unfilled_shares, unfilled_value, proceeds, needed, linear, count, ordered_value, sale_fees)
        for (int64_t j = 0; j < n; j++) {
            double sell, buy;
            orders((double)action[j], held[j], &sell, &buy);
            double ordered = sell + buy;
            sell = min_d(sell, cap[j]);
            buy = min_d(buy, cap[j]);
            double unfilled = ordered - (sell + buy);
            unfilled_shares += unfilled;
            unfilled_value += unfilled * price[j];
            double filled = sell + buy;
            double fee = max_d(filled * price[j] * 0.001 + filled * 0.005, 1.0);
            double rate = min_d(half_spread[j] + impact[j] * sqrt(max_d(filled, 1e-300)), 1.0);
            double sold = sell * price[j], wanted = buy * price[j];
            double sale_fee = min_d(sold * min_d(1.0 - rate, 0.01), fee);
            double buy_fee = min_d(wanted * 0.01, fee);
            proceeds += sold - sold * rate - sale_fee;
            needed += wanted + wanted * rate + buy_fee;
            linear += wanted * 1.001 + wanted * rate + buy * 0.005;
            count += buy > 0.0 ? 1.0 : 0.0;
            ordered_value += filled * price[j];
            sale_fees += sale_fee;
            sells[j] = sell;
            buys[j] = buy;
        }
        double cash = cash_in[e] + proceeds;
        double scale = needed > cash ? max_d(cash - count, 0.0) / max_d(linear, 1e-300) : 1.0;
        double traded = 0.0, buy_fees = 0.0, slipped = 0.0, spread = 0.0, bill = 0.0, borrow = 0.0, worth = 0.0;
        double *next = holdings_out + e * n;
#pragma omp simd reduction(+ : traded, buy_fees, slipped, spread, bill, borrow, worth)
        for (int64_t j = 0; j < n; j++) {
            double bought = floor(buys[j] * scale);
            double rate = min_d(half_spread[j] + impact[j] * sqrt(max_d(sells[j] + bought, 1e-300)), 1.0);
            double value = (sells[j] + bought) * price[j], bought_value = bought * price[j];
            double buy_fee = min_d(bought_value * 0.01, max_d(bought_value * 0.001 + bought * 0.005, 1.0));
            bill += bought_value + bought_value * rate + buy_fee;
            traded += value;
            buy_fees += buy_fee;
            slipped += value * rate;
            spread += value * half_spread[j];
            next[j] = held[j] - sells[j] + bought;
            borrow += min_d(next[j], 0.0) * price[j];
            worth += next[j] * price[j];
        }
        double *row = out + e * 8;
        row[0] = cash - bill - borrow * 1e-5 + worth;
        row[1] = traded;
        row[2] = sale_fees + buy_fees;
        row[3] = slipped;
        row[4] = spread;
        row[5] = ordered_value + unfilled_value;
        row[6] = unfilled_shares;
        row[7] = unfilled_value;
    }
    free(sells);
}
