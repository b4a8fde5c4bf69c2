// trace_text: every instruction one run of a program executes in that program's own text, by
// single-stepping it (and its threads and forks) under ptrace. A development tool for
// launcher/hot_text.ld (tools/text-order/make_order.py reads its output); not part of crun.
//
//   trace_text OUT PROGRAM [ARGS...]
//
// OUT gets one hexadecimal offset per line: each distinct instruction address executed inside
// PROGRAM's file mapping, less the mapping's start (so a PIE's offsets match its link-time
// addresses). A tracee that execs another program is let go at its exec. Single-threaded; the
// run is ~100,000x slower than a free one, so the program's own timeouts must allow for it.
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

enum { max_text = 64 << 20 };

static unsigned char* seen;  // one byte per offset of the program's file mapping
static uint64_t base, limit;  // the mapping of the traced program (same in every tracee: forks copy it)

static void find_mapping(pid_t pid, const char* exe) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/maps", pid);
  FILE* f = fopen(path, "re");
  if (!f) { perror("maps"); exit(1); }
  uint64_t lo = 0, hi = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b, off;
    char perms[8], file[4096] = "";
    if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &a, &b, perms, &off, file) < 4) continue;
    if (strcmp(file, exe) != 0) continue;
    if (!lo || a < lo) lo = a - off;
    if (b > hi) hi = b;
  }
  fclose(f);
  if (!lo || hi - lo > max_text) { fprintf(stderr, "trace_text: no mapping of %s\n", exe); exit(1); }
  base = lo;
  limit = hi;
}

int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: trace_text OUT PROGRAM [ARGS...]\n"); return 2; }
  char exe[4096];
  if (!realpath(argv[2], exe)) { perror(argv[2]); return 2; }
  seen = calloc(max_text, 1);
  if (!seen) { perror("calloc"); return 1; }
  pid_t child = fork();
  if (child < 0) { perror("fork"); return 1; }
  if (child == 0) {
    if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) { perror("ptrace"); _exit(127); }
    raise(SIGSTOP);
    execv(argv[2], argv + 2);
    perror("execv");
    _exit(127);
  }
  int status;
  waitpid(child, &status, 0);
  ptrace(PTRACE_SETOPTIONS, child, 0,
         PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC |
             PTRACE_O_EXITKILL);
  ptrace(PTRACE_CONT, child, 0, 0);
  int started = 0, exit_code = 0;
  unsigned long steps = 0;
  for (;;) {
    pid_t tid = waitpid(-1, &status, __WALL);
    if (tid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: every tracee has gone
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      if (tid == child) exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      continue;
    }
    if (!WIFSTOPPED(status)) continue;
    int sig = WSTOPSIG(status), event = status >> 16, deliver = 0;
    if (event == PTRACE_EVENT_EXEC) {
      if (started) {  // a worker or helper became another program: not ours to trace
        ptrace(PTRACE_DETACH, tid, 0, 0);
        continue;
      }
      find_mapping(tid, exe);
      started = 1;
    } else if (event == 0 && sig != SIGTRAP && sig != SIGSTOP) {
      deliver = sig;  // a real signal: pass it on
    }
    if (started) {
      struct user_regs_struct regs;
      if (ptrace(PTRACE_GETREGS, tid, 0, &regs) == 0 && regs.rip >= base && regs.rip < limit) {
        seen[regs.rip - base] = 1;
        ++steps;
      }
    }
    ptrace(started ? PTRACE_SINGLESTEP : PTRACE_CONT, tid, 0, (void*)(long)deliver);
  }
  FILE* out = fopen(argv[1], "we");
  if (!out) { perror(argv[1]); return 1; }
  unsigned long distinct = 0;
  for (uint64_t i = 0; i < limit - base; ++i)
    if (seen[i]) { fprintf(out, "%lx\n", (unsigned long)i); ++distinct; }
  fclose(out);
  fprintf(stderr, "trace_text: %lu steps in the program, %lu distinct instructions; exit %d\n", steps,
          distinct, exit_code);
  return exit_code;
}
