// accept_connection(listen_fd): the next pending connection of a listening socket, close-on-exec
// and non-blocking from accept4 on, so that no process spawned meanwhile inherits it (Asio's
// accept sets neither flag).
//
// Contract
//   - {kConnection, fd}: a connection; the caller owns `fd`.
//   - {kNoneLeft, -1}: none pending (EAGAIN on a non-blocking listener), or an error a later
//     readiness does not repeat.
//   - {kOutOfDescriptors, -1}: EMFILE, ENFILE, ENOBUFS or ENOMEM. The connection stays pending
//     and the listener readable: the caller tries again after a delay, not at the next readiness
//     (that would spin).
//   EINTR and ECONNABORTED are retried inside.
//
// Threading
//   Stateless; any thread.
#pragma once

namespace crun {

struct AcceptedConnection {
  enum Outcome { kConnection, kNoneLeft, kOutOfDescriptors } outcome = kNoneLeft;
  int fd = -1;
};

AcceptedConnection accept_connection(int listen_fd);

}  // namespace crun
