"""The HTML report of a process: one self-contained file.

`gather` (pmm.report.data) collects what the module and pmd's database hold
of a process into a `ReportData`; `render` (pmm.report.html) makes it one
HTML page with plotly.js inlined (vendored in `vendor/`, MIT), its figures
(pmm.report.figures) as JSON in the page, no network needed to view it; `write_report` writes it
whole or not at all. `site_stacks` (pmm.report.stacks) is the one place that
names the sites' frames.
"""

from pmm.report.data import GROWING_SITES, ReportData, gather
from pmm.report.figures import flame_figure, memory_figure
from pmm.report.html import (
    PLOTLY_SHA256,
    PLOTLY_VERSION,
    DamagedVendorFile,
    plotly_js,
    render,
    verdict_of,
    write_report,
)
from pmm.report.stacks import StackFrame, site_stacks

__all__ = [
    "GROWING_SITES",
    "PLOTLY_SHA256",
    "PLOTLY_VERSION",
    "DamagedVendorFile",
    "ReportData",
    "StackFrame",
    "flame_figure",
    "gather",
    "memory_figure",
    "plotly_js",
    "render",
    "site_stacks",
    "verdict_of",
    "write_report",
]
