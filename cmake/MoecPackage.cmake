# cmake --install: the runtime as a CMake package (find_package(moec_runtime)
# -> moec::runtime) and a pkg-config file (moec_runtime.pc), both
# relocatable (paths relative to where they are installed), plus the
# emulated HIP device next to the runtime. The Python package installs from
# python/CMakeLists.txt. Included from the top-level CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_target_property(moec_runtime_version moec_runtime_shared VERSION)
get_target_property(moec_runtime_soversion moec_runtime_shared SOVERSION)
set(moec_runtime_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/moec_runtime)

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/moec_runtimeConfig.cmake.in
  ${CMAKE_BINARY_DIR}/packaging/moec_runtimeConfig.cmake
  INSTALL_DESTINATION ${moec_runtime_cmake_dir}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(
  ${CMAKE_BINARY_DIR}/packaging/moec_runtimeConfigVersion.cmake
  VERSION ${moec_runtime_version} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/packaging/moec_runtimeConfig.cmake
              ${CMAKE_BINARY_DIR}/packaging/moec_runtimeConfigVersion.cmake
  DESTINATION ${moec_runtime_cmake_dir})

# pkg-config: prefix relative to the .pc file's folder (${pcfiledir}).
file(RELATIVE_PATH moec_pc_to_prefix /moec-prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig
     /moec-prefix)
configure_file(${CMAKE_CURRENT_LIST_DIR}/moec_runtime.pc.in
  ${CMAKE_BINARY_DIR}/packaging/moec_runtime.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/moec_runtime.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(TARGET moec_emulated_hip)
  # It links LLVM's and MLIR's shared libraries from their own folder.
  set_target_properties(moec_emulated_hip PROPERTIES
    INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS moec_emulated_hip LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

  # The installed tree used the way an engine uses it: the C example built
  # with find_package and with pkg-config (test/install), run on the
  # emulated device and checked by the oracle; the installed Python package
  # finds the installed runtime.
  find_package(Python3 COMPONENTS Interpreter)
  add_test(NAME install-tree
    COMMAND ${PROJECT_SOURCE_DIR}/test/install/run_install_test.sh
            ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install-tree
            $<TARGET_FILE:moec> ${PROJECT_SOURCE_DIR}
            ${CMAKE_INSTALL_LIBDIR} ${MOEC_PYTHON_INSTALL_DIR})
  set_tests_properties(install-tree PROPERTIES LABELS "slow;install" TIMEOUT 900)
endif()
