"""Presentation: results as lines of text (:mod:`lib.present.text`), display tables
(:mod:`lib.present.tables`) and charts (:mod:`lib.present.charts`, the only package that imports
Altair). Nothing here decides anything; it shows what the lower layers computed.
"""
