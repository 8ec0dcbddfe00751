"""A real HTTP server on loopback that speaks the vendors' documented bars APIs.

The providers' tests point alpaca-py and massive at it through their base-URL
options, so the vendors' own client code (requests, pagination, headers, parsing)
runs unchanged. The server holds bars in UTC, as the vendors send them, and can be
told to page small, to answer 429 a number of times, to refuse keys with 403, and to
hold a request until released (so a test can kill a build in the middle).

- Alpaca (https://docs.alpaca.markets/reference/stockbars):
  GET /v2/stocks/bars?symbols=&timeframe=1Min|NMin|1Day&start=&end=&adjustment=&feed=&limit=&page_token=
  with headers APCA-API-KEY-ID / APCA-API-SECRET-KEY; answers
  {"bars": {SYM: [{"t", "o", "h", "l", "c", "v", "n", "vw"}]}, "next_page_token": str|null};
  `end` is inclusive; a symbol without bars is absent from "bars".
- Alpaca's trading API and latest trades: `tests/broker_server.py` adds them (`route`).
- Polygon/Massive (https://massive.com/docs/rest/stocks/aggregates/custom-bars):
  GET /v2/aggs/ticker/{T}/range/{N}/{minute|day}/{from_ms}/{to_ms}?adjusted=&sort=&limit=
  with "Authorization: Bearer KEY"; answers {"ticker", "results": [{"t" (ms), "o", "h",
  "l", "c", "v", "vw", "n"}], "resultsCount", "status": "OK", "next_url"?}; a ticker
  without bars answers resultsCount 0 and no "results".

Every request is logged (path, query) in `requests`; the server stops when the
`with` block ends.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd

NY = "America/New_York"
KEY_ID, SECRET = "PKTESTKEYID0123456789", "s3cr3t-DO-NOT-LEAK-abcdefghijklmnop"
POLYGON_KEY = "pg-KEY-DO-NOT-LEAK-0123456789"


def session_day(day: str, close: str = "16:00", pre: int = 0, post: int = 0) -> pd.DatetimeIndex:
    """Minute stamps (UTC) of one regular session, written by hand (not from a calendar),
    plus `pre` minutes before the open and `post` minutes from the close on."""
    open_ = pd.Timestamp(f"{day} 09:30", tz=NY)
    end = pd.Timestamp(f"{day} {close}", tz=NY)
    stamps = pd.date_range(
        open_ - pd.Timedelta(minutes=pre), end + pd.Timedelta(minutes=post), freq="1min", inclusive="left"
    )
    return stamps.tz_convert("UTC")


def bars_frame(stamps: pd.DatetimeIndex, seed: int, level: float) -> pd.DataFrame:
    """OHLCV bars (UTC timestamps) with float32-exact prices (cents of a float32 grid)."""
    rng = np.random.default_rng(seed)
    close = np.round(level * np.exp(np.cumsum(rng.normal(0, 0.001, len(stamps)))), 2)
    open_ = np.round(close * (1 + rng.normal(0, 0.0005, len(stamps))), 2)
    high = np.maximum(open_, close) + 0.01
    low = np.minimum(open_, close) - 0.01
    volume = rng.integers(100, 5000, len(stamps)).astype(float)
    frame = pd.DataFrame(
        {"timestamp": stamps, "open": open_, "high": high, "low": low, "close": close, "volume": volume}
    )
    for column in ("open", "high", "low", "close"):
        frame[column] = frame[column].astype(np.float32).astype(np.float64)
    return frame


# ------------------------------------------------------- the served market
START, END = "2020-10-30", "2021-03-16"
DAYS = {  # day -> (close time, pre-market minutes, after-market minutes) served
    "2020-10-30": ("16:00", 30, 0),  # Friday before the November change (EDT, open 13:30 UTC)
    "2020-11-02": ("16:00", 0, 15),  # Monday after it (EST, open 14:30 UTC)
    "2020-11-27": ("13:00", 0, 30),  # the day after Thanksgiving: early close at 13:00
    "2021-03-12": ("16:00", 0, 0),  # Friday before the March change (EST)
    "2021-03-15": ("16:00", 0, 0),  # Monday after it (EDT, open 13:30 UTC)
}
HOLIDAY = "2020-11-26"
MISSING = ("BBB", "2020-11-02")  # BBB has no bar that day
SESSION_BARS = 390 * 4 + 210


def write_vendor_recipe(
    folder: Path, vendor: str, url: str, tickers=("AAA", "BBB"), interval="1min", **options
) -> Path:
    """A recipe of source ``vendor`` ("alpaca" or "polygon") over the served window,
    pointed at the test server's ``url``, with fast back-off; ``options`` add top-level keys."""
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items())
    path = Path(folder) / f"{vendor}-test.toml"
    path.write_text(
        f'source = "{vendor}"\ninterval = "{interval}"\nstart = "{START}"\nend = "{END}"\n'
        f'train_end = "2020-11-03"\nval_end = "2021-03-13"\nbenchmark = "QQQ"\n'
        f'tickers = {json.dumps(list(tickers))}\n\n[{vendor}]\nurl = "{url}"\nbackoff_s = 0.01\n' + extra
    )
    return path


