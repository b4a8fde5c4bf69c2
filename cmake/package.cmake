# What `cmake --install` puts beside the worker library (worker_runtime/CMakeLists.txt) and the
# crun command (launcher/CMakeLists.txt): the sbatch templates and the docs; and the Debian package
# CPack builds from it (`cpack -G DEB` in the build folder). Its Depends line is computed by
# dpkg-shlibdeps from what crun links (libc6, libstdc++6, ...), plus libssl3, named here: crun
# opens it with dlopen for TLS to etcd (rendezvous/tls_library.h), which dpkg-shlibdeps cannot
# see. So `apt install ./crun_*.deb` pulls the runtime libraries on a fresh Debian.
include(GNUInstallDirs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/scripts/sbatch/ DESTINATION ${CMAKE_INSTALL_DATADIR}/crun/sbatch)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME crun)
set(CPACK_PACKAGE_VENDOR "crun")
set(CPACK_PACKAGE_CONTACT "crun developers <crun@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Elastic launcher for distributed training, torchrun's native peer")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libssl3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch, slurm-client, etcd-server")
# As a Debian package does: stripped programs and library in crun_*.deb, their debug info split
# out into crun-dbgsym_*.ddeb beside it (under /usr/lib/debug/.build-id: gdb, perf and eu-stack
# find it there once installed).
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
include(CPack)
