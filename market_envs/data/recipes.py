"""Dataset recipes (TOML) and `load`: a named data set, built once, then read from cache.

A recipe says what a data set is: its source, universe, interval, date range, split
dates and benchmark. The schema (see datasets/README.md for the full description):

    name = "nasdaq100-minute"          # defaults to the file name
    description = "..."
    source = "yahoo"                   # synthetic | files | yahoo | alpaca | polygon
    interval = "1min"
    start = "today-29d"                # ISO date/time, or "today", "today-Nd"
    end = "today"                      # exclusive
    train_end = "today-10d"            # train [start, train_end)
    val_end = "today-5d"               # validation [train_end, val_end), test [val_end, end)
    benchmark = "QQQ"                  # optional
    tickers = ["AAPL", ...]            # the universe (yahoo, files, alpaca, polygon); optional for files
    membership = "members.csv"         # or a point-in-time universe: ticker, from, to (see membership.py)

    [universe]                         # optional documentation of the universe
    name = "NASDAQ-100"
    as_of = "2024-12-23"
    note = "survivorship bias: ..."

    [yahoo]                            # options of the source, passed to its provider
    drop_missing = true

Recipes are found by path, or by name in the repository's `datasets/` folder (found
relative to this package, so it works from a source checkout and an editable
install) and in `<prefix>/share/podracer-trader/datasets` (a wheel install).

`load(recipe, **overrides)` resolves the recipe, returns the cached panel when there
is one (a cache hit never touches the network), else builds it from its source,
validates it, fits normalisation on the training period only, sets `meta`
(train_end, val_end, recipe, source) and caches it.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import warnings
import tomllib
from collections.abc import Callable
from typing import Any
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import date, datetime
from pathlib import Path

import pandas as pd

from market_envs.data.cache import DataCache, cache_key
from market_envs.data.panel import EXCHANGE_TZ, DataError, MarketData
from market_envs.errors import ConfigError

SOURCES = ("synthetic", "files", "yahoo", "alpaca", "polygon")
ENV_RECIPES = "PODRACER_RECIPES_PATH"
_RELATIVE = re.compile(r"^today\s*(?:([+-])\s*(\d+)\s*d)?$")

Progress = Callable[[str], None]


def recipe_dirs() -> list[Path]:
    """Folders searched for recipes by name, in order.

    $PODRACER_RECIPES_PATH (os.pathsep-separated), the repository's `datasets/`
    (beside the package in a checkout or editable install), and the wheel's copy in
    `<prefix>/share/podracer-trader/datasets`.
    """
    extra = [Path(p).expanduser() for p in os.environ.get(ENV_RECIPES, "").split(os.pathsep) if p]
    repo = Path(__file__).resolve().parents[2] / "datasets"
    wheel = Path(sys.prefix) / "share" / "podracer-trader" / "datasets"
    return [d for d in (*extra, repo, wheel) if d.is_dir()]


def available_recipes() -> dict[str, Path]:
    """Recipe name -> file, for every recipe found by name (first folder wins)."""
    found: dict[str, Path] = {}
    for folder in recipe_dirs():
        for file in sorted(folder.glob("*.toml")):
            found.setdefault(file.stem, file)
    return found


def resolve_date(value, today: pd.Timestamp | None = None) -> str:
    """A recipe date as an ISO string: a TOML date/datetime, an ISO string, or "today-Nd".

    Relative dates count calendar days back from today's date in exchange time.
    """
    if isinstance(value, (date, datetime)):
        return pd.Timestamp(value).isoformat()
    text = str(value).strip()
    match = _RELATIVE.match(text)
    if match:
        base = today if today is not None else pd.Timestamp.now(tz=EXCHANGE_TZ)
        day = (base.tz_convert(EXCHANGE_TZ) if base.tzinfo else base).tz_localize(None).normalize()
        days = int(match.group(2) or 0) * (-1 if match.group(1) == "-" else 1)
        return (day + pd.Timedelta(days=days)).date().isoformat()
    try:
        pd.Timestamp(text)
    except ValueError:
        raise ConfigError(f"date {value!r} is neither ISO (2024-01-31) nor relative (today-30d)") from None
    return text


def _exchange_time(text: str) -> pd.Timestamp:
    stamp = pd.Timestamp(text)
    return stamp.tz_localize(EXCHANGE_TZ) if stamp.tzinfo is None else stamp.tz_convert(EXCHANGE_TZ)


@dataclass(frozen=True)
class Recipe:
    """A data set recipe (one TOML file).

    :param name: the data set's name (file stem unless set).
    :param description: one paragraph for humans.
    :param source: "synthetic", "files", "yahoo", "alpaca" or "polygon".
    :param interval: bar length ("1min", "5min", "1D").
    :param start: first day, ISO or relative ("today-29d").
    :param end: end, exclusive.
    :param train_end: end of the training period (exclusive), start of validation.
    :param val_end: end of validation, start of the test period.
    :param benchmark: benchmark symbol (e.g. "QQQ"); None for the source's default.
    :param tickers: the universe, in order; None lets the source decide.
    :param membership: a membership file (ticker, from, to; relative to the recipe
        file): the universe is every ticker that was a member in the window, each
        tradable only while a member (out of the index, a position in it may only
        shrink). Excludes `tickers`.
    :param universe: documentation of the universe (name, as_of, note).
    :param options: the source's own table (`[synthetic]`, `[files]`, `[yahoo]`, `[alpaca]`, `[polygon]`).
    :param path: the file the recipe came from, None if built in code.
    """

    name: str
    source: str
    start: str
    end: str
    train_end: str
    val_end: str
    interval: str = "1min"
    description: str = ""
    benchmark: str | None = None
    tickers: tuple[str, ...] | None = None
    membership: str | None = None
    universe: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    path: Path | None = None

    def __post_init__(self) -> None:
        where = f"recipe {self.name!r}" + (f" ({self.path})" if self.path else "")
        if self.source not in SOURCES:
            raise ConfigError(f"{where}: source {self.source!r} is not one of {list(SOURCES)}")
        if self.tickers is not None and len(set(self.tickers)) != len(self.tickers):
            dupes = sorted({t for t in self.tickers if self.tickers.count(t) > 1})
            raise ConfigError(f"{where}: tickers listed twice: {dupes}")
        if self.membership is not None and self.tickers is not None:
            raise ConfigError(f"{where}: give tickers or a membership file, not both (the file names the universe)")
        if self.membership is not None and self.source == "synthetic":
            raise ConfigError(f"{where}: a membership file needs real tickers; source 'synthetic' has none")

    @property
    def top_level_keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self) if f.name not in ("options", "path", "universe"))

    def with_overrides(self, **overrides) -> Recipe:
        """A copy with top-level fields or source options replaced; unknown keys refused."""
        top, opts = {}, dict(self.options)
        for key, value in overrides.items():
            if key in self.top_level_keys:
                top[key] = tuple(value) if key == "tickers" and value is not None else value
            elif key in _source_option_names(self.source):
                opts[key] = value
            else:
                raise ConfigError(
                    f"recipe {self.name!r}: unknown override {key!r}; recipe keys are "
                    f"{list(self.top_level_keys)}, {self.source} options "
                    f"{list(_source_option_names(self.source))}"
                )
        return replace(self, options=opts, **top)

    def resolved(self, today: pd.Timestamp | None = None) -> Recipe:
        """Relative dates made absolute, and the split checked to be in order."""
        dates = {k: resolve_date(getattr(self, k), today) for k in ("start", "train_end", "val_end", "end")}
        stamps = {k: _exchange_time(v) for k, v in dates.items()}
        order = ("start", "train_end", "val_end", "end")
        for a, b in zip(order, order[1:]):
            if not stamps[a] < stamps[b]:
                raise ConfigError(
                    f"recipe {self.name!r}: dates out of order: {a} {dates[a]} must be before {b} {dates[b]}"
                )
        return replace(self, **dates)

    def to_dict(self) -> dict:
        """The recipe as plain data (for the cache metadata and `trader data info`)."""
        out = asdict(self)
        out["tickers"] = None if self.tickers is None else list(self.tickers)
        out["path"] = None if self.path is None else str(self.path)
        return out

    def membership_path(self) -> Path:
        """The membership file, relative paths read from the recipe's folder."""
        return self.file_path(self.membership, "membership file")

    def file_path(self, value: Any, what: str) -> Path:
        """A file the recipe names (a membership or renames file): relative paths are read
        from the recipe's folder; a missing file is one `ConfigError` naming it."""
        path = Path(str(value)).expanduser()
        if not path.is_absolute() and self.path is not None:
            path = self.path.parent / path
        if not path.is_file():
            raise ConfigError(f"recipe {self.name!r}: {what} {path} does not exist")
        return path

    def key(self) -> str:
        """The cache key of the resolved recipe: everything that changes the panel."""
        payload = {k: v for k, v in self.to_dict().items() if k not in ("description", "path", "universe")}
        payload["options"] = {k: v for k, v in self.options.items() if k not in _UNKEYED_OPTIONS}
        if self.source == "files":
            payload["files"] = _files_fingerprint(self)
        if self.membership is not None:
            payload["membership"] = hashlib.sha256(self.membership_path().read_bytes()).hexdigest()
            # the panel marks its leavers' bars (`MarketData.reducible`); entries cached before it did are not read
            payload["leavers"] = "reducible"
        if self.options.get("renames"):
            payload["renames"] = hashlib.sha256(
                self.file_path(self.options["renames"], "renames file").read_bytes()
            ).hexdigest()
        return cache_key({"kind": "panel", **payload})


