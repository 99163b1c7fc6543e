"""Log priorities the journal understands, for a daemon that logs to stderr.

Under systemd a service's stderr is a stream to journald, which reads a
leading "<N>" on each line as the line's syslog priority (SyslogLevelPrefix=,
on by default) and strips it: with it, `journalctl -p warning -u pmd` shows
pmd's warnings (leak alerts) and errors and leaves its info lines out.
systemd sets $JOURNAL_STREAM to "DEVICE:INODE" of that stream, so a program
knows its stderr goes to the journal when stderr's device and inode are
those (sd_journal_stream_fd(3), systemd.exec(7)); a program whose stderr was
redirected elsewhere keeps the plain format, each line after its local time
(the journal stamps its entries itself): JournalFormatter when
stream_is_journal(stderr), else PlainFormatter with timestamps.
"""

from __future__ import annotations

import logging
import os

from pmm.text import printable

__all__ = ["JournalFormatter", "PlainFormatter", "stream_is_journal", "syslog_priority"]

# syslog(3) priorities
LOG_CRIT, LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG = 2, 3, 4, 6, 7


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a logging level: CRITICAL 2, ERROR 3, WARNING 4,
    INFO 6, DEBUG (and below) 7; a level between two takes the lower one's."""
    if levelno >= logging.CRITICAL:
        return LOG_CRIT
    if levelno >= logging.ERROR:
        return LOG_ERR
    if levelno >= logging.WARNING:
        return LOG_WARNING
    if levelno >= logging.INFO:
        return LOG_INFO
    return LOG_DEBUG


def stream_is_journal(fd: int) -> bool:
    """Whether fd is the journal stream systemd gave this service: its device
    and inode are $JOURNAL_STREAM's ("DEVICE:INODE", decimal)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return st.st_dev == int(dev) and st.st_ino == int(ino)


class PlainFormatter(logging.Formatter):
    """"NAME: LEVEL: message", one line per record, control characters
    escaped: messages quote what monitored processes named themselves. With
    `timestamps`, after the record's local time ("2026-11-28T17:30:01+0100")."""

    def __init__(self, name: str, timestamps: bool = False) -> None:
        when = "%(asctime)s " if timestamps else ""
        super().__init__(f"{when}{name}: %(levelname)s: %(message)s",
                         datefmt="%Y-%m-%dT%H:%M:%S%z")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        """The record's line, its message's control characters escaped."""
        record.message = printable(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line: a traceback, if any, follows escaped (a
        journal line of its own would lose the record's priority)."""
        exc_info, stack_info = record.exc_info, record.stack_info
        record.exc_info = record.stack_info = None
        record.exc_text = None
        try:
            line = super().format(record)
        finally:
            record.exc_info, record.stack_info = exc_info, stack_info
        if exc_info:
            line += " " + printable(self.formatException(exc_info))
        if stack_info:
            line += " " + printable(self.formatStack(stack_info))
        return line


class JournalFormatter(PlainFormatter):
    """PlainFormatter's line after "<N>", the record's syslog priority, which
    journald takes off and keeps as the entry's priority."""

    def format(self, record: logging.LogRecord) -> str:
        """"<N>" and the plain line."""
        return f"<{syslog_priority(record.levelno)}>{super().format(record)}"

