# moec-static: the moec CLI relinked so that it runs on a machine without
# LLVM 22: MLIR, LLVM and lld from their static archives, libstdc++, libgcc,
# zlib and zstd static; only glibc stays dynamic (see docs/performance.md).
#
# Debian's imported MLIR/LLVM targets name the MLIR and LLVM dylibs, so
# moec-static reuses moec's object files and this project's archives and
# names every other archive by path. Included from tools/CMakeLists.txt
# when MOEC_STATIC is ON; it costs one link, nothing is compiled again.

include(${PROJECT_SOURCE_DIR}/cmake/ProjectArchives.cmake)

set(moec_static_targets)
moec_collect_project_archives(moec moec_static_targets)

file(GLOB moec_static_mlir ${LLVM_LIBRARY_DIR}/libMLIR*.a)
file(GLOB moec_static_llvm ${LLVM_LIBRARY_DIR}/libLLVM*.a)
if(NOT moec_static_mlir OR NOT moec_static_llvm)
  message(FATAL_ERROR "MOEC_STATIC: no libMLIR*.a / libLLVM*.a in "
                      "${LLVM_LIBRARY_DIR} (install the -dev packages)")
endif()
find_library(MOEC_STATIC_ZLIB NAMES libz.a REQUIRED)
find_library(MOEC_STATIC_ZSTD NAMES libzstd.a REQUIRED)

add_executable(moec-static $<TARGET_OBJECTS:moec>
                           ${PROJECT_SOURCE_DIR}/cmake/static/PollyPluginInfo.cpp)
set_target_properties(moec-static PROPERTIES LINKER_LANGUAGE CXX)
target_include_directories(moec-static PRIVATE ${LLVM_INCLUDE_DIRS})
add_dependencies(moec-static moec ${moec_static_targets})
set(moec_static_archives)
foreach(lib IN LISTS moec_static_targets)
  list(APPEND moec_static_archives $<TARGET_FILE:${lib}>)
endforeach()
# lld resolves references between archives in any order, so one list of
# every archive is enough; only the members moec reaches are linked.
target_link_options(moec-static PRIVATE -fuse-ld=lld -static-libstdc++
                    -static-libgcc -Wl,--gc-sections)
target_link_libraries(moec-static PRIVATE
  ${moec_static_archives}
  ${LLVM_LIBRARY_DIR}/liblldELF.a ${LLVM_LIBRARY_DIR}/liblldCommon.a
  ${moec_static_mlir} ${moec_static_llvm}
  ${MOEC_STATIC_ZSTD} ${MOEC_STATIC_ZLIB} dl pthread m)
