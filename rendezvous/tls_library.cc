#include "rendezvous/tls_library.h"

#include <dlfcn.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

// Every OpenSSL function crun's objects refer to (`nm -D --undefined-only crun` lists them when
// one is missing here: the link of crun then fails naming it): the etcd client's, and all that
// Asio's compiled TLS part (asio_ssl_impl.cc) calls, used by crun or not. Each entry: return
// type, name, parameters, the arguments passed on. The definitions below must match OpenSSL's own
// declarations, so the compiler checks every signature against the headers.
#define CRUN_OPENSSL_FUNCTIONS(X)                                                                     \
  X(long, BIO_ctrl, (BIO * b, int cmd, long larg, void* parg), (b, cmd, larg, parg))                  \
  X(size_t, BIO_ctrl_pending, (BIO * b), (b))                                                         \
  X(int, BIO_free, (BIO * a), (a))                                                                    \
  X(int, BIO_new_bio_pair, (BIO * *b1, size_t w1, BIO * *b2, size_t w2), (b1, w1, b2, w2))            \
  X(BIO*, BIO_new_file, (const char* filename, const char* mode), (filename, mode))                   \
  X(BIO*, BIO_new_mem_buf, (const void* buf, int len), (buf, len))                                    \
  X(int, BIO_read, (BIO * b, void* data, int len), (b, data, len))                                    \
  X(int, BIO_write, (BIO * b, const void* data, int len), (b, data, len))                             \
  X(void, CRYPTO_free, (void* p, const char* file, int line), (p, file, line))                        \
  X(void, ERR_clear_error, (void), ())                                                                \
  X(unsigned long, ERR_get_error, (void), ())                                                         \
  X(const char*, ERR_lib_error_string, (unsigned long e), (e))                                        \
  X(unsigned long, ERR_peek_error, (void), ())                                                        \
  X(unsigned long, ERR_peek_last_error, (void), ())                                                   \
  X(const char*, ERR_reason_error_string, (unsigned long e), (e))                                     \
  X(void, EVP_PKEY_free, (EVP_PKEY * k), (k))                                                         \
  X(int, EVP_PKEY_is_a, (const EVP_PKEY* k, const char* name), (k, name))                             \
  X(void, GENERAL_NAMES_free, (GENERAL_NAMES * a), (a))                                               \
  X(int, OPENSSL_sk_num, (const OPENSSL_STACK* sk), (sk))                                             \
  X(void*, OPENSSL_sk_value, (const OPENSSL_STACK* sk, int i), (sk, i))                               \
  X(EVP_PKEY*, PEM_read_bio_Parameters, (BIO * b, EVP_PKEY** x), (b, x))                              \
  X(EVP_PKEY*, PEM_read_bio_PrivateKey, (BIO * b, EVP_PKEY** x, pem_password_cb* cb, void* u),        \
    (b, x, cb, u))                                                                                    \
  X(X509*, PEM_read_bio_X509, (BIO * b, X509** x, pem_password_cb* cb, void* u), (b, x, cb, u))       \
  X(X509*, PEM_read_bio_X509_AUX, (BIO * b, X509** x, pem_password_cb* cb, void* u), (b, x, cb, u))   \
  X(uint64_t, SSL_CTX_clear_options, (SSL_CTX * c, uint64_t op), (c, op))                             \
  X(long, SSL_CTX_ctrl, (SSL_CTX * c, int cmd, long larg, void* parg), (c, cmd, larg, parg))          \
  X(void, SSL_CTX_free, (SSL_CTX * c), (c))                                                           \
  X(X509_STORE*, SSL_CTX_get_cert_store, (const SSL_CTX* c), (c))                                     \
  X(pem_password_cb*, SSL_CTX_get_default_passwd_cb, (SSL_CTX * c), (c))                              \
  X(void*, SSL_CTX_get_default_passwd_cb_userdata, (SSL_CTX * c), (c))                                \
  X(void*, SSL_CTX_get_ex_data, (const SSL_CTX* c, int idx), (c, idx))                                \
  X(SSL_verify_cb, SSL_CTX_get_verify_callback, (const SSL_CTX* c), (c))                              \
  X(int, SSL_CTX_get_verify_mode, (const SSL_CTX* c), (c))                                            \
  X(int, SSL_CTX_load_verify_locations, (SSL_CTX * c, const char* file, const char* path), (c, file, path)) \
  X(SSL_CTX*, SSL_CTX_new, (const SSL_METHOD* m), (m))                                                \
  X(int, SSL_CTX_set0_tmp_dh_pkey, (SSL_CTX * c, EVP_PKEY* k), (c, k))                                \
  X(void, SSL_CTX_set_default_passwd_cb, (SSL_CTX * c, pem_password_cb* cb), (c, cb))                 \
  X(void, SSL_CTX_set_default_passwd_cb_userdata, (SSL_CTX * c, void* u), (c, u))                     \
  X(int, SSL_CTX_set_default_verify_paths, (SSL_CTX * c), (c))                                        \
  X(int, SSL_CTX_set_ex_data, (SSL_CTX * c, int idx, void* data), (c, idx, data))                     \
  X(uint64_t, SSL_CTX_set_options, (SSL_CTX * c, uint64_t op), (c, op))                               \
  X(void, SSL_CTX_set_verify, (SSL_CTX * c, int mode, SSL_verify_cb cb), (c, mode, cb))               \
  X(void, SSL_CTX_set_verify_depth, (SSL_CTX * c, int depth), (c, depth))                             \
  X(int, SSL_CTX_use_PrivateKey, (SSL_CTX * c, EVP_PKEY* k), (c, k))                                  \
  X(int, SSL_CTX_use_PrivateKey_file, (SSL_CTX * c, const char* file, int type), (c, file, type))     \
  X(int, SSL_CTX_use_certificate, (SSL_CTX * c, X509* x), (c, x))                                     \
  X(int, SSL_CTX_use_certificate_ASN1, (SSL_CTX * c, int len, const unsigned char* d), (c, len, d))   \
  X(int, SSL_CTX_use_certificate_chain_file, (SSL_CTX * c, const char* file), (c, file))              \
  X(int, SSL_CTX_use_certificate_file, (SSL_CTX * c, const char* file, int type), (c, file, type))    \
  X(int, SSL_accept, (SSL * s), (s))                                                                  \
  X(int, SSL_connect, (SSL * s), (s))                                                                 \
  X(long, SSL_ctrl, (SSL * s, int cmd, long larg, void* parg), (s, cmd, larg, parg))                  \
  X(void, SSL_free, (SSL * s), (s))                                                                   \
  X(SSL_CTX*, SSL_get_SSL_CTX, (const SSL* s), (s))                                                   \
  X(int, SSL_get_error, (const SSL* s, int ret), (s, ret))                                            \
  X(void*, SSL_get_ex_data, (const SSL* s, int idx), (s, idx))                                        \
  X(int, SSL_get_ex_data_X509_STORE_CTX_idx, (void), ())                                              \
  X(int, SSL_get_shutdown, (const SSL* s), (s))                                                       \
  X(SSL_verify_cb, SSL_get_verify_callback, (const SSL* s), (s))                                      \
  X(int, SSL_get_verify_mode, (const SSL* s), (s))                                                    \
  X(SSL*, SSL_new, (SSL_CTX * c), (c))                                                                \
  X(int, SSL_read, (SSL * s, void* buf, int num), (s, buf, num))                                      \
  X(void, SSL_set_bio, (SSL * s, BIO * r, BIO * w), (s, r, w))                                        \
  X(int, SSL_set_ex_data, (SSL * s, int idx, void* data), (s, idx, data))                             \
  X(void, SSL_set_verify, (SSL * s, int mode, SSL_verify_cb cb), (s, mode, cb))                       \
  X(void, SSL_set_verify_depth, (SSL * s, int depth), (s, depth))                                     \
  X(int, SSL_shutdown, (SSL * s), (s))                                                                \
  X(int, SSL_write, (SSL * s, const void* buf, int num), (s, buf, num))                               \
  X(const SSL_METHOD*, TLS_client_method, (void), ())                                                 \
  X(const SSL_METHOD*, TLS_method, (void), ())                                                        \
  X(const SSL_METHOD*, TLS_server_method, (void), ())                                                 \
  X(ASN1_STRING*, X509_NAME_ENTRY_get_data, (const X509_NAME_ENTRY* e), (e))                          \
  X(X509_NAME_ENTRY*, X509_NAME_get_entry, (const X509_NAME* n, int loc), (n, loc))                   \
  X(int, X509_NAME_get_index_by_NID, (const X509_NAME* n, int nid, int last), (n, nid, last))         \
  X(X509*, X509_STORE_CTX_get_current_cert, (const X509_STORE_CTX* c), (c))                           \
  X(int, X509_STORE_CTX_get_error_depth, (const X509_STORE_CTX* c), (c))                              \
  X(void*, X509_STORE_CTX_get_ex_data, (const X509_STORE_CTX* c, int idx), (c, idx))                  \
  X(int, X509_STORE_add_cert, (X509_STORE * s, X509* x), (s, x))                                      \
  X(int, X509_check_host, (X509 * x, const char* chk, size_t len, unsigned int flags, char** peer),   \
    (x, chk, len, flags, peer))                                                                       \
  X(int, X509_check_ip_asc, (X509 * x, const char* ip, unsigned int flags), (x, ip, flags))           \
  X(void, X509_free, (X509 * x), (x))                                                                 \
  X(void*, X509_get_ext_d2i, (const X509* x, int nid, int* crit, int* idx), (x, nid, crit, idx))      \
  X(X509_NAME*, X509_get_subject_name, (const X509* x), (x))                                          \
  X(EVP_PKEY*, d2i_PrivateKey_bio, (BIO * b, EVP_PKEY** k), (b, k))

