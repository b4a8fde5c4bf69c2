// Boost.Asio's TLS stream, compiled once (base/asio_impl.cc says why): the etcd client's https
// is its only user. The OpenSSL functions it calls are tls_library.cc's forwarders.
#include <boost/asio/ssl/impl/src.hpp>
