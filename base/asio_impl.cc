// Boost.Asio's compiled part, once for the whole tree (crun_asio, base/CMakeLists.txt). The tree
// is built with BOOST_ASIO_SEPARATE_COMPILATION (the top CMakeLists.txt): a file that includes
// Asio sees declarations of its non-template code (scheduler, reactor, socket and error
// functions), defined here, instead of compiling their definitions again. The TLS part is compiled
// beside the etcd client that uses it (rendezvous/asio_ssl_impl.cc).
#include <boost/asio/impl/src.hpp>
