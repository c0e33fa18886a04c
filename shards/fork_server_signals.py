"""Imported first by the fork server (`shards.local_transport.FORK_SERVER_PRELOAD`): from
here on the server ignores SIGINT, SIGTERM and SIGHUP, and so does every process it forks.

Ctrl+C in a terminal sends SIGINT to the whole process group. multiprocessing's fork
server ignores it too, but only once its preload is done: a Ctrl+C during the seconds it
spends importing torch and transformers killed it with a traceback, and the gateway's
start then failed on its dead socket with another. The gateway itself handles Ctrl+C
(during its start it kills what the start began, else it stops everything in order); its
workers and the child that prepares the model must not die under it meanwhile.
SIGTERM likewise: systemd (KillMode=control-group), `timeout` and `kill -TERM -PGID` send
it to the whole group, and workers that died at once failed the streams the gateway's
graceful stop was finishing (`worker_died`). SIGHUP too: a terminal closed after Ctrl+C,
or a hangup after `systemctl stop`, reaches the whole group, and workers it killed left
the gateway's stop waiting for ever on the streams they held (QA73); the gateway itself
reloads on SIGHUP, or ignores it while it stops. The gateway stops its workers by
message, then SIGKILL; a worker whose gateway is gone ends when its pipe closes.

A gateway killed outright (SIGKILL, the OOM killer) cannot stop the server: from here on
the server ends with its gateway (shards/parent_death.py), also while it still imports
torch (it went on for 20-30 s, QA95); the workers it forked are not tied to it.

The server starts with SIGHUP blocked (shards.hangups_held), so a group's
SIGHUP (a terminal's hang-up, repeated) before this import, while the interpreter starts,
cannot kill it, as it did (QA145). Here SIGHUP is ignored, then unblocked: one pending is
discarded, and every process it forks gets SIGHUP ignored, not blocked.

NOTE: the import's side effect is the point of this module; nothing else imports it.
"""
from shards.hangups_held import ignore_group_signals
from shards.parent_death import die_with_parent

ignore_group_signals()
die_with_parent()