def _source_option_names(source: str) -> tuple[str, ...]:
    """Options each source's table may hold (beyond those written in the recipe)."""
    return {
        "synthetic": ("n_tickers", "seed", "edge", "model"),
        "files": ("path", "assume_tz", "made_by"),
        "yahoo": ("drop_missing",),
        "alpaca": ("feed", "outside_session", "drop_missing", "url", "retries", "backoff_s"),
        "polygon": ("outside_session", "drop_missing", "url", "retries", "backoff_s", "renames"),
    }[source]


_UNKEYED_OPTIONS = ("made_by",)
"""Source options that do not change the panel (left out of the cache key)."""

_TOP_LEVEL = {
    "name",
    "description",
    "source",
    "interval",
    "start",
    "end",
    "train_end",
    "val_end",
    "benchmark",
    "tickers",
    "membership",
}


def write_recipe(recipe: Recipe, path: str | Path) -> Path:
    """Write `recipe` as a recipe file that `find_recipe` reads back equal (but its ``path``).

    Files it names (a membership or renames file) are written as absolute paths, so the
    new file finds them from any folder. Written whole or not at all."""
    import tomli_w

    path = Path(path)
    values: dict[str, Any] = {key: getattr(recipe, key) for key in recipe.top_level_keys}
    if recipe.membership is not None:
        values["membership"] = str(recipe.membership_path())
    if values["tickers"] is not None:
        values["tickers"] = list(values["tickers"])
    options = dict(recipe.options)
    if options.get("renames"):
        options["renames"] = str(recipe.file_path(options["renames"], "renames file"))
    document = {k: v for k, v in values.items() if v is not None}
    if recipe.universe:
        document["universe"] = dict(recipe.universe)
    if options:
        document[recipe.source] = options
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(tomli_w.dumps(document))
    tmp.replace(path)
    return path


