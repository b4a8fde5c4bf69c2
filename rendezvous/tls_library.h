// OpenSSL on demand: crun speaks TLS only to an https etcd, so it does not link libssl and
// libcrypto (loading and relocating them would add 1.1 to 1.6 ms, a third, to every standalone
// job's start: docs/decisions.md).
// tls_library.cc defines the OpenSSL functions that Boost.Asio's TLS stream and the etcd client
// call; each forwards to Debian's libssl.so.3 (the system's copy, so its security updates reach
// crun), opened with dlopen the first time TLS is needed.
//
// Contract
//   - load_tls_library() opens libssl.so.3 and resolves every forwarded function (their
//     OPENSSL_3.0.0 versions); on failure it throws std::runtime_error with one line naming the
//     library and dlerror's reason, and a later call tries again. Callers that are about to use
//     TLS (the etcd client, for https) call it first, so a missing library is a clean error.
//   - A forwarded function called before a successful load loads the library then; if that
//     fails, it prints one line to stderr and aborts (it cannot return an error in OpenSSL's
//     terms).
//   - tls_library_loaded() says whether this process has it (tests, diagnostics).
//
// Threading
//   Any thread: the load runs once under a mutex; the resolved functions are then read-only.
#pragma once

namespace crun {

void load_tls_library();
bool tls_library_loaded();

}  // namespace crun
