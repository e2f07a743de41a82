"""An engine's start-up watched from its unit: whether systemd or the engine's own log says it failed, and its
progress (journal lines that move, a stuck engine's heartbeat is no progress), for engine_client.wait_healthy.
Reads only: systemctl show and journalctl of the unit's current invocation, through the caller's run_command."""

import re

from .engine_adapters import adapter, phase_of, read_log
from .env_files import redact_line
from .log_lines import JOURNAL_JSON, journal_entries


class StartWatch:
    """What one start-up has shown so far: its invocation, journal cursor, phase, crash and (redacted) lines."""

    def __init__(self, run_command, engine, unit, secrets):
        self.run, self.engine, self.unit, self.secrets = run_command, engine, unit, secrets
        self.stuck = adapter(engine)["stuck_lines"]
        self.invocation = self.cursor = self.phase = self.crash = self.marker = self.last = None
        self.lines = []

    def unit_failed(self):
        """Why the start failed, from systemd (failed, inactive or waiting to restart) or a crash in its log."""
        if not self.unit:
            return None
        _, out, _ = self.run(["systemctl", "show", "-p", "ActiveState,SubState", "--", self.unit])
        state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        where = f" (phase {self.phase})" if self.phase else ""
        # auto-restart: the engine exited and systemd waits to start it again (Restart=on-failure/always)
        if state.get("ActiveState") in ("failed", "inactive") or state.get("SubState") == "auto-restart":
            self.lines = (self.lines + (self.new_lines() or []))[-2000:]  # its last lines, logged as it died
            # a process that exits at once can have its lines stored before journald knew its invocation: the
            # unit's own last lines then (the failed start is the unit's latest)
            self.lines = self.lines or self.unit_tail()
            read = read_log(self.engine, "\n".join(self.lines)) if self.lines else {}
            cause = read.get("cause")
            self.phase = read.get("crash_phase") or phase_of(self.engine, self.lines) or self.phase
            where = f" (phase {self.phase})" if self.phase else ""
            return (f"{self.unit} is {state.get('ActiveState')}/{state.get('SubState')}{where}"
                    + (f"; cause: {cause}" if cause else ""))
        if self.crash:
            return f"{self.unit} logged a crash{where} with its process alive; cause: {self.crash}"
        return None

    def new_lines(self):
        """The unit's current invocation's journal lines since the last read, redacted."""
        if not self.invocation:
            _, out, _ = self.run(["systemctl", "show", "-p", "InvocationID", "--value", "--", self.unit])
            self.invocation = out.strip()
        if not self.invocation:
            return None
        # messages as journald stores them (a progress bar is never "[N blob data]")
        argv = ["journalctl", f"_SYSTEMD_INVOCATION_ID={self.invocation}", *JOURNAL_JSON, "--no-pager"]
        argv += [f"--after-cursor={self.cursor}"] if self.cursor else []
        _, out, _ = self.run(argv)
        entries = journal_entries(out)
        self.cursor = next((entry["cursor"] for entry in reversed(entries) if entry["cursor"]), None) or self.cursor
        return [redact_line(line, self.secrets) for entry in entries for line in entry["lines"]]

    def unit_tail(self, count=200):
        """The unit's last journal lines whatever their invocation field, redacted."""
        _, out, _ = self.run(["journalctl", "-u", self.unit, "-n", str(count), *JOURNAL_JSON, "--no-pager"])
        return [redact_line(line, self.secrets) for entry in journal_entries(out) for line in entry["lines"]]

    def progress(self):
        """(marker, last line) of the start-up's progress; the new lines also give the phase and any crash."""
        new = self.new_lines()
        if new is None:
            return None, None
        self.lines = (self.lines + new)[-2000:]
        self.phase = phase_of(self.engine, new) or self.phase
        if new:  # the reading changes only with new lines; an idle poll reads nothing again
            read = read_log(self.engine, "\n".join(self.lines))
            if read["crashed"]:
                self.crash = read["cause"] or read["crash"]
        moving = [line for line in new if not any(re.search(x, line) for x in self.stuck)]
        if not moving:
            return self.marker, self.last
        self.marker, self.last = self.cursor, moving[-1][:200]
        return self.marker, (f"[{self.phase}] " if self.phase else "") + self.last