def parse_recipe(text: str, path: Path | None = None) -> Recipe:
    """A recipe from TOML text; unknown keys and missing required keys are refused."""
    where = str(path) if path else "recipe"
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{where}: not valid TOML: {err}") from None
    source = raw.get("source")
    if "source" in raw and source not in SOURCES:
        raise ConfigError(f"{where}: source {source!r} is not one of {list(SOURCES)}")
    tables = {k for k, v in raw.items() if isinstance(v, dict)}
    unknown = set(raw) - _TOP_LEVEL - tables
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; expected {sorted(_TOP_LEVEL)} and tables")
    odd_tables = tables - {"universe", *SOURCES}
    if odd_tables:
        raise ConfigError(f"{where}: unknown table(s) {sorted(odd_tables)}; expected [universe] or [{source}]")
    missing = [k for k in ("source", "start", "end", "train_end", "val_end") if k not in raw]
    if missing:
        raise ConfigError(f"{where}: missing key(s) {missing}")
    other_sources = (tables & set(SOURCES)) - {source}
    if other_sources:
        raise ConfigError(f"{where}: table(s) {sorted(other_sources)} do not belong to source {source!r}")
    odd_options = set(raw.get(str(source), {})) - set(_source_option_names(str(source)))
    if odd_options:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(odd_options)} in [{source}]; "
            f"expected {list(_source_option_names(str(source)))}"
        )
    tickers = raw.get("tickers")
    universe = dict(raw.get("universe", {}))
    return Recipe(
        name=str(raw.get("name", path.stem if path else "recipe")),
        description=str(raw.get("description", "")).strip(),
        source=str(source),
        interval=str(raw.get("interval", "1min")),
        start=raw["start"],
        end=raw["end"],
        train_end=raw["train_end"],
        val_end=raw["val_end"],
        benchmark=raw.get("benchmark"),
        tickers=None if tickers is None else tuple(str(t) for t in tickers),
        membership=None if raw.get("membership") is None else str(raw["membership"]),
        universe=universe,
        options=dict(raw.get(str(source), {})),
        path=path,
    )


