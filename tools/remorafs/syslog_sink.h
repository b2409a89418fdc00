// The background daemon's default log: the lines of remora's logger (protocol's base/log.h)
// passed on to syslog(3), daemon facility, each at its level.
#pragma once

namespace remora::fs {

// Starts a thread that reads log lines from a pipe and sends them to syslog as `ident`;
// returns the pipe's write end for SetLogFd (-1 if no pipe could be made). The thread never
// takes SIGTERM, SIGINT, SIGHUP or SIGQUIT: they must reach the thread that runs the FUSE
// loop. Call it after forking into the background; it runs until the process exits.
int StartSyslogSink(const char* ident);

}  // namespace remora::fs
