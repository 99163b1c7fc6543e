"""pmm: the library under pmctl and pmd.

Its layers, from the kernel up:
- `pmm.kernel`: the kernel interface (the module's ABI, device, events and
  /proc/pmm files; /proc/PID sampling and mappings) and the plain data it gives;
- `pmm.store`: pmd's SQLite database of samples, sites and exited processes;
- `pmm.analysis`: the leak detector, growth kinds, the leaks and statistics
  tables, and what `pmctl trend` and `pmctl leaks` show;
- `pmm.symbolize`: addresses to functions and lines, outliving the process;
- `pmm.report` (the HTML report) and `pmm.pprof` (pprof profiles);
- `pmm.daemon`: pmd's loop, metrics, sd_notify and journal.
Beside them, the hook's launchers (`run`, `attach`, `unreachable`) and small
shared pieces (`units`, `errors`, `output`, `text`, `files`). Errors are
`errors.PmmError`s; the front ends turn them into messages and exit codes.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pmm")
except PackageNotFoundError:  # a source tree without an install
    __version__ = "0.0.0+unknown"