def find_recipe(name_or_path: str | Path | Recipe) -> Recipe:
    """A recipe by path (an existing file) or by name (see `recipe_dirs`)."""
    if isinstance(name_or_path, Recipe):
        return name_or_path
    candidate = Path(name_or_path).expanduser()
    if candidate.is_file():
        return parse_recipe(candidate.read_text(), candidate.resolve())
    known = available_recipes()
    text = str(name_or_path)
    stem = text.removesuffix(".toml")
    if "/" not in text and stem in known:
        return parse_recipe(known[stem].read_text(), known[stem])
    raise ConfigError(
        f"no recipe {str(name_or_path)!r}: not a file, and not one of {sorted(known)} "
        f"(searched {[str(d) for d in recipe_dirs()]})"
    )


# ------------------------------------------------------------------ building
def _files_fingerprint(recipe: Recipe) -> list:
    """Name, size and mtime of the source files, so edited files rebuild the panel."""
    from market_envs.data.files import list_data_files

    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in list_data_files(_files_path(recipe))]


def _files_path(recipe: Recipe) -> Path:
    """The recipe's files (relative paths read from the recipe's folder). Files that a command
    writes (``[files] made_by``, e.g. "make real-data") and that are not there yet are one
    `DataError` naming that command."""
    if "path" not in recipe.options:
        raise ConfigError(f"recipe {recipe.name!r}: source 'files' needs [files] path = ...")
    path = Path(recipe.options["path"]).expanduser()
    if not path.is_absolute() and recipe.path is not None:
        path = recipe.path.parent / path
    made_by = recipe.options.get("made_by")
    if made_by and not path.exists():
        raise DataError(f"recipe {recipe.name!r}: its files {path} are not there yet; `{made_by}` writes them")
    return path


def _build_synthetic(recipe: Recipe, **_) -> MarketData:
    from market_envs.data.synthetic import synthetic

    options = dict(recipe.options)
    if isinstance(options.get("model"), dict):
        from market_envs.data.synthetic import MarketModel

        options["model"] = MarketModel(**options["model"])
    return synthetic(start=recipe.start, end=recipe.end, interval=recipe.interval, **options)


def _build_files(recipe: Recipe, **_) -> MarketData:
    from market_envs.data.files import read_files

    return read_files(
        _files_path(recipe),
        tickers=None if recipe.tickers is None else list(recipe.tickers),
        assume_tz=recipe.options.get("assume_tz"),
        benchmark=recipe.benchmark,
        name=recipe.name,
    )


def _build_yahoo(recipe: Recipe, *, store: DataCache | None, download, progress, **_) -> MarketData:
    from market_envs.data.yahoo import yahoo

    if not recipe.tickers:
        raise ConfigError(f"recipe {recipe.name!r}: source 'yahoo' needs a tickers list")
    return yahoo(
        list(recipe.tickers),
        recipe.start,
        recipe.end,
        interval=recipe.interval,
        benchmark=recipe.benchmark if recipe.benchmark is not None else "QQQ",
        download=download,
        cache=store if store is not None else False,
        drop_missing=bool(recipe.options.get("drop_missing", False)),
        name=recipe.name,
        progress=progress,
    )


VENDOR_SOURCES = ("alpaca", "polygon")


