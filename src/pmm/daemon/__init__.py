"""pmd's engine: it records memory samples of processes into SQLite
(pmm.store) and raises an alert when the trend detector (pmm.analysis.trend) says LEAK.

Samples come from the module's generic-netlink events (pmm.kernel.genl) and, for
the processes in `Options.pids` the module does not sample, from /proc.
`serve(options)` is the whole daemon: it opens the database (StoreError if
it cannot), runs the loop until SIGTERM or SIGINT and returns the exit
status. Log records go to the "pmd" logger; they quote what monitored
processes named themselves, so a handler should escape control characters
(pmm.text.printable).

The modules, one concern each:

- loop: `Daemon`, the loop that owns the parts below, and `serve`;
- options: `Options`, what pmd's command line sets;
- events: the module's events; processes: each process's state, the /proc
  samples of --pid targets, exits found missing; procstate: that state;
- detector: when the detector runs, its verdicts and LEAK alerts;
  kindtrack: the kind of growth an alert names;
- worker: the thread that reads the module and symbolizes; harvests:
  post-mortem records of exited processes; scans: scans at a LEAK alert;
- rows: the rows waiting to be written, batched, retried, bounded;
  retention: deleting what is older than `Options.retain`;
- metrics: the snapshot's readers, the HTTP endpoint and textfile;
- sdnotify, journal: the service manager's notifications and log priorities.
"""

from pmm.daemon.loop import Daemon, serve
from pmm.daemon.options import DEFAULT_MIN_SPAN, DEFAULT_RETAIN, Options

__all__ = ["DEFAULT_MIN_SPAN", "DEFAULT_RETAIN", "Daemon", "Options", "serve"]
