"""Reads that name the file: a missing, half-written or corrupt file becomes one `RunFileError`
naming it and what is wrong (`read_json`, `read_toml`, `read_parquet`, ...)."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trader.rundir.files import RunFileError


def read_json_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete line of a JSON-lines log, oldest first ([] when there is no log);
    a line torn by a crash is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = []
    for line in read_text(path).splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return lines


def read_text(path: str | os.PathLike[str]) -> str:
    """A UTF-8 text file, or `RunFileError` naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunFileError(f"{path}: not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunFileError(f"{path}: unreadable ({err})") from None


def read_json(path: str | os.PathLike[str], *, version: int | None = None) -> Any:
    """A JSON file, or `RunFileError` naming it. With ``version``, the file must be an
    object whose ``format_version`` is that version."""
    path = Path(path)
    try:
        values = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise RunFileError(f"{path}: not valid JSON ({err})") from None
    if version is not None:
        found = values.get("format_version") if isinstance(values, dict) else None
        if found != version:
            raise RunFileError(f"{path}: format_version {found!r}, this library reads {version}")
    return values


def read_toml(path: str | os.PathLike[str], *, missing_ok: bool = False) -> dict[str, Any]:
    """A TOML file as a dict, or `RunFileError` naming it ({} when missing and ``missing_ok``)."""
    path = Path(path)
    if missing_ok and not path.is_file():
        return {}
    try:
        return tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as err:
        raise RunFileError(f"{path}: not valid TOML ({err})") from None


def read_parquet(
    path: str | os.PathLike[str], columns: tuple[str, ...] | None = None, optional: tuple[str, ...] = ()
) -> Any:
    """A Parquet file (optionally some columns) as a pandas DataFrame, or `RunFileError` naming it.

    ``optional``: more columns, read where the file has them (a column added to a file
    after older runs were written)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise RunFileError(f"{path}: not found")
    try:
        if columns and optional:
            present = set(pq.read_schema(path).names)
            columns = (*columns, *(c for c in optional if c in present))
        return pq.read_table(path, columns=list(columns) if columns else None).to_pandas()
    except Exception as err:  # pyarrow raises several types for truncated or foreign files
        raise RunFileError(f"{path}: not a readable Parquet file ({type(err).__name__}: {err})") from None


def require_keys(mapping: Mapping[str, Any], keys: tuple[str, ...], path: str | os.PathLike[str]) -> None:
    """`RunFileError` naming the first of ``keys`` missing from ``mapping`` (read from ``path``)."""
    for key in keys:
        if key not in mapping:
            raise RunFileError(f"{path}: no {key!r} entry")