def vendor_for(recipe: Recipe):
    """The recipe's vendor client (alpaca or polygon); its keys are checked here, before
    anything is printed or fetched."""
    from market_envs.data.vendors import Backoff

    options = recipe.options
    try:
        retries, base_s = int(options.get("retries", 5)), float(options.get("backoff_s", 1.0))
    except (TypeError, ValueError):
        raise ConfigError(
            f"recipe {recipe.name!r}: [{recipe.source}] retries must be an integer and backoff_s a number of seconds"
        ) from None
    backoff = Backoff(retries=retries, base_s=base_s)
    if recipe.source == "alpaca":
        from market_envs.data.alpaca import AlpacaBars

        return AlpacaBars(
            recipe.interval, feed=str(options.get("feed", "sip")), url=options.get("url"), backoff=backoff
        )
    from market_envs.data.membership import read_renames
    from market_envs.data.polygon import PolygonBars

    renames = read_renames(recipe.file_path(options["renames"], "renames file")) if options.get("renames") else None
    return PolygonBars(recipe.interval, url=options.get("url"), backoff=backoff, renames=renames)


def _build_vendor(recipe: Recipe, *, store: DataCache | None, progress, bar=None, vendor=None, **_) -> MarketData:
    """alpaca or polygon: chunked, cached, resumable downloads (see `vendors.vendor_panel`)."""
    from market_envs.data.vendors import vendor_panel

    if not recipe.tickers:
        raise ConfigError(f"recipe {recipe.name!r}: source {recipe.source!r} needs a tickers list")
    return vendor_panel(
        vendor or vendor_for(recipe),
        list(recipe.tickers),
        recipe.start,
        recipe.end,
        interval=recipe.interval,
        benchmark=recipe.benchmark,
        store=store,
        outside_session=str(recipe.options.get("outside_session", "drop")),
        drop_missing=bool(recipe.options.get("drop_missing", False)),
        name=recipe.name,
        bar=bar,
        progress=progress,
    )


_BUILDERS = {
    "synthetic": _build_synthetic,
    "files": _build_files,
    "yahoo": _build_yahoo,
    "alpaca": _build_vendor,
    "polygon": _build_vendor,
}


def build(
    recipe: Recipe,
    *,
    store: DataCache | None = None,
    download: Callable | None = None,
    progress: Progress | None = None,
    bar=None,
) -> MarketData:
    """Build a resolved recipe's panel from its source (no panel cache), split-checked,
    with training-period normalisation and `meta` set.

    :param bar: a `chunks.DownloadBar` shown while a vendor (alpaca, polygon) downloads.
    """
    key_recipe, members = recipe, None
    if recipe.membership is not None:
        from market_envs.data.membership import members_in_window, read_membership

        members = read_membership(recipe.membership_path())
        universe = members_in_window(members, recipe.start, recipe.end)
        if not universe:
            raise ConfigError(
                f"recipe {recipe.name!r}: no ticker of {recipe.membership_path()} was a member in {recipe.start} .. {recipe.end}"
            )
        recipe = replace(recipe, tickers=tuple(universe), membership=None)
    extra = {"vendor": vendor_for(recipe)} if recipe.source in VENDOR_SOURCES else {}  # keys checked first
    if members is None:
        _warn_survivorship(recipe)
    else:
        _warn_uncovered(key_recipe, members)
    if progress:
        progress(f"building {recipe.name!r} from {recipe.source} ({recipe.start} .. {recipe.end}, {recipe.interval})")
    data = _BUILDERS[recipe.source](recipe, store=store, download=download, progress=progress, bar=bar, **extra)
    # The data set is its recipe's bars: a source's earlier bars are no `lookback` of it, which the
    # cache does not keep, so a built panel and a cached one observe and charge their first bars alike.
    data = replace(data.slice(recipe.start, recipe.end), lookback=None)
    if members is not None:
        from market_envs.data.membership import apply_membership

        data = apply_membership(data, members, recipe.start, recipe.end, source=Path(str(key_recipe.membership)).name)
    train, _, _ = data.split(recipe.train_end, recipe.val_end)  # raises if a period is empty
    meta = {
        **data.meta,
        "train_end": recipe.train_end,
        "val_end": recipe.val_end,
        "recipe": recipe.name,
        "source": recipe.source,
        "recipe_key": key_recipe.key(),
    }
    return replace(data, name=recipe.name, meta=meta, feature_mean=train.feature_mean, feature_std=train.feature_std)


