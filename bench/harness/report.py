"""Tables: the header and the rows of a benchmark's text report from one list of columns, so a
title and its values cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    title: str
    width: int
    fmt: str = ""  # the values' format spec after the width, e.g. ".1f"
    align: str = ">"  # of the title and the values
    before: str | None = None  # the text before the column (default: the table's separator)


class Table:
    def __init__(self, *columns: Column, sep: str = " ") -> None:
        self.columns = columns
        self.sep = sep

    def _join(self, cells: list[str]) -> str:
        out = cells[0]
        for column, cell in zip(self.columns[1:], cells[1:], strict=True):
            out += (self.sep if column.before is None else column.before) + cell
        return out

    def header(self) -> str:
        return self._join([f"{c.title:{c.align}{c.width}}" for c in self.columns])

    def row(self, *values: object) -> str:
        cells = zip(self.columns, values, strict=True)
        return self._join([f"{value:{c.align}{c.width}{c.fmt}}" for c, value in cells])