def served_bars() -> dict[str, pd.DataFrame]:
    """What the server holds: regular, pre/after-market and holiday bars, in UTC."""
    out = {}
    for i, ticker in enumerate(("AAA", "BBB", "QQQ")):
        stamps = []
        for day, (close, pre, post) in DAYS.items():
            if (ticker, day) != MISSING:
                stamps.append(session_day(day, close, pre, post))
        stamps.append(pd.date_range(f"{HOLIDAY} 10:00", periods=10, freq="1min", tz=NY).tz_convert("UTC"))
        out[ticker] = bars_frame(pd.DatetimeIndex(np.concatenate(stamps)).sort_values(), seed=i, level=50.0 + 100 * i)
    return out


def expected_regular(frame: pd.DataFrame) -> pd.DataFrame:
    """The served bars inside the regular sessions, by hand (no calendar library)."""
    local = frame.assign(timestamp=pd.DatetimeIndex(frame["timestamp"]).tz_convert(NY))
    keep = np.zeros(len(local), dtype=bool)
    for day, (close, _, _) in DAYS.items():
        lo, hi = pd.Timestamp(f"{day} 09:30", tz=NY), pd.Timestamp(f"{day} {close}", tz=NY)
        keep |= ((local["timestamp"] >= lo) & (local["timestamp"] < hi)).to_numpy()
    return local[keep].reset_index(drop=True)