def load(
    recipe: str | Path | Recipe,
    *,
    data_dir: str | Path | None = None,
    cache: bool = True,
    refresh: bool = False,
    download: Callable | None = None,
    progress: Progress | None = None,
    device: str = "cpu",
    bar=None,
    **overrides,
) -> MarketData:
    """The panel of a recipe (by name or path): from the cache, else built and cached.

    :param recipe: a recipe name ("synthetic-minute"), a path to a TOML file, or a `Recipe`.
    :param data_dir: the data directory; default $PODRACER_DATA_DIR or the user cache.
    :param cache: read and write the cache (False: build in memory only).
    :param refresh: rebuild even when cached (downloaded chunks are still reused).
    :param download: the yahoo download function (tests inject recorded responses).
    :param progress: called with one line per step, for the CLI.
    :param device: where the returned tensors live.
    :param bar: a `chunks.DownloadBar` shown while a vendor (alpaca, polygon) downloads.
    :param overrides: recipe keys (start, end, train_end, val_end, tickers, ...) or
        source options (n_tickers, seed, path, drop_missing, ...) to replace.
    """
    resolved = find_recipe(recipe).with_overrides(**overrides).resolved()
    store = DataCache(data_dir) if cache else None
    key = resolved.key()
    if store is not None and not refresh and store.has_panel(key):
        if progress:
            progress(f"cache hit: {store.panel_dir(key)}")
        return store.load_panel(key, device)
    data = build(resolved, store=store, download=download, progress=progress, bar=bar)
    if store is not None:
        folder = store.save_panel(key, data, extra={"recipe": resolved.to_dict()})
        if progress:
            progress(f"cached: {folder}")
    return data.to(device)


def _warn_survivorship(recipe: Recipe) -> None:
    """Warn when a fixed ticker list is applied to a window more than a year from its date."""
    from market_envs.data.membership import SURVIVORSHIP_DAYS, survivorship_gap

    as_of = recipe.universe.get("as_of")
    if as_of is None or recipe.tickers is None or recipe.source == "synthetic":
        return
    gap = survivorship_gap(as_of, recipe.start, recipe.end)
    if gap > SURVIVORSHIP_DAYS:
        warnings.warn(
            f"recipe {recipe.name!r}: survivorship bias: its tickers are the universe as of {as_of}, and the "
            f"window {recipe.start} .. {recipe.end} reaches {gap} days ({gap / 365.25:.1f} years) from that date; "
            "firms that joined or left in between are wrong. Name a point-in-time membership file (membership = ...)",
            UserWarning,
            stacklevel=3,
        )


def _warn_uncovered(recipe: Recipe, members: Any) -> None:
    """Warn when the window reaches past the dates the membership file covers."""
    from market_envs.data.membership import SURVIVORSHIP_DAYS, uncovered_days

    days = uncovered_days(members, recipe.start, recipe.end)
    if days > SURVIVORSHIP_DAYS:
        first, last = (f"{day:%Y-%m-%d}" for day in members.attrs["covers"])
        warnings.warn(
            f"recipe {recipe.name!r}: survivorship bias: its membership file covers {first} .. {last}, and "
            f"{days} days ({days / 365.25:.1f} years) of the window {recipe.start} .. {recipe.end} lie outside; "
            "there the members of the nearest covered day stand in for the index",
            UserWarning,
            stacklevel=3,
        )


def cached_panel_info(
    recipe: str | Path | Recipe, data_dir: str | Path | None = None, **overrides
) -> tuple[Recipe, str, dict | None]:
    """The resolved recipe, its cache key and its cached metadata (None if not built)."""
    resolved = find_recipe(recipe).with_overrides(**overrides).resolved()
    key = resolved.key()
    return resolved, key, DataCache(data_dir).panel_meta(key)


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """Recipe keys from ``KEY=VALUE`` pairs (``trader data build --set``): VALUE is read
    as a TOML value (``3``, ``true``, ``["A", "B"]``), else kept as a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        out[key.strip()] = value
    return out