namespace crun {
namespace {

// The soname of OpenSSL 3 (CMake requires 3.x) and the symbol version its functions carry.
constexpr const char* kLibrary = "libssl.so.3";
constexpr const char* kVersion = "OPENSSL_3.0.0";

enum Slot : int {
#define CRUN_SLOT(ret, name, params, args) k_##name,
  CRUN_OPENSSL_FUNCTIONS(CRUN_SLOT)
#undef CRUN_SLOT
  kSlots
};

constexpr const char* kNames[kSlots] = {
#define CRUN_NAME(ret, name, params, args) #name,
    CRUN_OPENSSL_FUNCTIONS(CRUN_NAME)
#undef CRUN_NAME
};

void* g_function[kSlots];
std::atomic<bool> g_loaded{false};
std::mutex g_load;

void load_or_abort() {
  try {
    load_tls_library();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crun: %s\n", e.what());
    std::abort();
  }
}

template <typename F>
F function(Slot slot) {
  if (!g_loaded.load(std::memory_order_acquire)) load_or_abort();
  return reinterpret_cast<F>(g_function[slot]);
}

}  // namespace

void load_tls_library() {
  std::lock_guard lock(g_load);
  if (g_loaded.load(std::memory_order_relaxed)) return;
  // RTLD_LOCAL: OpenSSL's names stay out of the process' global scope (crun's own definitions
  // of them are the ones its code binds to); dlvsym on the handle searches libssl, then libcrypto.
  void* handle = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw std::runtime_error(std::string("cannot load ") + kLibrary + " for TLS: " + (why ? why : "unknown reason") +
                             " (install Debian's libssl3)");
  }
  for (int i = 0; i < kSlots; ++i) {
    g_function[i] = ::dlvsym(handle, kNames[i], kVersion);
    if (g_function[i] == nullptr) {
      throw std::runtime_error(std::string(kLibrary) + " lacks " + kNames[i] + "@" + kVersion + " (not OpenSSL 3?)");
    }
  }
  g_loaded.store(true, std::memory_order_release);
}

bool tls_library_loaded() { return g_loaded.load(std::memory_order_acquire); }

}  // namespace crun

// The forwarders, with OpenSSL's names and C linkage.
#define CRUN_FORWARD(ret, name, params, args) \
  extern "C" ret name params { return crun::function<decltype(&::name)>(crun::k_##name) args; }
CRUN_OPENSSL_FUNCTIONS(CRUN_FORWARD)
#undef CRUN_FORWARD
