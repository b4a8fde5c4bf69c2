// Local transport: a store on a loopback or wildcard address is also reachable, from its own
// network namespace, through an abstract Unix-domain socket named after its TCP endpoint. Same
// protocol, same handshake and token; no TCP stack in between.
//
// Contract
//   - local_socket_name(host, port): the abstract name, "crun-store/<host>:<port>" ("[v6]:port"),
//     with the leading NUL that puts it in the abstract namespace (no file, gone with its socket,
//     scoped to the network namespace, as the TCP port is).
//   - listen_local(host, port): for a loopback (127/8, ::1) or wildcard (0.0.0.0, ::) host, a
//     listening, non-blocking, close-on-exec socket bound to that name, the host written as
//     inet_ntop writes it ("0:0::1" listens as "::1", the name its clients derive); -1 for any
//     other host or when the name is taken (another store, or a squatter: clients then use TCP).
//   - connect_local(addr): for a TCP destination on this host (loopback or wildcard), connects to
//     the name of that endpoint or of its family's wildcard listener; the fd (non-blocking,
//     close-on-exec, as a TCP attempt leaves it) only when the listener belongs to this user or
//     to root (SO_PEERCRED: any local user can bind an abstract name first, and the hello carries
//     the token), else -1 and the caller connects over TCP. `local_ip` gets the connection's local address as TCP's
//     getsockname would have told it (127.0.0.1 or ::1: the loopback route's source address).
//   No retries and no waiting: a refused, missing or full (EAGAIN) listener is -1 at once.
//   Callers that want TCP alone do not call them (StoreServerOptions::local_socket,
//   StoreClientOptions::local_socket; crun sets both from CRUN_STORE_TCP_ONLY).
//
// Threading: free functions, no shared state; any thread.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace crun {

std::string local_socket_name(const std::string& host, std::uint16_t port);
int listen_local(const std::string& host, std::uint16_t port);
int connect_local(const sockaddr* addr, socklen_t len, std::string& local_ip);

}  // namespace crun
