#include "syslog_sink.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <syslog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

namespace remora::fs {
namespace {

// Lines look like "12:00:00.123456 W [remorafs 42] message\n".
void Forward(FILE* in) {
  char* line = nullptr;
  size_t cap = 0;
  ssize_t n;
  while ((n = ::getline(&line, &cap, in)) > 0) {
    std::string_view l(line, static_cast<size_t>(n));
    if (l.back() == '\n') l.remove_suffix(1);
    char level = l.size() > 16 ? l[16] : 'I';
    int prio = level == 'E' ? LOG_ERR : level == 'W' ? LOG_WARNING : level == 'I' ? LOG_INFO : LOG_DEBUG;
    size_t msg = l.find("] ");
    std::string text(msg == std::string_view::npos ? l : l.substr(msg + 2));
    ::syslog(prio, "%s", text.c_str());
  }
  std::free(line);
}

}  // namespace

int StartSyslogSink(const char* ident) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return -1;
  FILE* in = ::fdopen(p[0], "r");
  if (in == nullptr) {
    ::close(p[0]);
    ::close(p[1]);
    return -1;
  }
  ::openlog(ident, LOG_PID, LOG_DAEMON);
  sigset_t stop, old;
  sigemptyset(&stop);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&stop, s);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  std::thread(Forward, in).detach();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return p[1];
}

}  // namespace remora::fs