def one_error_line(err: str) -> str:
    """The single `error:` line of a failed command (progress lines aside), no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def cache_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


class VendorServer:
    """The bars of `bars` (ticker -> UTC frame) served as Alpaca's and Polygon's APIs.

    :param page_size: the most bars one page holds (small, to force pagination).
    """

    def __init__(self, bars: dict[str, pd.DataFrame], page_size: int = 1000) -> None:
        self.bars = bars
        self.page_size = page_size
        self.requests: list[tuple[str, dict]] = []
        self.throttle = 0  # answer this many next requests with 429
        self.hold_after: int | None = None  # hold every request after this many
        self.fail_after: int | None = None  # answer 503 to every request after this many
        self.release = threading.Event()
        self.held = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @contextmanager
    def running(self):
        thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.release.set()
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)

    def count(self, prefix: str = "/v2") -> int:
        return sum(1 for path, _ in self.requests if path.startswith(prefix))

    # ---------------------------------------------------------------- handler
    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                self.do_GET("POST")

            def do_DELETE(self):
                self.do_GET("DELETE")

            def do_GET(self, method: str = "GET"):
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                with server._lock:
                    server.requests.append((parts.path, query))
                    number = len(server.requests)
                    throttled = server.throttle > 0
                    if throttled:
                        server.throttle -= 1
                if server.hold_after is not None and number > server.hold_after:
                    server.held.set()
                    server.release.wait(timeout=30)
                    return self._send(503, {"message": "held"})
                if server.fail_after is not None and number > server.fail_after:
                    return self._send(503, {"status": "ERROR", "message": "service unavailable"})
                if parts.path == "/v2/stocks/bars":
                    return server._alpaca(self, query, throttled)
                if parts.path.startswith("/v2/aggs/ticker/"):
                    return server._polygon(self, parts.path, query, throttled)
                if server.route(self, method, parts.path, query, body, throttled) is None:
                    return self._send(404, {"message": "not found"})

            def _send(self, status: int, body: dict, headers: dict | None = None):
                payload = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up first (a held request of a run the test interrupted): nothing to answer

        return Handler

    def route(self, handler, method: str, path: str, query: dict, body: dict, throttled: bool):
        """More endpoints for a subclass (`tests/broker_server.py`); None answers 404."""
        return None

    def visible(self, frame: pd.DataFrame, minutes: int) -> pd.DataFrame:
        """The bars a request may see (a subclass with a clock hides bars that have not closed)."""
        return frame

    def _window(self, ticker: str, lo: pd.Timestamp, hi: pd.Timestamp, daily: bool, minutes: int) -> pd.DataFrame:
        frame = self.bars.get(ticker)
        if frame is None:
            return pd.DataFrame(columns=["timestamp", "open", "high", "low", "close", "volume"])
        frame = self.visible(frame, 1)
        if daily:
            frame = _daily(frame)
        elif minutes > 1:
            frame = _resample(frame, minutes)
        inside = (frame["timestamp"] >= lo) & (frame["timestamp"] <= hi)  # both APIs: end inclusive
        return frame[inside].reset_index(drop=True)

    def _alpaca(self, handler, query: dict, throttled: bool):
        if handler.headers.get("APCA-API-KEY-ID") != KEY_ID or handler.headers.get("APCA-API-SECRET-KEY") != SECRET:
            return handler._send(403, {"code": 40310000, "message": "forbidden: invalid credentials"})
        if throttled:
            return handler._send(
                429, {"code": 42910000, "message": "too many requests."}, {"X-RateLimit-Reset": str(int(time.time()))}
            )
        if query.get("adjustment") != "all" or query.get("feed") not in ("sip", "iex"):
            return handler._send(422, {"code": 42210000, "message": f"unexpected adjustment/feed {query}"})
        timeframe = query["timeframe"]
        daily = timeframe == "1Day"
        minutes = 0 if daily else int(timeframe.removesuffix("Min"))
        lo, hi = pd.Timestamp(query["start"]), pd.Timestamp(query["end"])
        symbol = query["symbols"]
        window = self._window(symbol, lo, hi, daily, minutes)
        offset = int(base64.b64decode(query["page_token"]).decode()) if query.get("page_token") else 0
        size = min(int(query.get("limit") or 10_000), self.page_size)
        page = window.iloc[offset : offset + size]
        rows = [
            {"t": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "o": o, "h": h, "l": low, "c": c, "v": int(v), "n": 1, "vw": c}
            for t, o, h, low, c, v in zip(
                page["timestamp"], page["open"], page["high"], page["low"], page["close"], page["volume"]
            )
        ]
        more = offset + size < len(window)
        token = base64.b64encode(str(offset + size).encode()).decode() if more else None
        return handler._send(200, {"bars": {symbol: rows} if rows else {}, "next_page_token": token})

    def _polygon(self, handler, path: str, query: dict, throttled: bool):
        if handler.headers.get("Authorization") != f"Bearer {POLYGON_KEY}":
            return handler._send(403, {"status": "NOT_AUTHORIZED", "request_id": "r1", "message": "Unknown API Key"})
        if throttled:
            return handler._send(
                429,
                {"status": "ERROR", "request_id": "r2", "error": "You've exceeded the maximum requests per minute."},
            )
        ticker, _, multiplier, timespan, lo_ms, hi_ms = path.removeprefix("/v2/aggs/ticker/").split("/")
        offset, _, adjusted = query.get("cursor", "0.").partition(".")  # a cursor carries the first page's query
        adjusted = adjusted or query.get("adjusted")
        if adjusted != "true":
            return handler._send(400, {"status": "ERROR", "error": f"expected adjusted=true, got {query}"})
        daily = timespan == "day"
        lo, hi = (pd.Timestamp(int(x), unit="ms", tz="UTC") for x in (lo_ms, hi_ms))
        window = self._window(ticker, lo, hi, daily, int(multiplier))
        offset = int(offset)
        page = window.iloc[offset : offset + self.page_size]
        rows = [
            {"v": float(v), "vw": c, "o": o, "c": c, "h": h, "l": low, "t": int(t.value // 1_000_000), "n": 1}
            for t, o, h, low, c, v in zip(
                page["timestamp"], page["open"], page["high"], page["low"], page["close"], page["volume"]
            )
        ]
        body = {
            "ticker": ticker,
            "queryCount": len(rows),
            "resultsCount": len(rows),
            "adjusted": True,
            "status": "OK",
            "request_id": "r3",
        }
        if rows:
            body["results"] = rows
        if offset + self.page_size < len(window):
            body["next_url"] = f"https://api.massive.com{path}?cursor={offset + self.page_size}.{adjusted}"
        return handler._send(200, body)


def _daily(frame: pd.DataFrame) -> pd.DataFrame:
    """Daily bars stamped at midnight New York time (in UTC), as both vendors stamp them."""
    local = frame.assign(day=pd.DatetimeIndex(frame["timestamp"]).tz_convert(NY).normalize())
    grouped = local.groupby("day", sort=True)
    out = pd.DataFrame(
        {
            "open": grouped["open"].first(),
            "high": grouped["high"].max(),
            "low": grouped["low"].min(),
            "close": grouped["close"].last(),
            "volume": grouped["volume"].sum(),
        }
    )
    out.insert(0, "timestamp", pd.DatetimeIndex(out.index).tz_convert("UTC"))
    return out.reset_index(drop=True)


def _resample(frame: pd.DataFrame, minutes: int) -> pd.DataFrame:
    """N-minute bars aligned to the clock, as the vendors aggregate them."""
    local = frame.set_index("timestamp")
    out = local.resample(f"{minutes}min", label="left", closed="left").agg(
        {"open": "first", "high": "max", "low": "min", "close": "last", "volume": "sum"}
    )
    return out.dropna().reset_index()
